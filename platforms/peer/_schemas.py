"""The JSON schemas of the peer API's OpenAPI document (``components.schemas``): what
:mod:`platforms.peer.convert` accepts and what the routes answer. Data, kept apart from the
paths in :mod:`platforms.peer.openapi`, which assembles the document.
"""

from __future__ import annotations

from typing import Any

from gateway.messages import ATTACHMENT_FAILURES
from platforms.peer._tool_servers import READYZ_TOOL_SCHEMA
from platforms.peer.attachments import (
    B64_PATTERN,
    DATA_URL_PATTERN,
    HTTPS_PATTERN,
    MAX_CONTENT_TYPE,
    MIME_PATTERN,
)
from platforms.peer.convert import MODEL_NAME
from policy import REASONS

SESSION_ID = r"^[A-Za-z0-9._:-]{1,128}$"
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,200}$"
# Some non-space character, and no NUL anywhere (the store and the model both refuse NUL).
TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"
NO_NUL = r"^[^\x00]*$"
# Attachments (SPEC 9): canonical base64, and the image URLs botmux takes.
# Attachments (SPEC 9): what ``platforms.peer.attachments`` takes, exactly.
BASE64 = B64_PATTERN
IMAGE_URL = f"{DATA_URL_PATTERN}|{HTTPS_PATTERN}"
NAME = TEXT


def ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


SCHEMAS: dict[str, Any] = {
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
                        " draining, internal_error, reload_refused, config_invalid,"
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
            "reason": {"type": "string", "enum": [*REASONS, *ATTACHMENT_FAILURES]},
            "retryable": {"type": "boolean"},
        },
    },
    "Attachment": {
        "type": "object",
        "description": "A file sent inline (SPEC 9): stored with the message, by sha256. Its"
        " kind follows content_type: image/* an image (to models that see images), audio/*"
        " voice (transcribed), anything else a document (text types and PDF read).",
        "required": ["name", "data"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": NAME},
            "content_type": {
                "type": "string",
                "pattern": MIME_PATTERN,
                "maxLength": MAX_CONTENT_TYPE,
                "description": "A MIME type (type/subtype, optional parameters), or empty.",
            },
            "data": {
                "type": "string",
                "pattern": BASE64,
                "minLength": 4,
                "description": "The bytes, base64; over [agent] max_attachment_bytes is 413.",
            },
        },
    },
    "ChatRequest": {
        "type": "object",
        "description": "A message, attachments, or both.",
        "anyOf": [
            {"required": ["message"], "properties": {"message": {"pattern": TEXT}}},
            {
                "required": ["attachments"],
                "properties": {"attachments": {"type": "array", "minItems": 1}},
            },
        ],
        "additionalProperties": False,
        "properties": {
            "message": {
                "type": "string",
                "pattern": NO_NUL,
                "description": "The user's text; /new, /status, /stop and /help are commands."
                " With attachments it may be empty.",
            },
            "attachments": {
                "type": ["array", "null"],
                "items": ref("schemas", "Attachment"),
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
        " writes it; event: tool, data: a ToolEvent (a tool call changed state); event:"
        " approval, data: an ApprovalEvent (a call waits for a yes: answer it at"
        " /api/sessions/{session_id}/approvals/{call_id}); event: message, data: the"
        " ChatResponse (the last event); event: error, data: an Error (the turn could not be"
        " run).",
        "required": ["event", "data"],
        "properties": {
            "event": {"enum": ["delta", "tool", "approval", "message", "error"]},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    },
    "ToolEvent": {
        "type": "object",
        "description": "A tool call of the turn changed state (SPEC 15): awaiting a yes,"
        " started, finished (error: its result is an error the model is told), or denied"
        " (by a person, or by the approval's timeout). The final answer is still the message"
        " event.",
        "required": ["call_id", "tool", "state"],
        "additionalProperties": False,
        "properties": {
            "call_id": {"type": "string", "description": "The model's id of the call."},
            "tool": {"type": "string", "description": "<server>__<tool>"},
            "state": {"enum": ["awaiting", "started", "finished", "denied"]},
            "error": {"const": True},
        },
        "examples": [
            {"call_id": "call_1", "tool": "docs__search", "state": "started"},
            {"call_id": "call_1", "tool": "docs__search", "state": "finished", "error": True},
        ],
    },
    "ApprovalEvent": {
        "type": "object",
        "description": "A call waits for a yes (SPEC 15). arguments: the model's JSON text,"
        " cut to 500 characters; the approval binds the stored arguments. No answer within"
        " timeout_s ([tools] approval_timeout_s) is a denial the model is told of.",
        "required": ["call_id", "tool", "arguments", "timeout_s"],
        "additionalProperties": False,
        "properties": {
            "call_id": {"type": "string"},
            "tool": {"type": "string"},
            "arguments": {"type": "string"},
            "timeout_s": {"type": "number", "minimum": 0},
        },
        "examples": [
            {
                "call_id": "call_1",
                "tool": "git__push",
                "arguments": '{"branch": "main"}',
                "timeout_s": 600,
            }
        ],
    },
    "ApprovalAnswer": {
        "type": "object",
        "description": "A yes or a no to a tool call that waits for one.",
        "required": ["approve"],
        "additionalProperties": False,
        "properties": {"approve": {"type": "boolean"}},
        "examples": [{"approve": True}, {"approve": False}],
    },
    "ApprovalResult": {
        "type": "object",
        "description": "The answer was stored: the waiting turn runs the call (approved) or"
        " tells the model it was denied.",
        "required": ["session_id", "call_id", "verdict"],
        "additionalProperties": False,
        "properties": {
            "session_id": {"type": "string", "pattern": SESSION_ID},
            "call_id": {"type": "string"},
            "verdict": {"enum": ["approved", "denied"]},
        },
        "examples": [{"session_id": "alice", "call_id": "call_1", "verdict": "approved"}],
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
            "session_id": {"type": "string", "pattern": SESSION_ID},
            "message": {
                "type": "object",
                "required": ["role", "content"],
                "additionalProperties": False,
                "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}},
            },
            "failure": ref("schemas", "Failure"),
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
        "required": ["messages", "next"],
        "additionalProperties": False,
        "properties": {
            "next": {
                "type": ["integer", "null"],
                "description": "The `before` of the page of older messages; null: none left.",
            },
            "messages": {
                "type": "array",
                "description": "Oldest first.",
                "items": {
                    "type": "object",
                    "required": ["id", "role", "content", "created_at", "state"],
                    "additionalProperties": False,
                    "properties": {
                        "id": {"type": "integer"},
                        "role": {
                            "type": "string",
                            "enum": ["user", "assistant", "tool"],
                            "description": "tool: one tool call of a step, its content the"
                            " result once finished (SPEC 15).",
                        },
                        "content": {
                            "type": "string",
                            "description": "The row's text; a user row's voice notes add"
                            " their transcripts, each on a line of its own after"
                            " '[voice transcript] ' (SPEC 9).",
                        },
                        "created_at": {"type": "string", "format": "date-time"},
                        "state": {
                            "type": "string",
                            "enum": [
                                *("pending", "answered", "failed", "cancelled", "final"),
                                *("step", "awaiting", "approved", "denied", "started"),
                                "finished",
                            ],
                            "description": "An assistant row's 'step' is a tool step (its"
                            " calls in tool_calls); a tool row's is its call's state.",
                        },
                        "tool_calls": {
                            "type": "array",
                            "description": "A tool step's calls, as the model asked for them.",
                            "items": {
                                "type": "object",
                                "required": ["id", "name", "arguments"],
                                "additionalProperties": False,
                                "properties": {
                                    "id": {"type": "string"},
                                    "name": {"type": "string"},
                                    "arguments": {"type": "string"},
                                },
                            },
                        },
                        "scheduled": {
                            "type": "string",
                            "description": "A user row a schedule fired (SPEC 16): the"
                            " schedule's id; its due time is in the row's platform id.",
                        },
                        "call_id": {"type": "string", "description": "A tool row's call."},
                        "tool": {"type": "string", "description": "A tool row's tool."},
                        "failure": {"type": "string", "enum": [*REASONS, *ATTACHMENT_FAILURES]},
                        "usage": ref("schemas", "Usage"),
                        "attachments": {
                            "type": "array",
                            "items": ref("schemas", "StoredAttachment"),
                        },
                    },
                },
            },
        },
    },
    "StoredAttachment": {
        "type": "object",
        "required": ["name", "kind", "content_type", "size", "sha256"],
        "properties": {
            "name": {"type": "string"},
            "kind": {"enum": ["image", "audio", "document"]},
            "content_type": {"type": "string"},
            "size": {"type": ["integer", "null"]},
            "sha256": {
                "type": ["string", "null"],
                "description": "The bytes at /api/sessions/{id}/attachments/{sha256}; null"
                " until fetched (or never: a linked image, one over the limit).",
            },
            "url": {"type": "string", "description": "An image the client linked."},
            "transcript": {"type": "string", "description": "A voice note's transcript."},
        },
    },
    "TextPart": {
        "type": "object",
        "required": ["type", "text"],
        "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": NO_NUL}},
    },
    "ImagePart": {
        "type": "object",
        "required": ["type", "image_url"],
        "properties": {
            "type": {"const": "image_url"},
            "image_url": {
                "type": "object",
                "required": ["url"],
                "properties": {
                    "url": {
                        "type": "string",
                        "pattern": IMAGE_URL,
                        "description": "A base64 data: URL (stored) or an https URL (passed"
                        " to the model as it is, never fetched by botmux).",
                    }
                },
            },
        },
    },
    "AudioPart": {
        "type": "object",
        "required": ["type", "input_audio"],
        "properties": {
            "type": {"const": "input_audio"},
            "input_audio": {
                "type": "object",
                "required": ["data", "format"],
                "properties": {
                    "data": {"type": "string", "pattern": BASE64, "minLength": 4},
                    "format": {"enum": ["wav", "mp3"]},
                },
            },
        },
    },
    "UserContent": {
        "description": "Text with some non-space character and no NUL: a string, or a list"
        " of text parts (joined with newlines); or a list with image_url or input_audio"
        " parts (SPEC 9), whose text may be empty.",
        "anyOf": [
            {"type": "string", "pattern": TEXT},
            {
                "type": "array",
                "minItems": 1,
                "items": ref("schemas", "TextPart"),
                "contains": {"type": "object", "properties": {"text": {"pattern": TEXT}}},
            },
            {
                "type": "array",
                "items": {
                    "anyOf": [
                        ref("schemas", "TextPart"),
                        ref("schemas", "ImagePart"),
                        ref("schemas", "AudioPart"),
                    ]
                },
                "contains": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"enum": ["image_url", "input_audio"]}},
                },
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
                    "content": ref("schemas", "UserContent"),
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
                "items": ref("schemas", "CompletionMessage"),
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
            "usage": ref("schemas", "Usage"),
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
                            "anyOf": [ref("schemas", "CompletionChunk"), ref("schemas", "Error")]
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
            "usage": ref("schemas", "Usage"),
        },
    },
    "Models": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": ref("schemas", "Model")},
        },
    },
    "Readiness": {
        "type": "object",
        "required": ["ready", "checks", "tools"],
        "additionalProperties": False,
        "properties": {
            "ready": {"type": "boolean"},
            "checks": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "tools": {"type": "array", "items": READYZ_TOOL_SCHEMA},
        },
    },
    "ReloadRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "config": {
                "type": "string",
                "description": "A TOML config to compare instead of the file (a dry run).",
            }
        },
    },
    "ReloadResult": {
        "type": "object",
        "required": ["outcome", "version", "source", "live", "restart", "errors", "reason"],
        "additionalProperties": False,
        "properties": {
            "outcome": {"enum": ["applied", "unchanged", "refused", "invalid", "dry_run"]},
            "version": {
                "type": "integer",
                "minimum": 0,
                "description": "Reloads applied since start.",
            },
            "source": {"type": "string", "description": "The file read."},
            "live": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Changed keys that apply to the next turn.",
            },
            "restart": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Changed keys that need a restart (any: nothing applies).",
            },
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "message"],
                    "additionalProperties": False,
                    "properties": {"key": {"type": "string"}, "message": {"type": "string"}},
                },
            },
            "reason": {"type": "string"},
            "error": {"description": "409 and 422: the error, as every route's (Error)."},
        },
    },
}

# A refused or invalid reload is an error like any (the same "error" member) and its plan.
SCHEMAS["ReloadResult"]["properties"]["error"].update(SCHEMAS["Error"]["properties"]["error"])
