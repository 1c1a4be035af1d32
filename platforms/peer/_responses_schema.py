"""The OpenAPI entries of ``/v1/responses`` (SPEC 12): its schemas and paths, exactly what
:mod:`platforms.peer._responses_json` accepts (schemathesis checks both directions: what the
document calls valid is served, what it calls invalid is refused). Merged into the document
by :mod:`platforms.peer.openapi`.
"""

from __future__ import annotations

from typing import Any

from platforms.peer._schemas import NO_NUL, SESSION_ID, TEXT, ref


def _text_parts(text: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "text"],
        "properties": {
            "type": {"enum": ["input_text", "output_text", "text"]},
            "text": {"type": "string", **text},
        },
    }


_ITEM_TYPE = {"const": "message", "description": "Only message items."}

SCHEMAS: dict[str, Any] = {
    "ResponseContent": {
        "description": "Text with some non-space character and no NUL: a string, or a list"
        " of input_text parts (joined with newlines).",
        "anyOf": [
            {"type": "string", "pattern": TEXT},
            {
                "type": "array",
                "minItems": 1,
                "items": _text_parts({"pattern": NO_NUL}),
                "contains": {"type": "object", "properties": {"text": {"pattern": TEXT}}},
            },
        ],
    },
    "ResponseInputItem": {
        "description": "A message item (type may be left out). The last user message is the"
        " new turn; system and developer messages join instructions; assistant messages are"
        " ignored (botmux keeps the conversation's history itself).",
        "anyOf": [
            {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "type": _ITEM_TYPE,
                    "role": {"enum": ["user", "system", "developer"]},
                    "content": ref("schemas", "ResponseContent"),
                },
            },
            {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "type": _ITEM_TYPE,
                    "role": {"const": "assistant"},
                    "content": {
                        "anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": _text_parts({})},
                        ]
                    },
                },
            },
        ],
    },
    "ResponseRequest": {
        "type": "object",
        "description": "The Responses API's create request. previous_response_id continues"
        " that response's conversation; conversation names a session (in the token's"
        " sessions globs); neither: a new conversation of the token's own. instructions (and"
        " system/developer items) are an extra system message of this call only. text.format"
        " is passed to the model as response_format. tools, tool_choice other than none/auto,"
        " background and prompt are refused (400 unsupported_parameter); other fields are"
        " accepted and ignored.",
        "required": ["input"],
        "not": {
            "required": ["previous_response_id", "conversation"],
            "properties": {
                "previous_response_id": {"type": "string"},
                "conversation": {"not": {"type": "null"}},
            },
        },
        "properties": {
            "input": {
                "anyOf": [
                    {"type": "string", "pattern": TEXT},
                    {
                        "type": "array",
                        "minItems": 1,
                        "items": ref("schemas", "ResponseInputItem"),
                        "contains": {"type": "object", "properties": {"role": {"const": "user"}}},
                    },
                ]
            },
            "instructions": {"anyOf": [{"type": "string", "pattern": TEXT}, {"type": "null"}]},
            "model": {"type": ["string", "null"], "description": "Echoed back; botmux answers."},
            "stream": {"type": ["boolean", "null"]},
            "store": {"type": ["boolean", "null"], "description": "Accepted: always stored."},
            "previous_response_id": {"type": ["string", "null"]},
            "conversation": {
                "anyOf": [
                    {"type": "string", "pattern": SESSION_ID},
                    {
                        "type": "object",
                        "required": ["id"],
                        "properties": {"id": {"type": "string", "pattern": SESSION_ID}},
                    },
                    {"type": "null"},
                ]
            },
            "metadata": {
                "type": ["object", "null"],
                "maxProperties": 16,
                "propertyNames": {"maxLength": 64},
                "additionalProperties": {"type": "string", "maxLength": 512},
                "description": "Accepted and echoed in the create answer; not stored.",
            },
            "text": {
                "type": ["object", "null"],
                "properties": {
                    "format": {
                        "type": ["object", "null"],
                        "required": ["type"],
                        "properties": {"type": {"type": "string"}},
                    }
                },
            },
            "tools": {"type": ["array", "null"], "maxItems": 0},
            "tool_choice": {"enum": ["none", "auto", None]},
            "background": {"enum": [False, None]},
            "prompt": {"type": "null"},
        },
    },
    "Response": {
        "type": "object",
        "description": "One turn. id names its user row (decodable only with the token that"
        " made it); usage is the stored reply's token counts; error, when status is failed,"
        " has the failure class as code.",
        "required": ["id", "object", "created_at", "status", "model", "output", "error"],
        "properties": {
            "id": {"type": "string", "pattern": r"^resp_[0-9]+_[0-9a-f]{24}$"},
            "object": {"const": "response"},
            "created_at": {"type": "integer"},
            "status": {"enum": ["completed", "failed", "in_progress", "cancelled"]},
            "model": {"type": "string"},
            "output": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["type", "id", "role", "status", "content"],
                    "properties": {
                        "type": {"const": "message"},
                        "id": {"type": "string"},
                        "role": {"const": "assistant"},
                        "status": {"type": "string"},
                        "content": {"type": "array", "items": _text_parts({})},
                    },
                },
            },
            "usage": {
                "type": ["object", "null"],
                "required": ["input_tokens", "output_tokens", "total_tokens"],
                "properties": {
                    "input_tokens": {"type": "integer", "minimum": 0},
                    "output_tokens": {"type": "integer", "minimum": 0},
                    "total_tokens": {"type": "integer", "minimum": 0},
                },
            },
            "error": {
                "type": ["object", "null"],
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            },
            "previous_response_id": {"type": ["string", "null"]},
            "conversation": {
                "type": ["object", "null"],
                "properties": {"id": {"type": "string"}},
            },
        },
    },
    "ResponseEvent": {
        "type": "object",
        "description": "event: <type>, data: {type, sequence_number, ...}: response.created,"
        " response.in_progress, response.output_item.added, response.content_part.added,"
        " response.output_text.delta (as the model writes), response.output_text.done,"
        " response.content_part.done, response.output_item.done, response.completed; a turn"
        " failing once the headers went out ends with response.failed (error.code: the"
        " failure class), an error of botmux with an error event.",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string"},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    },
    "ResponseDeleted": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "deleted": {"const": True},
        },
    },
}

_RESPONSE_ID = {
    "name": "response_id",
    "in": "path",
    "required": True,
    "description": "A response's id, as this token got it; any other is 404.",
    "schema": {"type": "string"},
}


def paths(errors: Any, common: tuple[str, ...]) -> dict[str, Any]:
    """The routes; ``errors(*statuses)``: the document's error responses."""
    return {
        "/v1/responses": {
            "post": {
                "operationId": "createResponse",
                "summary": "Open Responses / OpenAI Responses: one turn, plain or streamed.",
                "description": "A failed turn answers as the chat completions route does (502,"
                " 503, 400 with the failure class as code); streamed, once the headers went out,"
                " as a response.failed event.",
                "parameters": [ref("parameters", "IdempotencyKey")],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref("schemas", "ResponseRequest")}},
                },
                "responses": {
                    "200": {
                        "description": "The response; with stream: true, its SSE events.",
                        "content": {
                            "application/json": {"schema": ref("schemas", "Response")},
                            "text/event-stream": {"schema": ref("schemas", "ResponseEvent")},
                        },
                    },
                    **errors("400", "413", "415", "422", "502", "503", *common),
                },
            }
        },
        "/v1/responses/{response_id}": {
            "get": {
                "operationId": "getResponse",
                "summary": "A response, read from the store (any node, after restarts).",
                "parameters": [_RESPONSE_ID],
                "responses": {
                    "200": {
                        "description": "The response.",
                        "content": {"application/json": {"schema": ref("schemas", "Response")}},
                    },
                    **errors("503", *common),
                },
            },
            "delete": {
                "operationId": "deleteResponse",
                "summary": "Delete the turn's rows (its user row, reply and outbox); the"
                " conversation's other turns stay. 409 while it is in progress.",
                "parameters": [_RESPONSE_ID],
                "responses": {
                    "200": {
                        "description": "Deleted.",
                        "content": {
                            "application/json": {"schema": ref("schemas", "ResponseDeleted")}
                        },
                    },
                    **errors("409", "503", *common),
                },
            },
        },
    }
