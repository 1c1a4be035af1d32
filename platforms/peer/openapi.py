"""The peer API's OpenAPI 3.1 document (SPEC section 5), served at ``GET /openapi.json``.

Data, not code: one function builds the dict so a client generator, an operator or a fuzzer
(tests/test_peer_fuzz.py runs schemathesis from it) reads the same contract the adapter serves.
The schemas say exactly what :mod:`platforms.peer.convert` accepts, so input the document calls
invalid gets a 4xx and input it calls valid is served; tests/test_peer_fuzz.py checks both, and
that the document's routes are the ones the app registers.
"""

from __future__ import annotations

from typing import Any

from platforms.peer import _responses_schema
from platforms.peer._admin_openapi import ADMIN_SCHEMAS, TICKET_SCHEME, admin_paths
from platforms.peer._approvals import CALL_ID
from platforms.peer._schemas import IDEMPOTENCY_KEY, SCHEMAS, SESSION_ID
from platforms.peer._schemas import ref as _ref
from platforms.peer.convert import MAX_ROW_ID, MODEL_NAME, TRANSCRIPT_PAGE, TRANSCRIPT_PAGE_MAX


def _json(schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    content = {"application/json": {"schema": schema}}
    return {"description": description, "content": content, **extra}


def _errors(*statuses: str) -> dict[str, Any]:
    return {status: _ref("responses", f"E{status}") for status in statuses}


# Errors every protected route may answer besides its own (403 and 421 only without tokens).
_COMMON = ("401", "403", "404", "405", "421", "429", "500")

_ERROR_RESPONSES: dict[str, tuple[str, dict[str, Any]]] = {
    "400": ("Bad input: malformed JSON, wrong types, a bad session id or header.", {}),
    "401": (
        "No valid bearer token (only when peer.tokens is set).",
        {"WWW-Authenticate": _ref("headers", "WWW-Authenticate")},
    ),
    "403": ("No tokens set (loopback only) and the request carries a foreign Origin.", {}),
    "404": (
        "No such route, or a session outside the token's peer.tokens sessions globs (the"
        " same answer as for a session that does not exist).",
        {},
    ),
    "405": ("The route does not take this method.", {"Allow": _ref("headers", "Allow")}),
    "409": ("The response is still in progress (DELETE /v1/responses/{id}).", {}),
    "413": (
        "The body is over peer.max_body_bytes, the message over gateway.max_message_chars,"
        " or an attachment over agent.max_attachment_bytes (nothing was stored).",
        {},
    ),
    "415": ("No tokens set (loopback only) and a POST body that is not application/json.", {}),
    "421": ("No tokens set (loopback only) and a Host that is not a loopback name.", {}),
    "422": (
        "This Idempotency-Key was used in this session with another message; use a new key."
        " (/v1/chat/completions also: nothing in the message could be used, its attachments"
        " too large, of a type botmux cannot read, or voice without [transcription].)",
        {},
    ),
    "429": (
        "Too many failed auth attempts from this address (peer.auth_fail_limit), this"
        " token's request rate (peer.token_requests_per_min) is used up, or too many messages"
        " wait (gateway.max_pending_per_conversation, gateway.max_pending_total): nothing"
        " was stored.",
        {"Retry-After": _ref("headers", "Retry-After")},
    ),
    "500": ("An unexpected error; the body says nothing of it, botmux's log does.", {}),
    "502": ("The turn failed for good upstream (OpenAI-compatible route only).", {}),
    "503": (
        "botmux is shutting down (Retry-After), the turn failed for a retryable reason, or"
        " (before any request is read) every connection slot holds a request in progress.",
        {"Retry-After": _ref("headers", "Retry-After")},
    ),
}

_PARAMETERS: dict[str, Any] = {
    "SessionId": {
        "name": "session_id",
        "in": "path",
        "required": True,
        "description": "The conversation is peer:<session_id>.",
        "schema": {"type": "string", "pattern": SESSION_ID},
    },
    "IdempotencyKey": {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "A repeat with the same key (in the same session) returns the same"
        " reply and runs no second turn; with another message it is 422. After a retryable"
        " failure the first repeat runs the turn once more. Without X-Botmux-Session and"
        " user, a completion's key names a conversation of the token's own.",
        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY},
    },
    "BotmuxSession": {
        "name": "X-Botmux-Session",
        "in": "header",
        "required": False,
        "description": "The session of an OpenAI-compatible request; else the body's user"
        " field; else a conversation of its own.",
        "schema": {"type": "string", "pattern": SESSION_ID},
    },
}

_HEADERS: dict[str, Any] = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "string", "pattern": r"^[0-9]+$"},
    },
    "WWW-Authenticate": {"schema": {"type": "string"}},
    "Allow": {"schema": {"type": "string"}},
}


def _paths() -> dict[str, Any]:
    open_route: dict[str, Any] = {"security": []}
    return {
        "/api/sessions/{session_id}/chat": {
            "post": {
                "operationId": "chat",
                "summary": "Send one message to a session and wait for the reply.",
                "description": "Concurrent requests to one session are answered in admission"
                " order, one turn each. A failed turn is still 200: the reply says what went"
                " wrong and failure names its class. Streamed (stream: true, or Accept:"
                " text/event-stream): delta events as the model writes, tool events as its"
                " tool calls run, approval events when one waits for a yes, then message; once"
                " a delta was sent, a failure ends the turn (its class in message's failure)."
                " Only a streamed chat can be asked for a yes: a plain one is offered no tool"
                " that needs one.",
                "parameters": [
                    _ref("parameters", "SessionId"),
                    _ref("parameters", "IdempotencyKey"),
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("schemas", "ChatRequest")}},
                },
                "responses": {
                    "200": {
                        "description": "The reply (or its SSE events).",
                        "content": {
                            "application/json": {"schema": _ref("schemas", "ChatResponse")},
                            "text/event-stream": {"schema": _ref("schemas", "ChatEvent")},
                        },
                    },
                    **_errors("400", "413", "415", "422", "503", *_COMMON),
                },
            }
        },
        "/api/sessions/{session_id}/approvals/{call_id}": {
            "post": {
                "operationId": "approve",
                "summary": "Answer a tool call that waits for a yes (SPEC 15).",
                "description": "The call is named by the model's id, as the chat stream's"
                " approval event (or the transcript's awaiting tool row) gives it; the newest"
                " call of the session with that id that still waits is decided. The wait is"
                " stored: the answer works without a stream, on any node, after a restart.",
                "parameters": [
                    _ref("parameters", "SessionId"),
                    {
                        "name": "call_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": CALL_ID},
                        "example": "call_1",
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("schemas", "ApprovalAnswer")}},
                },
                "responses": {
                    "200": _json(_ref("schemas", "ApprovalResult"), "The answer was stored."),
                    "409": _json(
                        _ref("schemas", "Error"),
                        "The call was answered already (or its approval timed out).",
                    ),
                    **_errors("400", "413", "415", "503", *_COMMON),
                },
            }
        },
        "/api/sessions/{session_id}": {
            "delete": {
                "operationId": "deleteSession",
                "summary": "Delete the session: its messages and undelivered replies.",
                "parameters": [_ref("parameters", "SessionId")],
                "responses": {
                    "200": _json(_ref("schemas", "Deleted"), "Deleted."),
                    **_errors("400", "503", *_COMMON),
                },
            }
        },
        "/api/sessions/{session_id}/messages": {
            "get": {
                "operationId": "transcript",
                "summary": "The session's stored messages, oldest first, a page at a time.",
                "description": "The newest `limit` messages (below `before`, when given),"
                " oldest first; `next`, when not null, is the `before` of the page of older"
                " messages.",
                "parameters": [
                    _ref("parameters", "SessionId"),
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "description": f"Messages in the page (default {TRANSCRIPT_PAGE}).",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": TRANSCRIPT_PAGE_MAX,
                            "default": TRANSCRIPT_PAGE,
                        },
                    },
                    {
                        "name": "before",
                        "in": "query",
                        "required": False,
                        "description": "A message id (a page's `next`): only older messages.",
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
                    },
                ],
                "responses": {
                    "200": _json(_ref("schemas", "Transcript"), "The transcript."),
                    **_errors("400", "503", *_COMMON),
                },
            }
        },
        "/api/sessions/{session_id}/attachments/{sha256}": {
            "get": {
                "operationId": "attachment",
                "summary": "A stored attachment's bytes, with their content type (SPEC 9).",
                "description": "The sha256 of a file the transcript lists for this session;"
                " another session's file is not found through this one (404).",
                "parameters": [
                    _ref("parameters", "SessionId"),
                    {
                        "name": "sha256",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The bytes.",
                        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **_errors("400", "503", *_COMMON),
                },
            }
        },
        "/v1/chat/completions": {
            "post": {
                "operationId": "chatCompletions",
                "summary": "OpenAI-compatible chat completions, plain or streamed (SSE).",
                "parameters": [
                    _ref("parameters", "BotmuxSession"),
                    _ref("parameters", "IdempotencyKey"),
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": _ref("schemas", "CompletionRequest")}
                    },
                },
                "responses": {
                    "200": {
                        "description": 'The completion; with "stream": true, SSE chunks'
                        " (chat.completion.chunk objects) relayed as the model writes, ending in"
                        " data: [DONE]. Before the first piece, every 15 s of silence sends"
                        " ': keepalive'; a failure after the headers went out (a piece or a"
                        " comment) is one error event (the Error schema) before data: [DONE].",
                        "content": {
                            "application/json": {"schema": _ref("schemas", "Completion")},
                            # OpenAPI 3.1: an event stream's schema is that of each event.
                            "text/event-stream": {"schema": _ref("schemas", "CompletionEvent")},
                        },
                    },
                    **_errors("400", "413", "415", "422", "502", "503", *_COMMON),
                },
            }
        },
        **_responses_schema.paths(_errors, _COMMON),
        "/v1/models": {
            "get": {
                "operationId": "models",
                "summary": f"The one model botmux serves: {MODEL_NAME}.",
                "responses": {
                    "200": _json(_ref("schemas", "Models"), "The model list."),
                    **_errors(*_COMMON),
                },
            }
        },
        "/v1/models/{model_id}": {
            "get": {
                "operationId": "model",
                "summary": f"The model {MODEL_NAME}; any other id is 404.",
                "parameters": [
                    {
                        "name": "model_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": _json(_ref("schemas", "Model"), "The model."),
                    **_errors(*_COMMON),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process serves HTTP. Needs no token.",
                **open_route,
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["status"],
                            "properties": {"status": {"const": "ok"}},
                        },
                        "Alive.",
                    ),
                    **_errors("404", "405", "500"),
                },
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: the store is open and the adapters started. Needs no token.",
                **open_route,
                "responses": {
                    "200": _json(_ref("schemas", "Readiness"), "Ready."),
                    "503": _json(_ref("schemas", "Readiness"), "Not ready (yet, or any more)."),
                    **_errors("404", "405", "500"),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (text exposition format).",
                "responses": {
                    "200": {
                        "description": "The metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(*_COMMON),
                },
            }
        },
        "/api/admin/reload": {
            "post": {
                "operationId": "adminReload",
                "summary": "Re-read the config file the gateway started with (SPEC 13): keys"
                " that apply live change the next turn; a changed key that needs a restart"
                " refuses the whole file (409), a file that does not load too (422).",
                "parameters": [
                    {
                        "name": "dry_run",
                        "in": "query",
                        "required": False,
                        "schema": {"enum": ["0", "1", "true", "false", "yes", "no"]},
                        "description": "1: only say what a reload would change.",
                    }
                ],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("schemas", "ReloadRequest")}},
                },
                "responses": {
                    "200": _json(
                        _ref("schemas", "ReloadResult"), "Applied, unchanged, or dry run."
                    ),
                    "409": _json(_ref("schemas", "ReloadResult"), "Refused: needs a restart."),
                    "422": _json(_ref("schemas", "ReloadResult"), "The file does not load."),
                    **_errors("400", "413", "415", *_COMMON),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "responses": {
                    "200": _json({"type": "object"}, "The OpenAPI document."),
                    **_errors(*_COMMON),
                },
            }
        },
    }


def build_openapi(
    *, auth: bool, version: str = "0.1.0", extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The document; ``auth`` says whether bearer tokens are configured (peer.tokens);
    ``extra``: the paths of routes mounted on the listener (A2A's)."""
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "botmux peer API",
            "version": version,
            "description": "Peer agents and OpenAI clients talk to botmux's agent. Every error"
            ' is JSON: {"error": {"message", "type", "code", "status"}}.',
        },
        "paths": {**_paths(), **admin_paths(), **(extra or {})},  # admin API: SPEC 13
        "components": {
            "schemas": SCHEMAS | _responses_schema.SCHEMAS | ADMIN_SCHEMAS,
            "parameters": _PARAMETERS,
            "headers": _HEADERS,
            "responses": {
                f"E{status}": _json(_ref("schemas", "Error"), text, headers=headers)
                if headers
                else _json(_ref("schemas", "Error"), text)
                for status, (text, headers) in _ERROR_RESPONSES.items()
            },
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "One of peer.tokens, compared in constant time.",
                },
                "ticket": TICKET_SCHEME,
            },
        },
    }
    if auth:
        doc["security"] = [{"bearer": []}]
    return doc
