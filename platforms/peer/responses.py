"""Open Responses / OpenAI Responses at ``/v1/responses`` (SPEC 12): a response is one turn.

``POST /v1/responses`` admits the input's last user message as a turn of a peer session, as
``/v1/chat/completions`` does (same Idempotency-Key rules, same wait, same streaming relay):
``previous_response_id`` continues that response's conversation, ``conversation`` names a
session (in the token's ``sessions`` globs, else 404), neither starts a new one of the token's
own (``anon-<owner>-...``: no other token reaches it, SPEC 14). ``instructions`` (and
system/developer input items) reach the model as an extra system message of that turn only:
they are not stored, so the conversation's history does not carry them (and a turn resumed
after a restart runs without them). A response's id names its user row
(``_responses_json.response_id``), so ``GET`` reads it back from the rows on any node, after
any restart; ``DELETE`` removes the turn's rows (user row, reply, outbox, preview) and keeps
the conversation's other turns. A failed turn answers as the chat completions route does (its
status and class); a turn stopped by ``/stop`` is a ``cancelled`` response.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from gateway.messages import STOPPED_REPLY, Failure, MessageState, StoredMessage, TurnOutcome, Usage
from gateway.ports import Intake, Transcripts
from platforms.peer import _responses_json as rj
from platforms.peer import convert, streaming
from platforms.peer.errors import json_error
from platforms.peer.streaming import SSE_HEADERS, LiveReply, SseResponse, finish, relay
from policy import TRANSIENT

log = logging.getLogger(__name__)


class Host(Protocol):
    """What the routes use of the peer adapter: its admission path and its access rules."""

    _intake: Intake
    _transcripts: Transcripts
    sse_keepalive_s: float

    def _session(self, request: web.Request, session_id: str) -> str: ...

    def _anon_scope(self, request: web.Request) -> bytes: ...

    def _by(self, request: web.Request) -> str: ...

    async def _read_json(self, request: web.Request) -> Any: ...

    def _run_turn(
        self,
        session_id: str,
        text: str,
        idempotency_key: str | None,
        *,
        retry: bool = False,
        reply: LiveReply | None = None,
        response_format: Mapping[str, Any] | None = None,
        instructions: str | None = None,
    ) -> Awaitable[TurnOutcome]: ...


def add_routes(router: web.UrlDispatcher, host: Host) -> None:
    routes = ResponsesRoutes(host)
    router.add_post("/v1/responses", routes.create)
    router.add_get("/v1/responses/{response_id}", routes.retrieve)
    router.add_delete("/v1/responses/{response_id}", routes.delete)


def _not_found(what: str, param: str | None = None) -> convert.BadRequest:
    return convert.BadRequest(
        f"no response {what[:80]!r}", status=404, code="not_found", param=param
    )


class ResponsesRoutes:
    def __init__(self, host: Host) -> None:
        self._host = host

    def __repr__(self) -> str:
        return "<ResponsesRoutes>"

    async def _turn_row(
        self, request: web.Request, resp_id: str, param: str | None = None
    ) -> StoredMessage:
        """The user row of a response the request's token may read, else 404 (malformed,
        unknown, deleted, another token's, or a session outside its globs: all alike).

        The id's MAC only says the id was minted for this token, and any token can mint one
        for any row: the row's conversation decides (``_session``: an anonymous one only
        for the token that made it, a named one by the token's globs)."""
        row_id = rj.decode_id(resp_id, self._host._anon_scope(request))
        row = await self._host._transcripts.message(row_id) if row_id is not None else None
        if (
            row is None
            or row.role != "user"
            or row.platform != "peer"
            or not row.conversation.startswith("peer:")
        ):
            raise _not_found(resp_id, param)
        try:
            self._host._session(request, row.conversation.removeprefix("peer:"))
        except convert.BadRequest:
            raise _not_found(resp_id, param) from None
        return row

    async def create(self, request: web.Request) -> web.StreamResponse:
        parsed = rj.response_request(await self._host._read_json(request))
        key = request.headers.get("Idempotency-Key")
        scope = self._host._anon_scope(request)
        if parsed.previous_response_id is not None:
            previous = await self._turn_row(
                request, parsed.previous_response_id, "previous_response_id"
            )
            session_id = previous.conversation.removeprefix("peer:")
        elif parsed.conversation is not None:
            try:
                session_id = self._host._session(request, parsed.conversation)
            except convert.BadRequest as exc:
                exc.param = "conversation"
                raise
        else:
            session_id = convert.anonymous_session(scope, key, b"botmux-responses")
        started = rj.now()

        def view(outcome: TurnOutcome, status: str) -> rj.ResponseView:
            return rj.ResponseView(
                id=rj.response_id(outcome.user_row_id, scope),
                session_id=session_id,
                created_at=started,
                model=parsed.model,
                status=status,
                text=outcome.reply,
                usage=outcome.usage,
                failure=outcome.failure,
                previous_response_id=parsed.previous_response_id,
                metadata=parsed.metadata,
                instructions=parsed.instructions,
            )

        def run(reply: LiveReply | None) -> Awaitable[TurnOutcome]:
            return self._host._run_turn(
                session_id,
                parsed.text,
                key,
                reply=reply,
                response_format=parsed.response_format,
                instructions=parsed.instructions,
            )

        if not parsed.stream:
            outcome = await run(None)
            if outcome.failure is not None:
                return streaming.completion_failure(outcome)
            return web.json_response(rj.response_json(view(outcome, rj.outcome_status(outcome))))
        return await _stream(request, self._host.sse_keepalive_s, scope, run, view)

    async def retrieve(self, request: web.Request) -> web.Response:
        resp_id = request.match_info["response_id"]
        row = await self._turn_row(request, resp_id)
        reply = await self._host._transcripts.reply_to(row.id)
        scope = self._host._anon_scope(request)
        # One row id, not the conversation (issue 37, L-8): the turn before this one.
        before = await self._host._transcripts.previous_turn(row.conversation, row.id)
        previous = rj.response_id(before, scope) if before is not None else None
        status, text, usage, failure = _settled(row, reply)
        body = rj.response_json(
            rj.ResponseView(
                id=resp_id,
                session_id=row.conversation.removeprefix("peer:"),
                created_at=row.created_at,
                model=convert.MODEL_NAME,
                status=status,
                text=text,
                usage=usage,
                failure=failure,
                previous_response_id=previous,
            )
        )
        return web.json_response(body)

    async def delete(self, request: web.Request) -> web.Response:
        resp_id = request.match_info["response_id"]
        row = await self._turn_row(request, resp_id)
        deleted = await self._host._intake.delete_turn(row.id, by=self._host._by(request))
        if deleted is None:
            raise _not_found(resp_id)
        if not deleted:
            return json_error(
                409, "the response is still in progress; delete it once it ended", "in_progress"
            )
        return web.json_response(rj.deleted_json(resp_id))


def _settled(
    row: StoredMessage, reply: StoredMessage | None
) -> tuple[str, str, Usage | None, Failure | None]:
    """A stored turn's status, text, usage and failure."""
    if row.state == MessageState.PENDING:
        return "in_progress", "", None, None
    if row.state == MessageState.CANCELLED:
        return "cancelled", STOPPED_REPLY, None, None
    if reply is None:
        failure = Failure("purged", False, detail="dropped by an operator")
        return "failed", "the message was dropped before it ran", None, failure
    usage = Usage(reply.prompt_tokens or 0, reply.completion_tokens or 0)
    if reply.failure:
        failure = Failure(reply.failure, reply.failure in TRANSIENT)
        return "failed", reply.content, usage, failure
    return "completed", reply.content, usage, None


def _where(resp_id: str) -> dict[str, Any]:
    """Where a text event belongs: the one output item's one content part."""
    return {"item_id": rj.item_id(resp_id), "output_index": 0, "content_index": 0}


def _event(kind: str, seq: int, **fields: Any) -> bytes:
    data = {"type": kind, "sequence_number": seq, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


async def _stream(
    request: web.Request,
    keepalive_s: float,
    scope: bytes,
    run: Callable[[LiveReply], Awaitable[TurnOutcome]],
    view: Callable[[TurnOutcome, str], rj.ResponseView],
) -> web.StreamResponse:
    """The turn as Responses stream events, relayed as the model writes (the chat
    completions' relay: a failure before any piece and within ``keepalive_s`` is answered
    with its status; once the headers went out, as ``response.failed`` or ``error``)."""
    response = SseResponse(headers=SSE_HEADERS)
    reply = LiveReply()
    seq = 0
    resp_id = ""
    outcome: TurnOutcome | None = None

    def emit(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return _event(kind, seq - 1, **fields)

    def opening(row: int, created: dict[str, Any]) -> bytes:
        nonlocal resp_id
        resp_id = rj.response_id(row, scope)
        where = _where(resp_id)
        return (
            emit("response.created", response=created)
            + emit("response.in_progress", response=created)
            + emit(
                "response.output_item.added",
                output_index=0,
                item=rj.output_item(resp_id, "", "in_progress"),
            )
            + emit("response.content_part.added", part=rj.output_text(""), **where)
        )

    def delta(piece: str) -> bytes:
        return emit("response.output_text.delta", delta=piece, logprobs=[], **_where(resp_id))

    def encode(pieces: list[str]) -> bytes:
        head = b""
        if not resp_id:
            row = reply.row or (outcome.user_row_id if outcome is not None else 0)
            pending = TurnOutcome("", row, "", None, (), Usage())
            head = opening(row, rj.response_json(view(pending, "in_progress")) | {"usage": None})
        return head + b"".join(delta(piece) for piece in pieces)

    outcome, error = await relay(request, response, reply, encode, run(reply), keepalive_s)
    if not response.prepared:
        if error is not None:
            raise error
        assert outcome is not None
        if outcome.failure is not None:
            return streaming.completion_failure(outcome)
        await response.prepare(request)
    if error is not None:
        body = streaming.stream_error(error, None)["error"]
        await finish(response, emit("error", code=body["code"], message=body["message"]))
        return response
    assert outcome is not None
    if (status := rj.outcome_status(outcome)) != "completed":  # failed, or stopped
        head = b"" if resp_id else encode([])  # headers out on a keep-alive: open it first
        failed = rj.response_json(view(outcome, status))
        await finish(response, head + emit("response.failed", response=failed))
        return response
    tail = b"" if reply.written else encode([outcome.reply])  # not streamed: all at once
    done = rj.response_json(view(outcome, "completed"))
    where = _where(resp_id)
    tail += emit("response.output_text.done", text=outcome.reply, logprobs=[], **where)
    tail += emit("response.content_part.done", part=rj.output_text(outcome.reply), **where)
    tail += emit("response.output_item.done", output_index=0, item=done["output"][0])
    tail += emit("response.completed", response=done)
    await finish(response, tail)
    return response
