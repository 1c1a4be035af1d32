"""SendStreamingMessage and SubscribeToTask (SPEC 12): a task's events over SSE.

First the task as it is, then ``working``, then one artifact update per piece the model
writes (relayed by the peer API's :func:`~platforms.peer.streaming.relay`, so a slow client
never holds up the model and a client that hangs up ends only its own stream) and a
``working`` status update naming the tool as each tool call starts and ends (SPEC 15), then
the answer's last artifact chunk and the final status, or ``input-required`` when a call
waits for a yes (the stream ends there, as the spec ends it at an interrupted state; the
task's next message carries on). Each event is a JSON-RPC response to the request (1.0: a
``StreamResponse``; 0.3: the event tagged by ``kind``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import assert_never

from aiohttp import web

from gateway.messages import ToolActivity, TurnOutcome
from gateway.ports import ApprovalRequest
from platforms.a2a import _asking, convert
from platforms.a2a.convert import Envelope, TaskState, TaskView
from platforms.a2a.errors import error_body, rpc_error_of
from platforms.peer.streaming import SSE_HEADERS, LiveReply, Note, SseResponse, finish, relay


async def stream_task(
    request: web.Request,
    env: Envelope,
    first: TaskView,
    reply: LiveReply,
    *,
    settle: Callable[[], Awaitable[TurnOutcome | None]],
    reread: Callable[[], Awaitable[TaskView]],
    keepalive_s: float,
    wall: Callable[[], float],
) -> web.StreamResponse:
    """Stream the task of ``first`` until its final status, or until it asks for input."""
    rid, dialect = env.id, env.dialect
    response = SseResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    head = convert.sse_event(rid, convert.task_event(first, dialect))
    if not first.state.ends_stream:
        head += convert.sse_event(rid, convert.status_event(first, dialect, TaskState.WORKING))
    await response.write(head)
    streamed = 0

    def encode(pieces: list[str]) -> bytes:
        nonlocal streamed
        out = b""
        for piece in pieces:
            event = convert.artifact_event(first, piece, dialect, append=streamed > 0, last=False)
            out += convert.sse_event(rid, event)
            streamed += 1
        return out

    def encode_note(note: Note) -> bytes:
        match note:
            case ToolActivity():
                text = _asking.progress(note)
                if text is None:
                    return b""
                message_id = f"{first.id}-tool-{note.call_id}-{note.state}"
                event = convert.progress_event(first, dialect, text, message_id, wall())
                return convert.sse_event(rid, event)
            case ApprovalRequest():
                return b""  # the input-required status that ends the stream asks
            case _:
                assert_never(note)

    if first.state.ends_stream:
        reply.close()
        error: Exception | None = None
    else:
        _, error = await relay(request, response, reply, encode, settle(), keepalive_s, encode_note)
    if error is None:
        try:
            final = await reread()
        except Exception as exc:  # the store went away: the client learns it as an error
            error = exc
    if error is not None:
        body = error_body(rid, rpc_error_of(error))
        await finish(response, b"data: " + convert.json_bytes(body) + b"\n\n")
        return response
    tail = b""
    if final.state is TaskState.COMPLETED and final.reply is not None:
        text = "" if streamed else final.reply  # not streamed: the whole answer at once
        event = convert.artifact_event(final, text, dialect, append=streamed > 0, last=True)
        tail += convert.sse_event(rid, event)
    tail += convert.sse_event(rid, convert.status_event(final, dialect))
    await finish(response, tail)
    return response
