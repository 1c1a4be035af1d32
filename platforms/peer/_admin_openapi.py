"""The admin API's and the console page's part of the OpenAPI document (SPEC 13).

Data, like :mod:`platforms.peer.openapi`, which merges these paths and schemas into the one
document; the schemas say exactly what :mod:`platforms.peer.admin` answers (schemathesis
checks every response against them).
"""

from __future__ import annotations

from typing import Any

from platforms.peer._admin_schedules import SCHEDULES_SCHEMA
from platforms.peer._schemas import ref
from platforms.peer._tool_servers import ADMIN_TOOLS_SCHEMA
from platforms.peer.admin import CURSOR, MAX_LIMIT, MAX_QUERY, TICKET_TTL_S
from platforms.peer.convert import MAX_ROW_ID, TRANSCRIPT_PAGE, TRANSCRIPT_PAGE_MAX

_NUMBER = {"type": "number"}
_MAYBE_NUMBER = {"type": ["number", "null"]}
_MAYBE_STRING = {"type": ["string", "null"]}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}
_INTS = {"type": "array", "items": {"type": "integer"}}


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


ADMIN_SCHEMAS: dict[str, Any] = {
    "AdminConversation": _object(
        {
            "key": {"type": "string"},
            "platform": {"type": "string"},
            "created_at": _NUMBER,
            "updated_at": _NUMBER,
            "messages": {"type": "integer"},
            "pending": {"type": "integer"},
            "last_failure": _MAYBE_STRING,
            "last_failure_at": _MAYBE_NUMBER,
        }
    ),
    "AdminDiagnostics": {
        **_object(
            {
                part: {"type": "object", "description": text}
                for part, text in (
                    ("store", "The writer's commits and batches; leases (several nodes)."),
                    ("router", "Session actors spawned, evicted, crashed, live."),
                    ("intake", "Messages admitted, duplicates, refused."),
                    ("peer", "Requests, turns, refusals and connections of this API."),
                    ("reload", "Reloads applied, unchanged, refused, invalid."),
                    ("model_clients", "Model clients built, held and retired."),
                )
            }
        ),
        "description": "Every part's counters and states by part; besides the required"
        " ones: compaction, cluster, and one per platform adapter (telegram, discord, slack, a2a)."
        " Counters since start, no secrets.",
        "additionalProperties": {"type": "object"},
    },
    "AdminOverview": _object(
        {
            "version": {"type": "integer"},
            "now": _NUMBER,
            "ready": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "live_sessions": {"type": "integer"},
            "live_turns": {"type": "integer"},
            "running": {"type": "array", "items": {"type": "string"}},
            "queued": _COUNTS,
            "outbox_pending": _COUNTS,
            "benched": {
                "type": "array",
                "items": _object(
                    {
                        "model": {"type": "string"},
                        "key": {"type": "string", "description": "Masked, never the key."},
                        "reason": {"type": "string"},
                        "seconds_left": {
                            "type": ["number", "null"],
                            "description": "null: benched until restart.",
                        },
                    }
                ),
            },
            "pairing_pending": {"type": "integer"},
            "recent": {"type": "array", "items": ref("schemas", "AdminConversation")},
            "series": _object(
                {
                    "start": _NUMBER,
                    "minute_s": _NUMBER,
                    "turns": _INTS,
                    "failures": _INTS,
                    "model_calls": _INTS,
                    "model_failures": _INTS,
                }
            ),
            "cluster": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "node": _MAYBE_STRING,
                            "leases": {"type": ["integer", "null"]},
                            "nodes": {"type": "array", "items": {"type": "object"}},
                        }
                    ),
                ]
            },
        }
    ),
    "AdminConversations": _object(
        {
            "conversations": {"type": "array", "items": ref("schemas", "AdminConversation")},
            "next_cursor": _MAYBE_STRING,
        }
    ),
    "AdminTranscript": _object(
        {
            "conversation": {"type": "string"},
            "messages": {
                "type": "array",
                "items": _object(
                    {
                        "id": {"type": "integer"},
                        "role": {"enum": ["user", "assistant", "tool"]},
                        "content": {"type": "string"},
                        "state": {"type": "string"},
                        "created_at": _NUMBER,
                        "failure": _MAYBE_STRING,
                        "tool_calls": {
                            "type": ["array", "null"],
                            "description": "A tool step's calls (SPEC 15).",
                            "items": _object(
                                {
                                    "id": {"type": "string"},
                                    "name": {"type": "string"},
                                    "arguments": {"type": "string"},
                                }
                            ),
                        },
                        "call_id": _MAYBE_STRING,
                        "tool": _MAYBE_STRING,
                        "scheduled": {
                            "type": ["string", "null"],
                            "description": "A user row a schedule fired: its id (SPEC 16).",
                        },
                        "attachments": {
                            "type": "array",
                            "items": _object(
                                {
                                    "name": _MAYBE_STRING,
                                    "content_type": _MAYBE_STRING,
                                    "size": {"type": ["integer", "null"]},
                                    "sha256": _MAYBE_STRING,
                                }
                            ),
                        },
                    }
                ),
            },
            "next": {"type": ["integer", "null"]},
        }
    ),
    "AdminOutbox": _object(
        {
            "chunks": {
                "type": "array",
                "items": _object(
                    {
                        "id": {"type": "integer"},
                        "conversation": {"type": "string"},
                        "platform": {"type": "string"},
                        "state": {"enum": ["pending", "sending", "expired", "failed"]},
                        "seq": {"type": "integer"},
                        "text": {"type": "string", "description": "At most 500 characters."},
                        "created_at": _NUMBER,
                    }
                ),
            }
        }
    ),
    "AdminSchedules": SCHEDULES_SCHEMA,
    "AdminTools": ADMIN_TOOLS_SCHEMA,
    "AdminPairing": _object(
        {
            "pending": {
                "type": "array",
                "items": _object(
                    {
                        "platform": {"type": "string"},
                        "code": {"type": "string"},
                        "user_id": {"type": "string"},
                        "label": {"type": "string"},
                        "created_at": _NUMBER,
                        "expires_at": _NUMBER,
                    }
                ),
            },
            "approved": {
                "type": "array",
                "items": _object(
                    {
                        "platform": {"type": "string"},
                        "user_id": {"type": "string"},
                        "approved_at": _NUMBER,
                    }
                ),
            },
        }
    ),
    "AdminDecision": _object(
        {
            "platform": {"type": "string"},
            "code": {"type": "string"},
            "user_id": {"type": "string"},
            "approved": {"type": "boolean"},
        }
    ),
    "AdminRevoked": _object(
        {
            "platform": {"type": "string"},
            "user_id": {"type": "string"},
            "revoked": {"const": True},
        }
    ),
    "AdminEvent": {
        "type": "object",
        "description": "event: overview, data: an AdminOverview (JSON).",
        "required": ["event", "data"],
        "properties": {
            "event": {"const": "overview"},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    },
    "AdminTicket": _object(
        {"ticket": {"type": "string"}, "expires_in_s": {"type": "number"}},
    ),
}

# Errors every admin route may answer (403, 415 and 421 only without tokens).
_COMMON = ("401", "403", "404", "405", "421", "429", "500", "503")


def _errors(*statuses: str) -> dict[str, Any]:
    return {status: ref("responses", f"E{status}") for status in (*statuses, *_COMMON)}


def _json(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": ref("schemas", schema)}},
    }


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _get(operation: str, summary: str, schema: str, **extra: Any) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "summary": summary,
            "tags": ["admin"],
            **extra,
            "responses": {"200": _json(schema, summary), **_errors("400")},
        }
    }


def _post(operation: str, summary: str, schema: str, *params: str) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation,
            "summary": summary,
            "tags": ["admin"],
            "description": "Logged as an admin_action event naming the token (by its name)"
            ' or "loopback". No body is read; without tokens, send'
            " Content-Type: application/json (415 otherwise). 404: no such code or user.",
            "parameters": [_PARAMS[p] for p in params],
            "responses": {"200": _json(schema, summary), **_errors("415")},
        }
    }


_PARAMS = {
    "platform": _path("platform", "telegram, discord or slack."),
    "code": _path("code", "The pairing code (case and surrounding space do not matter)."),
    "user_id": _path("user_id", "The platform's user id."),
}


def _page(operation: str, media: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "summary": "The operator console (static; holds no secret). Needs no token.",
            "tags": ["console"],
            "security": [],
            "responses": {
                "200": {"description": "The file.", "content": {media: {"schema": {}}}},
                **{s: ref("responses", f"E{s}") for s in ("404", "405", "500")},
            },
        }
    }


#: The event stream's credential (GET /api/admin/events): see platforms.peer.admin.
TICKET_SCHEME = {
    "type": "apiKey",
    "in": "query",
    "name": "ticket",
    "description": "A ticket from POST /api/admin/events/ticket (signed, valid about a"
    " minute): an EventSource cannot send an Authorization header.",
}


def admin_paths() -> dict[str, Any]:
    return {
        "/console/": _page("consoleIndex", "text/html"),
        "/console/app.js": _page("consoleScript", "text/javascript"),
        "/console/app.css": _page("consoleStyle", "text/css"),
        "/api/admin/overview": _get(
            "adminOverview",
            "Readiness, live turns, queues, the outbox, benched keys, the last hour's turns"
            " per minute, recent conversations and (several nodes) the cluster.",
            "AdminOverview",
        ),
        "/api/admin/diagnostics": _get(
            "adminDiagnostics",
            "Every part's statistics: the store's writer, the router, the intake, each"
            " platform adapter (its courier, previews, lease keeper), the model clients.",
            "AdminDiagnostics",
        ),
        "/api/admin/conversations": _get(
            "adminConversations",
            "Conversations whose key contains q, newest activity first, a page at a time.",
            "AdminConversations",
            parameters=[
                {
                    "name": "q",
                    "in": "query",
                    "required": False,
                    "description": "A substring of the key (case-sensitive); empty: all.",
                    "schema": {"type": "string", "maxLength": MAX_QUERY},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                },
                {
                    "name": "cursor",
                    "in": "query",
                    "required": False,
                    "description": "The next_cursor of the previous page.",
                    "schema": {"type": "string", "pattern": CURSOR},
                },
            ],
        ),
        "/api/admin/conversations/{key}/messages": _get(
            "adminTranscript",
            "One conversation's newest rows (below `before`, when given), oldest first, with"
            " their attachments; `next`, when not null, is the `before` of the page of older"
            " rows (404: no such conversation).",
            "AdminTranscript",
            parameters=[
                _path("key", "The conversation key, e.g. telegram:42 (URL-encoded)."),
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": f"Rows in the page (default {TRANSCRIPT_PAGE}).",
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
                    "description": "A row id (a page's `next`): only older rows.",
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
                },
            ],
        ),
        "/api/admin/outbox": _get(
            "adminOutbox",
            "The newest 200 reply chunks not delivered (pending, sending, expired, failed).",
            "AdminOutbox",
        ),
        "/api/admin/schedules": _get(
            "adminSchedules",
            "Scheduled messages: next due time, last firing, its delivery (fired and never"
            " delivered shows as such), missed due times, last failure (SPEC 16).",
            "AdminSchedules",
        ),
        "/api/admin/tools": _get(
            "adminTools",
            "The MCP tool servers: each one's state (starting, up, down), the tools it offers"
            " now and why it is down (SPEC 15).",
            "AdminTools",
        ),
        "/api/admin/pairing": _get(
            "adminPairing", "Pending pairing codes and the users approved.", "AdminPairing"
        ),
        "/api/admin/pairing/{platform}/{code}/approve": _post(
            "adminApprove",
            "Approve the user behind a pairing code.",
            "AdminDecision",
            "platform",
            "code",
        ),
        "/api/admin/pairing/{platform}/{code}/reject": _post(
            "adminReject", "Reject a pairing code.", "AdminDecision", "platform", "code"
        ),
        "/api/admin/users/{platform}/{user_id}/revoke": _post(
            "adminRevoke", "Revoke an approved user.", "AdminRevoked", "platform", "user_id"
        ),
        "/api/admin/events/ticket": {
            "post": {
                "operationId": "adminEventsTicket",
                "summary": f"A ticket for GET /api/admin/events, valid {TICKET_TTL_S:.0f} s.",
                "tags": ["admin"],
                "responses": {
                    "200": _json("AdminTicket", "The ticket."),
                    **_errors("415"),
                },
            }
        },
        "/api/admin/events": {
            "get": {
                "operationId": "adminEvents",
                "summary": "Live updates (SSE): an overview event at once and after each change;"
                " ': keepalive' comments in between.",
                "description": "Authenticated by the ticket alone (an EventSource cannot send"
                " headers); the ticket is the only credential that ever goes in a URL, expires"
                " within a minute and is never logged.",
                "tags": ["admin"],
                "security": [{"ticket": []}],
                "responses": {
                    "200": {
                        "description": "overview events.",
                        "content": {"text/event-stream": {"schema": ref("schemas", "AdminEvent")}},
                    },
                    **_errors("400"),
                },
            }
        },
    }
