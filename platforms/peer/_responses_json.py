"""Pure mapping between the Responses API's JSON (Open Responses, SPEC 12) and botmux's values.

No I/O: a request body in, a :class:`ResponseRequest` out (or :class:`BadRequest`); stored rows
in, Response objects and stream events out. A response is one turn: its id names the turn's
user row, with a MAC under the requester's token digest, so it decodes back to the row (and so
its conversation) and an id handed to one token is not valid for another (:func:`response_id`).
The MAC is a handle, not the access check: a token can compute it for any row, so the routes
decide by the row's conversation (its owner for an anonymous one, the token's globs else).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import Any

from gateway.messages import STOPPED_REPLY, Failure, TurnOutcome, Usage
from platforms.peer.convert import (
    MODEL_NAME,
    BadRequest,
    _clean_text,
    check_session_id,
)

#: ``resp_<user row id>_<MAC>``; the message item of a response is ``msg_`` with the same tail.
_ID = re.compile(r"^(?:resp|msg)_([1-9][0-9]{0,17})_([0-9a-f]{24})$")
#: Request fields botmux cannot honour (it answers with its own agent, without tools or
#: background runs), refused unless they ask for nothing: the values allowed for each.
UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "tools": ([],),
    "tool_choice": ("none", "auto"),
    "background": (False,),
    "prompt": (),
}
_ROLES_IGNORED = ("assistant",)
_INSTRUCTION_ROLES = ("system", "developer")


def _mac(scope: bytes, row_id: int) -> str:
    key = scope or b"botmux-no-tokens"
    return hmac.new(key, b"botmux-response\0%d" % row_id, hashlib.sha256).hexdigest()[:24]


def response_id(row_id: int, scope: bytes) -> str:
    """The id of the turn whose user row is ``row_id``, for the token of ``scope``."""
    return f"resp_{row_id}_{_mac(scope, row_id)}"


def item_id(resp_id: str) -> str:
    return "msg_" + resp_id.removeprefix("resp_")


def decode_id(value: str, scope: bytes) -> int | None:
    """The user row id of a response id minted for ``scope``, or None (malformed, huge, or
    another token's: all answered 404 alike)."""
    match = _ID.fullmatch(value) if len(value) <= 64 and value.startswith("resp_") else None
    if match is None:
        return None
    row_id = int(match.group(1))
    return row_id if hmac.compare_digest(match.group(2), _mac(scope, row_id)) else None


@dataclass(frozen=True, slots=True)
class ResponseRequest:
    text: str
    instructions: str | None
    stream: bool
    model: str
    previous_response_id: str | None
    conversation: str | None  # a session id, as the client named it
    response_format: dict[str, Any] | None
    metadata: dict[str, str]


def _part_text(part: Any) -> str:
    if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text"):
        raise BadRequest(
            "only input_text content parts are supported", code="unsupported_parameter"
        )
    text = part.get("text")
    if not isinstance(text, str):
        raise BadRequest("an input_text part needs a string 'text'")
    return text


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    raise BadRequest("a message's content must be a string or a list of input_text parts")


def _input(value: Any) -> tuple[str, list[str]]:
    """The new turn's text (the last user message) and any system/developer messages."""
    if isinstance(value, str):
        return _clean_text(value, '"input"'), []
    if not isinstance(value, list) or not value:
        raise BadRequest('"input" must be a string or a non-empty list of message items')
    user: str | None = None
    system: list[str] = []
    for item in value:
        if not isinstance(item, dict):
            raise BadRequest("each input item must be an object")
        kind = item.get("type", "message")
        if kind != "message":
            raise BadRequest(
                f"input items of type {str(kind)[:40]!r} are not supported: only messages",
                code="unsupported_parameter",
                param="input",
            )
        role = item.get("role")
        if not isinstance(role, str):
            raise BadRequest("each input message needs a string 'role'")
        text = _content(item.get("content"))
        if role == "user":
            user = _clean_text(text, "a user message")
        elif role in _INSTRUCTION_ROLES:
            system.append(_clean_text(text, f"a {role} message"))
        elif role not in _ROLES_IGNORED:
            raise BadRequest("an input message's role is user, assistant, system or developer")
    if user is None:
        raise BadRequest('"input" has no user message')
    return user, system


def _optional(body: dict[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise BadRequest(f'"{name}" must be {what}', param=name)
    return value


def _text_format(text: Any) -> dict[str, Any] | None:
    """``text.format`` as the chat ``response_format`` the model is asked for."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise BadRequest('"text" must be an object', param="text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise BadRequest('"text.format" must be an object with a string "type"', param="text")
    if fmt["type"] == "text":
        return None
    if fmt["type"] == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt["type"]}


def _conversation(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str):
        raise BadRequest('"conversation" must be a string id or {"id": ...}', param="conversation")
    try:
        return check_session_id(value)
    except BadRequest as exc:
        raise BadRequest(exc.message, code=exc.code, param="conversation") from exc


def response_request(body: Any) -> ResponseRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if "input" not in body:
        raise BadRequest('"input" is required', param="input")
    text, system = _input(body["input"])
    for name, harmless in UNSUPPORTED.items():
        value = body.get(name)
        # By type too: 0 == False and 0.0 == False in Python, not in JSON.
        if value is not None and not any(
            type(value) is type(ok) and value == ok for ok in harmless
        ):
            raise BadRequest(
                f'"{name}" is not supported: botmux answers with its own agent, without tools',
                code="unsupported_parameter",
                param=name,
            )
    instructions = _optional(body, "instructions", str, "a string")
    if instructions is not None:
        system.insert(0, _clean_text(instructions, '"instructions"'))
    stream = _optional(body, "stream", bool, "true or false")
    _optional(body, "store", bool, "true or false")
    model = _optional(body, "model", str, "a string") or MODEL_NAME
    previous = _optional(body, "previous_response_id", str, "a string")
    metadata = _optional(body, "metadata", dict, "an object")
    if metadata is not None and (
        len(metadata) > 16
        or not all(
            isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in metadata.items()
        )
    ):
        raise BadRequest(
            '"metadata" is at most 16 string values (keys up to 64, values up to 512 chars)',
            param="metadata",
        )
    conversation = _conversation(body.get("conversation"))
    if previous is not None and conversation is not None:
        raise BadRequest(
            '"previous_response_id" and "conversation" cannot both be set', param="conversation"
        )
    return ResponseRequest(
        text=text,
        instructions="\n\n".join(system) or None,
        stream=bool(stream),
        model=model,
        previous_response_id=previous,
        conversation=conversation,
        response_format=_text_format(body.get("text")),
        metadata=dict(metadata or {}),
    )


@dataclass(frozen=True, slots=True)
class ResponseView:
    """What a Response object says, from the request or the stored rows."""

    id: str
    session_id: str
    created_at: float
    model: str
    status: str  # in_progress, completed, failed, cancelled (stopped: /stop)
    text: str = ""
    usage: Usage | None = None
    failure: Failure | None = None
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    instructions: str | None = None


def output_item(resp_id: str, text: str, status: str) -> dict[str, Any]:
    content = [] if status == "in_progress" else [output_text(text)]
    return {
        "type": "message",
        "id": item_id(resp_id),
        "role": "assistant",
        "status": status,
        "content": content,
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_json(view: ResponseView) -> dict[str, Any]:
    output = []
    if view.status == "completed":
        output = [output_item(view.id, view.text, "completed")]
    error = None
    if view.failure is not None:
        error = {"code": view.failure.reason, "message": view.text}
    elif view.status == "cancelled":
        error = {"code": "cancelled", "message": view.text}
    usage = None
    if view.usage is not None:
        usage = {
            "input_tokens": view.usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": view.usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": view.usage.total_tokens,
        }
    return {
        "id": view.id,
        "object": "response",
        "created_at": int(view.created_at),
        "status": view.status,
        "model": view.model,
        "output": output,
        "usage": usage,
        "error": error,
        "incomplete_details": None,
        "instructions": view.instructions,
        "previous_response_id": view.previous_response_id,
        "conversation": {"id": view.session_id},
        "metadata": view.metadata or {},
        "parallel_tool_calls": False,
        "tool_choice": "none",
        "tools": [],
        "temperature": None,
        "top_p": None,
        "max_output_tokens": None,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "store": True,
        "background": False,
    }


def deleted_json(resp_id: str) -> dict[str, Any]:
    return {"id": resp_id, "object": "response", "deleted": True}


def now() -> float:
    return time.time()


def outcome_status(outcome: TurnOutcome) -> str:
    """How a turn's outcome reads as a response: failed, cancelled (stopped), or completed."""
    if outcome.failure is not None:
        return "failed"
    if outcome.reply == STOPPED_REPLY and not outcome.usage.total_tokens:
        return "cancelled"
    return "completed"
