"""Pure mapping between A2A's JSON-RPC wire shapes and botmux's values (SPEC 12).

Two dialects share ``POST /a2a``: A2A 1.0 (the protobuf JSON of a2a.proto: ``SendMessage``,
``TASK_STATE_COMPLETED``, ``ROLE_USER``, parts ``{"text": ...}``, stream results wrapped as
``{"statusUpdate": ...}``) and 0.3 (``message/send``, ``completed``, ``user``, parts
``{"kind": "text", ...}``, stream results tagged by ``kind``). A method's name says its
dialect; the ``A2A-Version`` header (absent: 0.3) must allow it. Nothing here does I/O.
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from platforms._text import text_problem
from platforms.a2a.errors import (
    CONTENT_TYPE_NOT_SUPPORTED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    VERSION_NOT_SUPPORTED,
    RpcError,
)

MAX_ID_CHARS = 256  # a JSON-RPC id, a messageId or a contextId
MAX_JSON_INT = 2**53
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
ANSWER_ARTIFACT = "answer"
TEXT_MODES = frozenset({"text", "text/plain", "*/*", "text/*"})
#: What a push config's url, token and credentials may hold: visible ASCII, no blanks.
_VISIBLE = re.compile(r"[\x21-\x7e]+")
#: An auth scheme (RFC 9110's token), as it goes into ``Authorization: <scheme> ...``.
_SCHEME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


class Dialect(StrEnum):
    V1 = "1.0"
    V03 = "0.3"


class Op(StrEnum):
    SEND = "send"
    STREAM = "stream"
    GET = "get"
    LIST = "list"
    CANCEL = "cancel"
    SUBSCRIBE = "subscribe"
    PUSH_SET = "push_set"
    PUSH_GET = "push_get"
    PUSH_LIST = "push_list"
    PUSH_DELETE = "push_delete"
    EXTENDED_CARD = "extended_card"


METHODS: dict[str, tuple[Op, Dialect]] = {
    "SendMessage": (Op.SEND, Dialect.V1),
    "SendStreamingMessage": (Op.STREAM, Dialect.V1),
    "GetTask": (Op.GET, Dialect.V1),
    "ListTasks": (Op.LIST, Dialect.V1),
    "CancelTask": (Op.CANCEL, Dialect.V1),
    "SubscribeToTask": (Op.SUBSCRIBE, Dialect.V1),
    "CreateTaskPushNotificationConfig": (Op.PUSH_SET, Dialect.V1),
    "GetTaskPushNotificationConfig": (Op.PUSH_GET, Dialect.V1),
    "ListTaskPushNotificationConfigs": (Op.PUSH_LIST, Dialect.V1),
    "DeleteTaskPushNotificationConfig": (Op.PUSH_DELETE, Dialect.V1),
    "GetExtendedAgentCard": (Op.EXTENDED_CARD, Dialect.V1),
    "message/send": (Op.SEND, Dialect.V03),
    "message/stream": (Op.STREAM, Dialect.V03),
    "tasks/get": (Op.GET, Dialect.V03),
    "tasks/cancel": (Op.CANCEL, Dialect.V03),
    "tasks/resubscribe": (Op.SUBSCRIBE, Dialect.V03),
    "tasks/pushNotificationConfig/set": (Op.PUSH_SET, Dialect.V03),
    "tasks/pushNotificationConfig/get": (Op.PUSH_GET, Dialect.V03),
    "tasks/pushNotificationConfig/list": (Op.PUSH_LIST, Dialect.V03),
    "tasks/pushNotificationConfig/delete": (Op.PUSH_DELETE, Dialect.V03),
    "agent/getAuthenticatedExtendedCard": (Op.EXTENDED_CARD, Dialect.V03),
}


class TaskState(StrEnum):
    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"  # a tool call waits for a yes (SPEC 15)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def final(self) -> bool:
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED)

    @property
    def ends_stream(self) -> bool:
        """Final, or interrupted (input-required): a stream ends with it, and a blocking
        send returns it, as the spec says; the task's next message carries on."""
        return self.final or self is TaskState.INPUT_REQUIRED


_V1_STATES = {state: f"TASK_STATE_{state.upper().replace('-', '_')}" for state in TaskState}
_STATE_OF_V1 = {wire: state for state, wire in _V1_STATES.items()}


@dataclass(frozen=True, slots=True)
class Envelope:
    """A JSON-RPC request that is well formed and names a method we serve."""

    id: str | int | None
    op: Op
    dialect: Dialect
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PushTarget:
    """Where a task's notifications go, as the client set it (not validated yet)."""

    id: str
    url: str
    token: str = ""
    scheme: str = ""
    credentials: str = ""
    dialect: Dialect = Dialect.V1  # the shape its notifications take


@dataclass(frozen=True, slots=True)
class SendParams:
    message_id: str
    context_id: str | None
    task_id: str | None
    text: str
    return_immediately: bool
    history_length: int | None
    push: PushTarget | None


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as the store has it: its user row, and the answer once there is one."""

    id: str
    context_id: str
    state: TaskState
    message_id: str
    text: str
    created_at: float
    reply: str | None = None
    reply_at: float | None = None
    question: str | None = None  # input-required: what the task asks (SPEC 15)


def request_id(body: Any) -> str | int | None:
    """The id to answer with: the request's, when it is a valid JSON-RPC id."""
    if not isinstance(body, dict):
        return None
    value = body.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
        return value
    if isinstance(value, int) and abs(value) <= MAX_JSON_INT:
        return value
    return None


def envelope(raw: bytes, version_header: str | None) -> Envelope:
    """Parse and check one JSON-RPC request; raise :class:`RpcError` (with the request id
    that may be echoed in ``error_id``)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise RpcError(PARSE_ERROR) from exc
    rid = request_id(body)
    if not isinstance(body, dict):
        raise _with_id(RpcError(INVALID_REQUEST, "batch requests are not supported"), None)
    if body.get("jsonrpc") != "2.0":
        raise _with_id(RpcError(INVALID_REQUEST, "'jsonrpc' must be exactly '2.0'"), rid)
    if "id" in body and body["id"] is not None and rid is None:
        raise _with_id(RpcError(INVALID_REQUEST, "id must be a short string or an integer"), None)
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise _with_id(RpcError(INVALID_REQUEST, "method is required"), rid)
    found = METHODS.get(method)
    if found is None:
        raise _with_id(RpcError(METHOD_NOT_FOUND), rid)
    op, dialect = found
    version = (version_header or "").strip() or "0.3"
    if _major_minor(version) not in ("1.0", "0.3"):
        raise _with_id(RpcError(VERSION_NOT_SUPPORTED, f"A2A-Version {version[:20]!r}"), rid)
    if dialect is Dialect.V1 and _major_minor(version) != "1.0":
        raise _with_id(RpcError(VERSION_NOT_SUPPORTED, f"{method} needs A2A-Version: 1.0"), rid)
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise _with_id(RpcError(INVALID_PARAMS, "params must be an object"), rid)
    return Envelope(rid, op, dialect, params)


class IdentifiedError(RpcError):
    """An :class:`RpcError` that knows the request id to answer with."""

    def __init__(self, error: RpcError, rid: str | int | None) -> None:
        super().__init__(error.code, error.detail)
        self.request_id = rid


def _with_id(error: RpcError, rid: str | int | None) -> IdentifiedError:
    return IdentifiedError(error, rid)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _bad(detail: str) -> RpcError:
    return RpcError(INVALID_PARAMS, detail)


def _string(params: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = params.get(key)
    if value is None or value == "":
        if required:
            raise _bad(f"{key} is required")
        return None
    if not isinstance(value, str):
        raise _bad(f"{key} must be a string")
    if len(value) > MAX_ID_CHARS:
        raise _bad(f"{key} is longer than {MAX_ID_CHARS} characters")
    return value


def _int(params: dict[str, Any], key: str, *, low: int = 0, high: int = 1000) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(f"{key} must be an integer from {low} to {high}")
    return value


def _object(params: dict[str, Any], key: str) -> dict[str, Any]:
    value = params.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"{key} must be an object")
    return value


def object_param(params: dict[str, Any], key: str) -> dict[str, Any]:
    value = _object(params, key)
    if not value:
        raise _bad(f"{key} is required")
    return value


def optional_id(params: dict[str, Any], key: str) -> str | None:
    return _string(params, key)


def task_id(params: dict[str, Any], key: str = "id") -> str:
    value = _string(params, key, required=True)
    assert value is not None
    return value


def history_length(params: dict[str, Any]) -> int | None:
    return _int(params, "historyLength")


def _text_of(message: dict[str, Any], dialect: Dialect) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _bad("message.parts must be a non-empty list")
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            raise _bad("each part must be an object")
        kind = part.get("kind", "text") if dialect is Dialect.V03 else "text"
        text = part.get("text")
        if kind != "text" or text is None:
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, "botmux takes text parts only")
        if not isinstance(text, str):
            raise _bad("a text part's text must be a string")
        if (problem := text_problem(text)) is not None:  # as the peer API refuses it
            raise _bad(f"a text part's text {problem}")
        texts.append(text)
    text = "\n".join(texts)
    if not text.strip():
        raise _bad("the message has no text")
    return text


def _visible(value: str | None, name: str, form: re.Pattern[str] = _VISIBLE) -> str:
    """A push config's value that goes into a URL or a header: refused at set time unless
    it is of ``form`` (a CR/LF there once stopped the gateway when the notification was
    sent; an HTTP client refuses such a header only when it is used)."""
    if value and not form.fullmatch(value):
        what = "an auth scheme name" if form is _SCHEME else "visible ASCII characters"
        raise _bad(f"{name} must be {what} (no spaces or control characters)")
    return value or ""


def push_target(config: dict[str, Any], dialect: Dialect) -> PushTarget:
    url = _visible(_string(config, "url", required=True), "url")
    if not url.startswith(("http://", "https://")):
        raise _bad("url must be an http:// or https:// URL")
    auth = _object(config, "authentication")
    if dialect is Dialect.V03:
        schemes = auth.get("schemes") or []
        if not isinstance(schemes, list) or not all(isinstance(s, str) for s in schemes):
            raise _bad("authentication.schemes must be a list of strings")
        if schemes and len(schemes[0]) > MAX_ID_CHARS:
            raise _bad(f"authentication.schemes is longer than {MAX_ID_CHARS} characters")
        scheme = _visible(schemes[0] if schemes else "", "authentication.schemes", _SCHEME)
    else:
        scheme = _visible(_string(auth, "scheme"), "authentication.scheme", _SCHEME)
    credentials = _string(auth, "credentials")
    return PushTarget(
        id=_string(config, "id") or "",
        url=url,
        token=_visible(_string(config, "token"), "token"),
        scheme=scheme,
        credentials=_visible(credentials, "authentication.credentials"),
        dialect=dialect,
    )


def send_params(params: dict[str, Any], dialect: Dialect) -> SendParams:
    message = _object(params, "message")
    if not message:
        raise _bad("message is required")
    role = message.get("role")
    if role not in ({"ROLE_USER", "user"} if dialect is Dialect.V1 else {"user"}):
        raise _bad("message.role must be the user's")
    configuration = _object(params, "configuration")
    modes = configuration.get("acceptedOutputModes")
    if modes is not None:
        if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
            raise _bad("acceptedOutputModes must be a list of strings")
        if modes and not TEXT_MODES.intersection(modes):
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, "botmux answers text/plain only")
    if dialect is Dialect.V1:
        immediately = configuration.get("returnImmediately", False)
        push = configuration.get("taskPushNotificationConfig")
    else:
        immediately = configuration.get("blocking", True) is False
        push = configuration.get("pushNotificationConfig")
    if not isinstance(immediately, bool):
        raise _bad("returnImmediately / blocking must be a boolean")
    if push is not None and not isinstance(push, dict):
        raise _bad("the push notification config must be an object")
    return SendParams(
        message_id=task_id(message, "messageId"),
        context_id=_string(message, "contextId"),
        task_id=_string(message, "taskId"),
        text=_text_of(message, dialect),
        return_immediately=immediately,
        history_length=history_length(configuration),
        push=push_target(push, dialect) if push else None,
    )


@dataclass(frozen=True, slots=True)
class ListParams:
    context_id: str
    page_size: int
    before: int | None  # the page token: the last task of the page before (a row id)
    history_length: int | None
    state: TaskState | None


def list_params(params: dict[str, Any]) -> ListParams:
    context = _string(params, "contextId", required=True)
    assert context is not None
    token = _string(params, "pageToken") or ""
    if token and (not token.isdigit() or len(token) > 18 or int(token) < 1):
        raise _bad("pageToken is not one this server gave")
    status = params.get("status")
    state: TaskState | None = None
    if status not in (None, "", "TASK_STATE_UNSPECIFIED"):
        if not isinstance(status, str):
            raise _bad("status must be a task state")
        state = _STATE_OF_V1.get(status) or (
            TaskState(status) if status in TaskState.__members__.values() else None
        )
        if state is None:
            raise _bad("status must be a task state")
    return ListParams(
        context_id=context,
        page_size=_int(params, "pageSize", low=0, high=MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
        before=int(token) if token else None,
        history_length=history_length(params),
        state=state,
    )


# -- what we answer ----------------------------------------------------------------------


def timestamp(at: float) -> str:
    return (
        datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="milliseconds")
    ).replace("+00:00", "Z")


def _part(text: str, dialect: Dialect) -> dict[str, Any]:
    return {"text": text} if dialect is Dialect.V1 else {"kind": "text", "text": text}


def message_json(
    role: str, message_id: str, text: str, view: TaskView, dialect: Dialect
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messageId": message_id,
        "contextId": view.context_id,
        "taskId": view.id,
        "role": f"ROLE_{role.upper()}" if dialect is Dialect.V1 else role,
        "parts": [_part(text, dialect)],
    }
    if dialect is Dialect.V03:
        body["kind"] = "message"
    return body


def status_json(view: TaskView, dialect: Dialect, state: TaskState | None = None) -> dict[str, Any]:
    state = state or view.state
    status: dict[str, Any] = {
        "state": _V1_STATES[state] if dialect is Dialect.V1 else state.value,
        "timestamp": timestamp(view.reply_at or view.created_at),
    }
    if state in (TaskState.FAILED, TaskState.CANCELED) and view.reply:
        status["message"] = message_json("agent", f"{view.id}-status", view.reply, view, dialect)
    if state is TaskState.INPUT_REQUIRED and view.question:
        asking = message_json("agent", f"{view.id}-question", view.question, view, dialect)
        status["message"] = asking
    return status


def artifact_json(text: str, dialect: Dialect) -> dict[str, Any]:
    return {"artifactId": ANSWER_ARTIFACT, "name": "answer", "parts": [_part(text, dialect)]}


def task_json(view: TaskView, dialect: Dialect, history: int | None = None) -> dict[str, Any]:
    messages = [message_json("user", view.message_id, view.text, view, dialect)]
    if view.reply is not None and view.state is TaskState.COMPLETED:
        messages.append(message_json("agent", f"{view.id}-answer", view.reply, view, dialect))
    if history is not None:
        messages = messages[len(messages) - history :] if history else []
    body: dict[str, Any] = {
        "id": view.id,
        "contextId": view.context_id,
        "status": status_json(view, dialect),
        "history": messages,
    }
    if view.reply is not None and view.state is TaskState.COMPLETED:
        body["artifacts"] = [artifact_json(view.reply, dialect)]
    if dialect is Dialect.V03:
        body["kind"] = "task"
    return body


def status_event(
    view: TaskView, dialect: Dialect, state: TaskState | None = None
) -> dict[str, Any]:
    state = state or view.state
    event: dict[str, Any] = {
        "taskId": view.id,
        "contextId": view.context_id,
        "status": status_json(view, dialect, state),
    }
    if dialect is Dialect.V1:
        return {"statusUpdate": event}
    return {**event, "kind": "status-update", "final": state.ends_stream}


def progress_event(
    view: TaskView, dialect: Dialect, text: str, message_id: str, at: float
) -> dict[str, Any]:
    """A ``working`` status update whose message says what the task does now (a tool call's
    progress, SPEC 15)."""
    event = status_event(view, dialect, TaskState.WORKING)
    body = event["statusUpdate"] if dialect is Dialect.V1 else event
    body["status"]["message"] = message_json("agent", message_id, text, view, dialect)
    body["status"]["timestamp"] = timestamp(at)
    return event


def artifact_event(
    view: TaskView, text: str, dialect: Dialect, *, append: bool, last: bool
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "taskId": view.id,
        "contextId": view.context_id,
        "artifact": artifact_json(text, dialect),
        "append": append,
        "lastChunk": last,
    }
    if dialect is Dialect.V1:
        return {"artifactUpdate": event}
    return {**event, "kind": "artifact-update"}


def task_event(view: TaskView, dialect: Dialect) -> dict[str, Any]:
    body = task_json(view, dialect)
    return {"task": body} if dialect is Dialect.V1 else body


def send_result(view: TaskView, dialect: Dialect, history: int | None) -> dict[str, Any]:
    body = task_json(view, dialect, history)
    return {"task": body} if dialect is Dialect.V1 else body


def push_json(task: str, target: PushTarget, dialect: Dialect) -> dict[str, Any]:
    """A stored push config as the client sees it (never the credentials)."""
    if dialect is Dialect.V1:
        body: dict[str, Any] = {"id": target.id, "taskId": task, "url": target.url}
        if target.scheme:
            body["authentication"] = {"scheme": target.scheme}
        return body
    config: dict[str, Any] = {"id": target.id, "url": target.url}
    if target.scheme:
        config["authentication"] = {"schemes": [target.scheme]}
    return {"taskId": task, "pushNotificationConfig": config}


def result_body(rid: str | int | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def json_bytes(body: Any) -> bytes:
    return json.dumps(body).encode()


def sse_event(rid: str | int | None, result: Any) -> bytes:
    return b"data: " + json_bytes(result_body(rid, result)) + b"\n\n"
