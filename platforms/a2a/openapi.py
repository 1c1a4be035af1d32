"""The A2A routes' part of the peer listener's OpenAPI document (SPEC 12), added to it by
:meth:`platforms.peer.PeerAdapter.mount` when ``[a2a]`` is on.

JSON-RPC answers every request it could read with HTTP 200, a bad one included: the error is
the body's ``error`` object (its ``code`` one of JSON-RPC's or A2A's), so a JSON-RPC client
reads one shape. The listener's own refusals (auth, limits, a body over the size limit) keep
their statuses and the peer API's Error body.
"""

from __future__ import annotations

from typing import Any

from platforms.a2a.convert import MAX_ID_CHARS, METHODS


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _errors(*statuses: str) -> dict[str, Any]:
    return {status: _ref("responses", f"E{status}") for status in statuses}


_RPC_ID = {
    "anyOf": [
        {"type": "string", "maxLength": MAX_ID_CHARS},
        {"type": "integer"},
        {"type": "null"},
    ]
}

_RPC_REQUEST = {
    "type": "object",
    "required": ["jsonrpc", "method"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": _RPC_ID,
        "method": {"type": "string", "enum": sorted(METHODS)},
        "params": {"type": "object"},
    },
}

_RPC_RESPONSE = {
    "type": "object",
    "required": ["jsonrpc", "id"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        "result": {},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
        },
    },
}

_CARD = {
    "type": "object",
    "required": ["name", "description", "supportedInterfaces", "capabilities", "skills"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "supportedInterfaces": {"type": "array"},
        "capabilities": {"type": "object"},
        "skills": {"type": "array"},
    },
}

_COMMON = ("401", "403", "405", "413", "415", "421", "429", "500")


def a2a_paths() -> dict[str, Any]:
    card = {
        "get": {
            "summary": "The A2A agent card (name, description, skills, interfaces). Needs no"
            " token; it says how to authenticate.",
            "security": [],
            "responses": {
                "200": {
                    "description": "The card.",
                    "content": {"application/json": {"schema": _CARD}},
                },
                **_errors("403", "405", "421", "500"),
            },
        }
    }
    return {
        "/a2a": {
            "post": {
                "operationId": "a2a",
                "summary": "A2A 1.0 JSON-RPC (and the 0.3 method names).",
                "description": "SendMessage, SendStreamingMessage, GetTask, ListTasks,"
                " CancelTask, SubscribeToTask and the push notification config methods; the"
                " 0.3 names (message/send, tasks/get, ...) too. The A2A-Version header picks"
                " the protocol (absent: 0.3; 1.0 names need 1.0). Every JSON-RPC answer is"
                " 200, errors as the body's error object. The streaming methods answer"
                " text/event-stream, one JSON-RPC response per event.",
                "parameters": [
                    {
                        "name": "A2A-Version",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "enum": ["1.0", "0.3"]},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _RPC_REQUEST}},
                },
                "responses": {
                    "200": {
                        "description": "A JSON-RPC response (a result or an error object), or"
                        " the event stream of a streaming method.",
                        "content": {
                            "application/json": {"schema": _RPC_RESPONSE},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors(*_COMMON),
                },
            }
        },
        "/.well-known/agent-card.json": {"get": {"operationId": "agentCard", **card["get"]}},
        "/.well-known/agent.json": {"get": {"operationId": "agentCardLegacy", **card["get"]}},
    }
