"""Streamed replies of the peer API (SPEC 8): a turn's pieces, relayed as server-sent events.

The session actor asks the adapter who waits for a turn as it starts (``watching``); the
requests waiting for one platform message id share a :class:`Watched`, the turn's
:class:`~gateway.ports.ReplyStream`: each piece the model writes is appended to the
:class:`LiveReply` of every streaming request there, at once and without blocking, and each
request's :func:`pump` writes its pieces to its client as fast as that client reads. A slow
or vanished client therefore never holds up the model, and a client that hangs up only ends
its own pump: the turn runs on in its session actor and its answer is stored.

A peer client cannot be shown a correction, so once a piece reached one the stream is
``binding``: a failure of that attempt ends the turn as failed (the agent gives up at once).

Beside the text, a request that shows tools (the session chat stream, A2A's streams) is handed
the turn's notes (SPEC 15): each tool call's change of state (:class:`ToolActivity`) and each
approval asked (:class:`ApprovalRequest`: the turn's :class:`Watched` is its asker while such a
request watches). A note keeps its place among the pieces (the number of pieces before it) and
is encoded by the request's own ``encode_note``; the text path pays one list check per write.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, assert_never

import anyio
from aiohttp import web

from gateway.errors import ConversationClosed, StoreError
from gateway.messages import AttemptFailed, ReplyDelta, StreamEvent, ToolActivity, TurnOutcome
from gateway.ports import ApprovalRequest, Watch
from platforms.peer import convert

log = logging.getLogger(__name__)

KEEPALIVE = b": keepalive\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"


class SseResponse(web.StreamResponse):
    """An SSE response whose headers ``prepare`` keeps until the first bytes are written, so
    they leave in one TCP send with the first event instead of one send (and, under load, a
    scheduling round of the client) before it. aiohttp's own ``Response`` buffers its headers
    the same way; a ``StreamResponse`` sends them at ``prepare`` unless told not to. Should a
    later aiohttp drop the flag, the headers just go out on their own again."""

    _send_headers_immediately = False


#: Runs the turn of a request, streaming into the LiveReply it is given.
Run = Callable[["LiveReply"], Awaitable[TurnOutcome]]
#: What a stream that shows tools is told beside the text (SPEC 15).
Note = ToolActivity | ApprovalRequest
#: A request's encoding of its pieces, and of its notes (None: it shows none).
Encode = Callable[[list[str]], bytes]
EncodeNote = Callable[[Note], bytes]
T = TypeVar("T")


class LiveReply:
    """One streaming request's view of its turn's answer: the pieces handed to it so far and
    how many it has written; ``closed`` once the turn's outcome is there. ``shows_tools``:
    the request is handed the turn's notes too (tool progress, approvals)."""

    __slots__ = (
        "_loop",
        "_waiter",
        "closed",
        "gone",
        "notes",
        "pieces",
        "row",
        "shows_tools",
        "silent",
        "written",
    )

    def __init__(self, *, shows_tools: bool = False) -> None:
        self.pieces: list[str] = []
        self.shows_tools = shows_tools
        # Notes not written yet, each after the pieces before it: (len(pieces) then, note).
        self.notes: list[tuple[int, Note]] = []
        self.written = 0
        self.row: int | None = None  # the user row, once admitted
        self.closed = False
        self.gone = False  # the client hung up
        self.silent = False  # a keep-alive comment is due
        # Only while the pump waits. A bare future of the loop, not an Event: aiohttp ties
        # this module to asyncio anyway, and an anyio Event a piece (with the asyncio Event
        # and the future inside it) was a tenth of the pump's CPU.
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # (asking for it is a getpid())

    def __repr__(self) -> str:
        return f"<LiveReply pieces={len(self.pieces)} written={self.written}>"

    def append(self, text: str) -> None:
        self.pieces.append(text)
        self.wake()

    def note(self, note: Note) -> None:
        self.notes.append((len(self.pieces), note))
        self.wake()

    def close(self) -> None:
        self.closed = True
        self.wake()

    def take(self) -> list[str]:
        """The pieces not written yet (they count as written from now on)."""
        new = self.pieces[self.written :]
        self.written = len(self.pieces)
        return new

    def take_noted(self, encode: Encode, encode_note: EncodeNote) -> bytes:
        """The pieces and notes not written yet, encoded in their order (all written from
        now on)."""
        out: list[bytes] = []
        start = self.written
        for at, note in self.notes:
            if at > start:
                out.append(encode(self.pieces[start:at]))
                start = at
            out.append(encode_note(note))
        self.notes.clear()
        if len(self.pieces) > start:
            out.append(encode(self.pieces[start:]))
        self.written = len(self.pieces)
        return b"".join(out)

    async def changed(self) -> None:
        """Until the next piece or the close (a piece is never missed: the pump calls this
        only after ``take`` found nothing, with no await in between)."""
        if self._waiter is None:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._waiter = self._loop.create_future()
        await self._waiter

    def wake(self) -> None:
        # A piece while the pump is busy writing needs no wake-up: it takes it next round.
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():  # done: the pump was cancelled
            waiter.set_result(None)


class Watched:
    """Every request waiting for one turn: what they asked of the model, and the turn's
    reply stream, fanned out to those that stream; while one of them shows tools, the turn's
    asker too (an approval is a note to those)."""

    __slots__ = ("_binding", "instructions", "replies", "requests", "response_format")

    def __init__(
        self, response_format: Mapping[str, Any] | None, instructions: str | None = None
    ) -> None:
        self.response_format = response_format
        self.instructions = instructions
        self.replies: list[LiveReply] = []
        self.requests = 0
        self._binding = False

    def __repr__(self) -> str:
        return f"<Watched requests={self.requests} streaming={len(self.replies)}>"

    def watch(self) -> Watch:
        return Watch(
            stream=self if self.replies else None,
            response_format=self.response_format,
            instructions=self.instructions,
        )

    def put(self, event: StreamEvent) -> None:
        match event:
            case ReplyDelta(text=text):
                for reply in self.replies:
                    reply.append(text)
                self._binding = self._binding or bool(self.replies)
            case AttemptFailed():
                pass  # nothing reached a client yet (else the turn ends failed): nothing to undo
            case ToolActivity():
                self._note(event)
            case _:
                assert_never(event)

    @property
    def binding(self) -> bool:
        return self._binding

    @property
    def asking(self) -> bool:
        """Whether a request here can be asked for an approval now (it shows tools)."""
        return any(reply.shows_tools for reply in self.replies)

    async def ask(self, request: ApprovalRequest) -> None:
        """The turn's :class:`~gateway.ports.Asker`: the request goes to every request here
        that shows tools; the answer comes back through the approvals route (or, on A2A, the
        task's next message). Nobody watching any more: the wait is stored, and answered the
        same way."""
        self._note(request)

    def _note(self, note: Note) -> None:
        for reply in self.replies:
            if reply.shows_tools:
                reply.note(note)


async def pump(
    request: web.Request,
    response: web.StreamResponse,
    reply: LiveReply,
    encode: Encode,
    keepalive_s: float,
    encode_note: EncodeNote | None = None,
) -> None:
    """Write ``reply``'s pieces to the client as they come, until it is closed and all are
    written. The headers go out with the first piece, or after ``keepalive_s`` of silence
    (then an SSE comment every ``keepalive_s``, so proxies keep the connection), so a turn
    that fails before any piece can still answer with a status of its own.

    The silence is timed by a timer of the loop (:class:`_Keepalive`) that fires once per
    ``keepalive_s`` and compares how many pieces were written: a timeout around each wait
    for a piece (a cancel scope per piece) was a tenth of the CPU of a streamed turn, reading
    the clock at each write a fiftieth, and a task of its own (with its task group) for the
    keep-alive 0.3 M instructions, a thirteenth of a turn streamed in one piece."""
    keepalive = _Keepalive(reply, keepalive_s)
    try:
        await _write(request, response, reply, encode, encode_note)
    finally:
        keepalive.cancel()


async def _write(
    request: web.Request,
    response: web.StreamResponse,
    reply: LiveReply,
    encode: Encode,
    encode_note: EncodeNote | None,
) -> None:
    try:
        while True:
            if reply.notes:  # only a reply that shows tools gets any
                assert encode_note is not None, "a reply that shows tools encodes its notes"
                data = reply.take_noted(encode, encode_note)
                if data:
                    if not response.prepared:
                        await response.prepare(request)
                    await response.write(data)
                continue
            pieces = reply.take()
            if pieces:
                if not response.prepared:
                    await response.prepare(request)
                await response.write(encode(pieces))
                continue
            if reply.silent:
                reply.silent = False
                await response.prepare(request)
                await response.write(KEEPALIVE)
                continue
            if reply.closed:
                return
            await reply.changed()
    except ConnectionError:
        reply.gone = True
        log.debug("peer API: a streaming client hung up; its turn runs on")


class _Keepalive:
    """Marks ``reply`` silent when a ``keepalive_s`` went by without a piece taken to be
    written, looking once a ``keepalive_s`` (a ``call_later`` of the loop: a callback, not a
    task; ``cancel`` stops it). A turn silent from the start gets a comment every
    ``keepalive_s``, a stream gone quiet its first within twice that of its last piece."""

    __slots__ = ("_every", "_handle", "_loop", "_reply", "_written")

    def __init__(self, reply: LiveReply, keepalive_s: float) -> None:
        self._reply = reply
        self._every = keepalive_s
        self._written = reply.written
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(keepalive_s, self._look)

    def _look(self) -> None:
        reply = self._reply
        if reply.written == self._written and not reply.silent:
            reply.silent = True
            reply.wake()
        self._written = reply.written
        self._handle = self._loop.call_later(self._every, self._look)

    def cancel(self) -> None:
        self._handle.cancel()


async def finish(response: web.StreamResponse, data: bytes) -> None:
    """The stream's last events and its end; a client gone by now is no error."""
    try:
        await response.write(data)
        await response.write_eof()
    except ConnectionError:
        log.debug("peer API: a streaming client hung up before the end")


async def relay(
    request: web.Request,
    response: web.StreamResponse,
    reply: LiveReply,
    encode: Encode,
    turn: Awaitable[T],
    keepalive_s: float,
    encode_note: EncodeNote | None = None,
) -> tuple[T | None, Exception | None]:
    """Run the turn while its pieces (and notes) are written to the client; every one is
    written when this returns (unless the client left). A hang-up cancels the handler and so
    this, never the turn, which runs in its session actor."""
    outcome: T | None = None
    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, request, response, reply, encode, keepalive_s, encode_note)
        try:
            outcome = await turn
        except Exception as exc:  # answered or sent by the caller, once the pump ended
            error = exc
        finally:
            reply.close()
    return outcome, error


async def chat_stream(
    request: web.Request, session_id: str, run: Run, keepalive_s: float
) -> web.StreamResponse:
    """The session chat route streamed: ``delta`` events as the model writes, ``tool`` and
    ``approval`` events as its tool calls change state and wait for a yes (SPEC 15), then
    ``message`` (the JSON of the plain reply), then the end; an error before any event is the
    plain JSON error."""
    response = SseResponse(headers=SSE_HEADERS)

    def encode(pieces: list[str]) -> bytes:  # convert.sse({"content": piece}, "delta") each
        return b"".join(_DELTA_HEAD + _json(piece) + _DELTA_TAIL for piece in pieces)

    reply = LiveReply(shows_tools=True)
    turn = run(reply)
    outcome, error = await relay(request, response, reply, encode, turn, keepalive_s, chat_note)
    if error is not None:
        if not response.prepared:
            raise error
        await finish(response, convert.sse(stream_error(error, None), "error"))
        return response
    assert outcome is not None
    await response.prepare(request)
    body = convert.chat_response(session_id, outcome.reply, outcome.failure)
    await finish(response, convert.sse(body, "message"))
    return response


async def completion_stream(
    request: web.Request, parsed: convert.CompletionRequest, run: Run, keepalive_s: float
) -> web.StreamResponse:
    """A streamed completion: the model's pieces relayed as they arrive. A turn that fails
    before any piece and within ``keepalive_s`` is answered as ever (a failure with its
    status); once the headers went out (a piece, or a keep-alive comment), a failure arrives
    as an ``error`` event."""
    response = SseResponse(headers=SSE_HEADERS)
    reply = LiveReply()
    model = parsed.model
    frame: tuple[bytes, bytes] | None = None  # a content chunk's event around its content

    def encode(pieces: list[str]) -> bytes:
        nonlocal frame
        head = b""
        if frame is None:
            row = reply.row or 0
            head = convert.sse(convert.completion_chunk(row, model, {"role": "assistant"}))
            frame = _frame(convert.completion_chunk(row, model, {"content": _MARK}))
        before, after = frame
        return head + b"".join(before + _json(piece) + after for piece in pieces)

    outcome, error = await relay(request, response, reply, encode, run(reply), keepalive_s)
    if not response.prepared:
        if error is not None:
            raise error
        assert outcome is not None
        if outcome.failure is not None:
            return completion_failure(outcome)
        await response.prepare(request)
    if error is not None or (outcome is not None and outcome.failure is not None):
        await finish(response, convert.sse(stream_error(error, outcome)) + DONE)
        return response
    assert outcome is not None
    row = outcome.user_row_id
    tail = b"" if reply.written else encode([outcome.reply])  # not streamed: all at once
    tail += convert.sse(convert.completion_chunk(row, model, {}, "stop"))
    if parsed.include_usage:
        tail += convert.sse(convert.completion_chunk(row, model, None, usage=outcome.usage))
    await finish(response, tail + DONE)
    return response


def chat_note(note: Note) -> bytes:
    """A note as the chat stream's event: ``tool`` (a call's new state; ``error`` when a
    finished call's result is an error) or ``approval`` (a call waits for a yes: answer it at
    ``POST /api/sessions/{id}/approvals/{call_id}``)."""
    match note:
        case ToolActivity(call_id=call_id, tool=tool, state=state, error=error):
            data: dict[str, Any] = {"call_id": call_id, "tool": tool, "state": state}
            if error and state == "finished":  # a denial is no tool's error
                data["error"] = True
            return convert.sse(data, "tool")
        case ApprovalRequest():
            return convert.sse(
                {
                    "call_id": note.call_id,
                    "tool": note.tool,
                    "arguments": note.arguments,
                    "timeout_s": note.timeout_s,
                },
                "approval",
            )
        case _:
            assert_never(note)


#: A piece's event is encoded once per stream around a mark, then only the piece per delta:
#: the bytes are exactly ``convert.sse`` of the chunk (``json.dumps``' default separators).
_MARK = "\x00"
_DELTA_HEAD, _DELTA_TAIL = b'event: delta\ndata: {"content": ', b"}\n\n"


def _json(text: str) -> bytes:
    return json.dumps(text).encode()


def _frame(chunk: dict[str, Any]) -> tuple[bytes, bytes]:
    before, mark, after = convert.sse(chunk).partition(_json(_MARK))
    assert mark, "the mark is in the chunk"
    return before, after


def completion_failure(outcome: TurnOutcome) -> web.Response:
    """A failed turn as an OpenAI client expects it: an error status and body."""
    assert outcome.failure is not None
    status = convert.completion_error_status(outcome.failure)
    body = convert.error_json(outcome.reply, outcome.failure.reason, status)
    return web.json_response(body, status=status)


def stream_error(error: Exception | None, outcome: TurnOutcome | None) -> dict[str, Any]:
    """The ``error`` event of a stream whose headers went out before the turn failed."""
    if isinstance(error, convert.BadRequest):
        return convert.error_json(error.message, error.code, error.status)
    if isinstance(error, ConversationClosed | StoreError):
        return convert.error_json("botmux is shutting down; retry shortly", "draining", 503)
    if error is not None:
        log.error("peer API: a streamed turn failed", exc_info=error)
        return convert.error_json("internal error; see botmux's log", "internal_error", 500)
    assert outcome is not None and outcome.failure is not None
    failure = outcome.failure
    status = convert.completion_error_status(failure)
    return convert.error_json(outcome.reply, failure.reason, status)
