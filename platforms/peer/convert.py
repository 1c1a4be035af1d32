"""Pure mapping between the peer API's JSON and botmux's values (SPEC section 5).

No I/O here: request bodies in, validated values out (or :class:`BadRequest`); stored rows
and outcomes in, response bodies out.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.messages import ATTACHMENT_FAILURES, Failure, StoredMessage, Usage, schedule_of
from platforms._text import text_problem

SESSION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
MODEL_NAME = "botmux"
#: The transcript route's page (issue 37, L-8): rows when ``limit`` is not given, and at most.
TRANSCRIPT_PAGE = 100
TRANSCRIPT_PAGE_MAX = 1000
#: The largest row id (a signed 64-bit integer in both databases): a ``before`` above it is
#: no row's.
MAX_ROW_ID = 2**63 - 1
_DIGITS = re.compile(r"^[0-9]{1,19}$")


class BadRequest(Exception):
    """The request is malformed; ``status`` and ``message`` form the JSON error."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        code: str = "bad_request",
        *,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.param = param


def conversation_key(session_id: str) -> str:
    return f"peer:{session_id}"


def check_session_id(session_id: str) -> str:
    # fullmatch: with match, ``$`` also accepts a trailing newline ("alice\n").
    if not SESSION_ID.fullmatch(session_id):
        raise BadRequest("session_id must match [A-Za-z0-9._:-]{1,128}", code="bad_session_id")
    return session_id


def check_idempotency_key(idempotency_key: str) -> str:
    if not _IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise BadRequest("Idempotency-Key must be 1-200 printable ASCII characters")
    return idempotency_key


#: Fresh ids: one random prefix per process and a counter. Unique across restarts and nodes as
#: a uuid4 is (128 random bits at start), without ``os.urandom`` on every message: uuid4 per
#: request was 1.5% of the gateway's CPU per turn (py-spy).
_FRESH_PREFIX = uuid.uuid4().hex
_fresh = itertools.count(1)


def fresh_id() -> str:
    """A new id no other message of any node or start has."""
    return f"{_FRESH_PREFIX}{next(_fresh):x}"


def platform_message_id(
    session_id: str, idempotency_key: str | None, *, retry: bool = False
) -> str:
    """Unique per conversation: the Idempotency-Key, else a fresh id. ``retry``: the one
    re-run of a key whose turn failed retryably (a space cannot occur in a key)."""
    if idempotency_key is None:
        return f"{session_id}/gen:{fresh_id()}"
    pmid = f"{session_id}/key:{check_idempotency_key(idempotency_key)}"
    return pmid + " retry" if retry else pmid


def parse_json(raw: bytes | bytearray | str) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:  # "[[[[...": deep nesting fits well inside the size limit
        raise BadRequest("the body's JSON is nested too deeply", code="invalid_json") from exc


def _clean_text(value: str, what: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise BadRequest(f"{what} {problem}")
    if not value.strip():
        raise BadRequest(f"{what} must not be empty")
    return value


@dataclass(frozen=True, slots=True)
class ChatRequest:
    text: str
    stream: bool | None  # None: not said (the Accept header decides)
    attachments: Any = None  # as sent: read by ``attachments.chat_attachments``


def chat_request(body: Any) -> ChatRequest:
    """A session chat request: its ``message``, and whether it asks for a stream."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be a JSON object: {"message": "..."}')
    files = body.get("attachments")
    message = body.get("message", "" if files else None)
    if not isinstance(message, str):
        raise BadRequest('"message" must be a string')
    unknown = set(body) - {"message", "stream", "attachments"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest('"stream" must be true or false')
    # With attachments the text may be empty (a photo alone).
    text = "" if files and not message.strip() else _clean_text(message, '"message"')
    return ChatRequest(text, stream, files)


def chat_message(body: Any) -> str:
    """The ``message`` of a session chat request."""
    return chat_request(body).text


def wants_stream(stream: bool | None, accept: str) -> bool:
    """``"stream"`` if the body says, else whether the client accepts only an event stream."""
    if stream is not None:
        return stream
    return "text/event-stream" in accept.lower()


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    text: str
    stream: bool
    user: str | None
    model: str
    include_usage: bool = False
    response_format: dict[str, Any] | None = None
    # The last user message's content parts when it has images or audio (SPEC 9): read by
    # ``attachments.content_parts``, which gives the text too.
    parts: list[Any] | None = None


#: OpenAI request fields botmux cannot honour: refused rather than silently dropped.
UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise BadRequest("only text content parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise BadRequest("a text content part needs a string 'text'")
            parts.append(text)
        return "\n".join(parts)
    raise BadRequest("message content must be a string or a list of text parts")


def completion_request(body: Any) -> CompletionRequest:
    """The new turn of an OpenAI chat-completions request: its last user message."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest('"messages" must be a non-empty list')
    last_user = None
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest("each message must be an object with a string 'role'")
        if message["role"] == "user":
            last_user = message
    if last_user is None:
        raise BadRequest('"messages" has no user message')
    content = last_user.get("content")
    parts = content if isinstance(content, list) and _has_files(content) else None
    text = "" if parts else _clean_text(_content_text(content), "the last user message")
    # OpenAI's API takes null for any optional field, and some clients send it so.
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest('"stream" must be true or false')
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise BadRequest('"user" must be a string')
    model = body.get("model")
    if model is None:
        model = MODEL_NAME
    if not isinstance(model, str):
        raise BadRequest('"model" must be a string')
    for name in UNSUPPORTED:
        if body.get(name) is not None:
            raise BadRequest(
                f'"{name}" is not supported: botmux answers with its own agent, without tools',
                code="unsupported_parameter",
                param=name,
            )
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest('"stream_options" must be an object')
    include_usage = (options or {}).get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise BadRequest('"stream_options.include_usage" must be true or false')
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str)
    ):
        raise BadRequest('"response_format" must be an object with a string "type"')
    return CompletionRequest(
        text=text,
        stream=stream,
        user=user or None,
        model=model,
        include_usage=bool(include_usage),
        response_format=response_format,
        parts=parts,
    )


def _has_files(content: list[Any]) -> bool:
    return any(
        isinstance(p, dict) and p.get("type") in ("image_url", "input_audio") for p in content
    )


def completion_session(
    header: str | None, user: str | None, *, idempotency_key: str | None, scope: bytes
) -> str:
    """``X-Botmux-Session``, else the ``user`` field, else a conversation of its own
    (:func:`anonymous_session`)."""
    if header is not None:
        return check_session_id(header)
    if user is not None:
        if SESSION_ID.fullmatch(user):
            return user
        return "user-" + hashlib.sha256(user.encode("utf-8", "replace")).hexdigest()[:32]
    return anonymous_session(scope, idempotency_key, b"botmux-anon")


def anonymous_owner(scope: bytes) -> str:
    """The owner part of an anonymous session's id: derived from ``scope`` (the token's
    digest; empty without tokens), so the key itself says which token the conversation
    belongs to, on every node and after any restart, with nothing stored beside it."""
    return hashlib.sha256(b"botmux-anon-owner\0" + scope).hexdigest()[:16]


def anonymous_session(scope: bytes, idempotency_key: str | None, salt: bytes) -> str:
    """A new conversation of the token of ``scope``: ``anon-<owner>-`` and, with an
    Idempotency-Key, a hash of the key and ``scope`` (a repeat finds the first turn; no other
    token can name it), else a fresh id. ``anon-``: the retention sweep's shorter keep for
    anonymous conversations applies. ``salt`` keeps each API's conversations apart."""
    owner = anonymous_owner(scope)
    if idempotency_key is None:
        return f"anon-{owner}-{uuid.uuid4()}"
    key = check_idempotency_key(idempotency_key).encode()
    return f"anon-{owner}-" + hashlib.sha256(salt + b"\0" + scope + b"\0" + key).hexdigest()[:32]


def anonymous(session_id: str) -> bool:
    """An anonymous session (one a request without a session name started)."""
    return session_id.startswith("anon-")


def owns(scope: bytes, session_id: str) -> bool:
    """Whether the anonymous ``session_id`` belongs to the token of ``scope`` (an ``anon-`` id
    without this token's owner part, those of earlier versions included, is no token's)."""
    return session_id.startswith(f"anon-{anonymous_owner(scope)}-")


def failure_json(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {"reason": failure.reason, "retryable": failure.retryable}


def chat_response(session_id: str, reply: str, failure: Failure | None) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "message": {"role": "assistant", "content": reply},
        "failure": failure_json(failure),
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def page_params(query: Mapping[str, str]) -> tuple[int, int | None]:
    """The transcript route's ``limit`` (1 to :data:`TRANSCRIPT_PAGE_MAX`, default
    :data:`TRANSCRIPT_PAGE`) and ``before`` (a row id: the page ends below it)."""
    limit = TRANSCRIPT_PAGE
    if "limit" in query:
        text = query["limit"]
        if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= TRANSCRIPT_PAGE_MAX:
            raise BadRequest(
                f"limit must be a whole number from 1 to {TRANSCRIPT_PAGE_MAX}", param="limit"
            )
        limit = int(text)
    before = None
    if "before" in query:
        text = query["before"]
        if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= MAX_ROW_ID:
            raise BadRequest(
                "before must be a message id (a positive whole number: a page's next)",
                param="before",
            )
        before = int(text)
    return limit, before


def transcript_json(rows: list[StoredMessage], *, next_before: int | None = None) -> dict[str, Any]:
    """The transcript route's body: the page's rows oldest first, and ``next``, the
    ``before`` of the page of older rows (null: none left)."""
    return {
        "messages": [
            {
                "id": r.id,
                "role": r.role,
                "content": r.shown,  # a voice note's transcript too (SPEC 9)
                "created_at": _iso(r.created_at),
                "state": _state(r),
                **({"failure": r.failure} if r.failure else {}),
                **_scheduled(r),
                **_tool_fields(r),
                **_usage_field(r),
                **attachments_json(r),
            }
            for r in rows
        ],
        "next": next_before,
    }


def _state(row: StoredMessage) -> str:
    """A row's state as the transcript shows it: an answer is final or failed, a tool step is
    a step, a user or tool row says its own."""
    if row.role == "assistant" and row.state != "step":
        return "failed" if row.failure else "final"
    return row.state


def _scheduled(row: StoredMessage) -> dict[str, Any]:
    """A schedule's firing is marked with its schedule's id (SPEC 16)."""
    schedule = schedule_of(row.platform_message_id) if row.role == "user" else None
    return {"scheduled": schedule} if schedule is not None else {}


def _tool_fields(row: StoredMessage) -> dict[str, Any]:
    """A tool step's calls, or a tool row's call and tool (SPEC 15)."""
    if row.tool_calls is not None:
        return {"tool_calls": json.loads(row.tool_calls)}
    if row.role == "tool":
        return {"call_id": row.call_id or "", "tool": row.tool or ""}
    return {}


def attachments_json(row: StoredMessage) -> dict[str, Any]:
    """A transcript row's ``attachments`` (none: no field): name, kind, type, size, sha256
    (the bytes at ``/api/sessions/{id}/attachments/{sha256}``); an image the client linked
    has its ``url`` instead; a voice note its ``transcript``."""
    if not row.attachments:
        return {}
    listed = []
    for ref in row.attachments:
        item: dict[str, Any] = {
            "name": ref.name,
            "kind": ref.kind,
            "content_type": ref.content_type,
            "size": ref.size,
            "sha256": ref.sha256,
        }
        if ref.sha256 is None and ref.source.startswith("https://"):
            item["url"] = ref.source
        if ref.kind == "audio" and ref.text is not None:
            item["transcript"] = ref.text
        listed.append(item)
    return {"attachments": listed}


def _usage_field(row: StoredMessage) -> dict[str, Any]:
    if row.prompt_tokens is None or row.completion_tokens is None:
        return {}
    return {"usage": usage_json(Usage(row.prompt_tokens, row.completion_tokens))}


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def completion_id(user_row_id: int) -> str:
    return f"chatcmpl-botmux-{user_row_id}"


def completion_json(user_row_id: int, reply: str, model: str, usage: Usage) -> dict[str, Any]:
    return {
        "id": completion_id(user_row_id),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
            }
        ],
        "usage": usage_json(usage),
    }


def model_json() -> dict[str, Any]:
    return {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "botmux"}


def completion_chunk(
    user_row_id: int,
    model: str,
    delta: dict[str, str] | None,
    finish: str | None = None,
    usage: Usage | None = None,
) -> dict[str, Any]:
    """One SSE event of a streamed completion; ``delta`` None: the usage chunk (no choices)."""
    chunk: dict[str, Any] = {
        "id": completion_id(user_row_id),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage_json(usage)
    return chunk


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line only when named)."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


def completion_error_status(failure: Failure) -> int:
    """How a failed turn answers an OpenAI client: retryable upstream trouble is 503."""
    if failure.reason in ATTACHMENT_FAILURES:  # valid, but nothing in it could be used
        return 422
    if failure.reason in ("context_overflow", "bad_request", "content_filter"):
        return 400
    if failure.retryable:
        return 503
    return 502


def error_json(message: str, code: str, status: int, param: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"message": message, "type": code, "code": code, "status": status}
    if param is not None:
        error["param"] = param
    return {"error": error}
