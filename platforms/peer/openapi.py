"""The peer API's OpenAPI 3.1 document (SPEC section 5), served at ``GET /openapi.json``.

Data, not code: one function builds the dict so a client generator, an operator or a fuzzer
(tests/test_peer_fuzz.py runs schemathesis from it) reads the same contract the adapter serves.
The schemas say exactly what :mod:`platforms.peer.convert` accepts, so input the document calls
invalid gets a 4xx and input it calls valid is served; tests/test_peer_fuzz.py checks both, and
that the document's routes are the ones the app registers.
"""

from __future__ import annotations

from typing import Any

from platforms.peer.convert import MODEL_NAME
from policy import REASONS

_SESSION_ID = r"^[A-Za-z0-9._:-]{1,128}$"
_IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,200}$"
# Some non-space character, and no NUL anywhere (the store and the model both refuse NUL).
_TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"
_NO_NUL = r"^[^\x00]*$"


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


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
    "413": (
        "The body is over peer.max_body_bytes, or the message over gateway.max_message_chars.",
        {},
    ),
    "415": ("No tokens set (loopback only) and a POST body that is not application/json.", {}),
    "421": ("No tokens set (loopback only) and a Host that is not a loopback name.", {}),
    "422": (
        "This Idempotency-Key was used in this session with another message; use a new key.",
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

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "description": "Every error, of every route, has this shape.",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "code", "status"],
                "additionalProperties": False,
                "properties": {
                    "message": {"type": "string", "minLength": 1},
                    "type": {"type": "string", "description": "Same as code."},
                    "param": {"type": "string", "description": "The request field refused."},
                    "code": {
                        "type": "string",
                        "description": "bad_request, bad_session_id, invalid_json, unauthorized,"
                        " not_found, method_not_allowed, body_too_large, rate_limited,"
                        " too_many_auth_failures, idempotency_key_reused, misdirected,"
                        " forbidden_origin, unsupported_media_type, unsupported_parameter"
                        " (tools, tool_choice, functions: botmux has none), model_not_found,"
                        " draining, internal_error,"
                        " or a failure class of the turn.",
                    },
                    "status": {"type": "integer", "minimum": 400, "maximum": 599},
                },
            }
        },
    },
    "Failure": {
        "type": ["object", "null"],
        "description": "Why the turn failed (the reply then says so), or null.",
        "required": ["reason", "retryable"],
        "additionalProperties": False,
        "properties": {
            "reason": {"type": "string", "enum": list(REASONS)},
            "retryable": {"type": "boolean"},
        },
    },
    "ChatRequest": {
        "type": "object",
        "required": ["message"],
        "additionalProperties": False,
        "properties": {
            "message": {
                "type": "string",
                "pattern": _TEXT,
                "description": "The user's text; /new, /status, /stop and /help are commands.",
            },
            "stream": {
                "type": ["boolean", "null"],
                "description": "Answer as SSE (delta events, then message); unset: as the"
                " Accept header asks (text/event-stream).",
            },
        },
    },
    "ChatEvent": {
        "type": "object",
        "description": "event: delta, data {content}: a piece of the answer as the model"
        " writes it; event: message, data: the ChatResponse (the last event); event: error,"
        " data: an Error (the turn could not be run).",
        "required": ["event", "data"],
        "properties": {
            "event": {"enum": ["delta", "message", "error"]},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    },
    "Usage": {
        "type": "object",
        "description": "The model's own token counts for the answer.",
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
        "properties": {
            "prompt_tokens": {"type": "integer", "minimum": 0},
            "completion_tokens": {"type": "integer", "minimum": 0},
            "total_tokens": {"type": "integer", "minimum": 0},
        },
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"const": MODEL_NAME},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
        },
    },
    "ChatResponse": {
        "type": "object",
        "required": ["session_id", "message", "failure"],
        "additionalProperties": False,
        "properties": {
            "session_id": {"type": "string", "pattern": _SESSION_ID},
            "message": {
                "type": "object",
                "required": ["role", "content"],
                "additionalProperties": False,
                "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}},
            },
            "failure": _ref("schemas", "Failure"),
        },
    },
    "Deleted": {
        "type": "object",
        "required": ["session_id", "deleted", "messages"],
        "additionalProperties": False,
        "properties": {
            "session_id": {"type": "string"},
            "deleted": {"const": True},
            "messages": {"type": "integer", "minimum": 0, "description": "Rows removed."},
        },
    },
    "Transcript": {
        "type": "object",
        "required": ["messages"],
        "additionalProperties": False,
        "properties": {
            "messages": {
                "type": "array",
                "description": "Oldest first.",
                "items": {
                    "type": "object",
                    "required": ["id", "role", "content", "created_at", "state"],
                    "additionalProperties": False,
                    "properties": {
                        "id": {"type": "integer"},
                        "role": {"type": "string", "enum": ["user", "assistant"]},
                        "content": {"type": "string"},
                        "created_at": {"type": "string", "format": "date-time"},
                        "state": {
                            "type": "string",
                            "enum": ["pending", "answered", "failed", "cancelled", "final"],
                        },
                        "failure": {"type": "string", "enum": list(REASONS)},
                        "usage": _ref("schemas", "Usage"),
                    },
                },
            }
        },
    },
    "TextPart": {
        "type": "object",
        "required": ["type", "text"],
        "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": _NO_NUL}},
    },
    "UserContent": {
        "description": "Text with some non-space character and no NUL: a string, or a list"
        " of text parts (joined with newlines).",
        "anyOf": [
            {"type": "string", "pattern": _TEXT},
            {
                "type": "array",
                "minItems": 1,
                "items": _ref("schemas", "TextPart"),
                "contains": {"type": "object", "properties": {"text": {"pattern": _TEXT}}},
            },
        ],
    },
    "CompletionMessage": {
        "anyOf": [
            {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "role": {"const": "user"},
                    "content": _ref("schemas", "UserContent"),
                },
            },
            {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"type": "string", "not": {"const": "user"}}},
            },
        ]
    },
    "CompletionRequest": {
        "type": "object",
        "description": "OpenAI's chat-completions request. Only the last user message is the"
        " new turn (botmux keeps the conversation's history itself), and only its content is"
        " checked: earlier messages are not, so a client's stored history never turns a good"
        " request into a bad one. response_format is passed to the model; tools, tool_choice"
        " and functions are refused (400 unsupported_parameter); other fields are accepted and"
        " ignored, as OpenAI clients send many.",
        "required": ["messages"],
        "properties": {
            "model": {"type": ["string", "null"], "description": "Echoed back; botmux answers."},
            "stream": {"type": ["boolean", "null"]},
            "stream_options": {
                "type": ["object", "null"],
                "properties": {"include_usage": {"type": ["boolean", "null"]}},
                "description": "include_usage: a last chunk with empty choices and the usage.",
            },
            "response_format": {
                "type": ["object", "null"],
                "required": ["type"],
                "properties": {"type": {"type": "string"}},
            },
            "user": {
                "type": ["string", "null"],
                "description": "The session when there is no X-Botmux-Session.",
            },
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": _ref("schemas", "CompletionMessage"),
                "contains": {"type": "object", "properties": {"role": {"const": "user"}}},
            },
        },
    },
    "Completion": {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["index", "message", "finish_reason"],
                    "properties": {
                        "index": {"type": "integer"},
                        "message": {
                            "type": "object",
                            "required": ["role", "content"],
                            "properties": {
                                "role": {"const": "assistant"},
                                "content": {"type": "string"},
                            },
                        },
                        "finish_reason": {"type": "string"},
                    },
                },
            },
            "usage": _ref("schemas", "Usage"),
        },
    },
    "CompletionEvent": {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "anyOf": [
                    {"const": "[DONE]"},
                    {
                        "type": "string",
                        "not": {"const": "[DONE]"},
                        "contentMediaType": "application/json",
                        "contentSchema": {
                            "anyOf": [_ref("schemas", "CompletionChunk"), _ref("schemas", "Error")]
                        },
                    },
                ]
            }
        },
    },
    "CompletionChunk": {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion.chunk"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["index", "delta", "finish_reason"],
                    "properties": {
                        "index": {"type": "integer"},
                        "delta": {
                            "type": "object",
                            "properties": {
                                "role": {"const": "assistant"},
                                "content": {"type": "string"},
                            },
                        },
                        "finish_reason": {"type": ["string", "null"]},
                    },
                },
            },
            "usage": _ref("schemas", "Usage"),
        },
    },
    "Models": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": _ref("schemas", "Model")},
        },
    },
    "Readiness": {
        "type": "object",
        "required": ["ready", "checks"],
        "additionalProperties": False,
        "properties": {
            "ready": {"type": "boolean"},
            "checks": {"type": "object", "additionalProperties": {"type": "boolean"}},
        },
    },
}

_PARAMETERS: dict[str, Any] = {
    "SessionId": {
        "name": "session_id",
        "in": "path",
        "required": True,
        "description": "The conversation is peer:<session_id>.",
        "schema": {"type": "string", "pattern": _SESSION_ID},
    },
    "IdempotencyKey": {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "A repeat with the same key (in the same session) returns the same"
        " reply and runs no second turn; with another message it is 422. After a retryable"
        " failure the first repeat runs the turn once more. Without X-Botmux-Session and"
        " user, a completion's key names a conversation of the token's own.",
        "schema": {"type": "string", "pattern": _IDEMPOTENCY_KEY},
    },
    "BotmuxSession": {
        "name": "X-Botmux-Session",
        "in": "header",
        "required": False,
        "description": "The session of an OpenAI-compatible request; else the body's user"
        " field; else a conversation of its own.",
        "schema": {"type": "string", "pattern": _SESSION_ID},
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
                " text/event-stream): delta events as the model writes, then message; once a"
                " delta was sent, a failure ends the turn (its class in message's failure).",
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
                "summary": "The session's stored messages, oldest first.",
                "parameters": [_ref("parameters", "SessionId")],
                "responses": {
                    "200": _json(_ref("schemas", "Transcript"), "The transcript."),
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


def build_openapi(*, auth: bool, version: str = "0.1.0") -> dict[str, Any]:
    """The document; ``auth`` says whether bearer tokens are configured (peer.tokens)."""
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "botmux peer API",
            "version": version,
            "description": "Peer agents and OpenAI clients talk to botmux's agent. Every error"
            ' is JSON: {"error": {"message", "type", "code", "status"}}.',
        },
        "paths": _paths(),
        "components": {
            "schemas": _SCHEMAS,
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
                }
            },
        },
    }
    if auth:
        doc["security"] = [{"bearer": []}]
    return doc
