"""The A2A actor (SPEC 12): JSON-RPC at ``POST /a2a`` and the agent card, on the peer
listener, and the outlet of the ``a2a`` platform.

Why our own small JSON-RPC layer and not a2a-sdk's server: the SDK's server is Starlette
with its own task store and event queues (in memory or SQLAlchemy), a second web stack and
a second store beside ours. Here a task *is* its user row: admitted once (the message's
``messageId``, scoped to the peer token, is the row's platform message id, so a repeated
send returns the task and runs no second turn), run by its session actor, answered in the
store's one transaction, readable from any node. The listener's auth, limits and guard
apply as they do to the rest of the peer API. The SDK is the client in the interop tests.

A task's state is its row's: pending (``submitted``; ``working`` once its turn started on
this node; ``input-required`` while one of its tool calls waits for a yes, read from the
store's steps, so on any node), answered (``completed``), failed, cancelled (``canceled``).
Push notifications ride on the reply's outbox chunk (:mod:`platforms.a2a._push`): the chunk
is recorded delivered only once every push config of the task was notified, so a
notification survives a restart and is retried with backoff like any chat reply.

Tools (SPEC 15, :mod:`platforms.a2a._asking`): every task can be asked (its token owns it),
so its turn is offered the tools that need a yes. Asked, the task moves to
``input-required``: a blocking send returns it, a stream ends with it, its push configs are
notified (best effort, as a cancellation's); its next message, a yes or a no, decides the
call (``Intake.decide``) instead of starting a turn, and the task carries on. A streaming
request sees each call's progress as ``working`` status updates naming the tool.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import web

from gateway.config import A2aConfig
from gateway.events import Observe
from gateway.messages import (
    STOPPED_REPLY,
    Inbound,
    MessageState,
    StoredMessage,
    TurnOutcome,
    conversation_key,
    local_part,
)
from gateway.ports import (
    ApprovalRequest,
    Asker,
    CallReads,
    Intake,
    Ledger,
    PushConfigs,
    Transcripts,
    Watch,
)
from platforms import _fetch
from platforms._courier import Courier, CourierStatistics, SentByCourier
from platforms.a2a import _asking, _push, _stream, convert
from platforms.a2a._asking import Answer
from platforms.a2a._settled import Settled
from platforms.a2a.card import agent_card
from platforms.a2a.convert import Dialect, Envelope, Op, TaskState, TaskView
from platforms.a2a.errors import (
    EXTENDED_CARD_NOT_CONFIGURED,
    INVALID_PARAMS,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    RpcError,
    error_body,
    rpc_error_of,
)
from platforms.peer.streaming import LiveReply, Watched

log = logging.getLogger(__name__)

PLATFORM = "a2a"
CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
RPC_PATH = "/a2a"
#: A waiting request also reads its task from the store after 2 s, then twice as long each
#: time up to 30 s: a backstop for a turn answered by another node.
CHECK_S = 2.0
CHECK_MAX_S = 30.0
#: How long CancelTask waits for the stopped turn to settle before answering.
CANCEL_WAIT_S = 10.0
SSE_KEEPALIVE_S = 15.0
CANCEL_PUSHES = 256
_CONTEXT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TASK_ID = re.compile(r"^[0-9]{1,18}$")
#: ListTasks' status filter as the user rows' states (the store filters on them); the other
#: states are a pending row's, told apart by what runs and what asks.
_ROW_STATES: dict[TaskState, tuple[str, ...]] = {
    TaskState.COMPLETED: (MessageState.ANSWERED,),
    TaskState.FAILED: (MessageState.FAILED,),
    TaskState.CANCELED: (MessageState.CANCELLED,),
}
_PENDING: tuple[str, ...] = (MessageState.PENDING,)


def _context_of(row: StoredMessage) -> str:
    """The contextId of a task's row (its conversation, without the token scope)."""
    local = local_part(row.conversation, PLATFORM) or ""
    scope, _, _ = (row.platform_message_id or "").partition(":")
    if scope != "-" and local.startswith(scope + ":"):
        return local[len(scope) + 1 :]
    return local


@dataclass(frozen=True, slots=True)
class A2aStatistics:
    """The A2A adapter's JSON-RPC calls and tasks, and the statistics of its courier, which
    sends the push notifications (``A2aAdapter.statistics()``)."""

    requests: int  # JSON-RPC calls
    errors: int  # answered with a JSON-RPC error
    tasks: int  # messages admitted as new tasks
    store_backstops: int  # waits for an outcome's event that timed out: the store asked
    waiting: int  # user rows whose outcome a request here waits for now
    courier: CourierStatistics


class A2aAdapter(SentByCourier):  # a chunk carries the task's push notification
    """The ``a2a`` platform: its routes (mounted on the peer listener) and its outlet."""

    platform = PLATFORM
    _intake: Intake  # what requests are admitted to: given to run()

    def __init__(
        self,
        config: A2aConfig,
        *,
        transcripts: Transcripts,
        calls: CallReads,
        push_configs: PushConfigs,
        ledger: Ledger,
        scope: Callable[[web.Request], bytes],
        base_url: Callable[[], str],
        bearer: Callable[[], bool],
        observe: Observe = lambda event: None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._wall = wall  # a progress update's timestamp
        self._transcripts = transcripts
        self._calls = calls
        self._scope = scope
        self._base_url = base_url
        self._bearer = bearer
        self._settled = Settled()
        self._watched: dict[str, Watched] = {}  # by platform message id
        # The stream of each turn running here that was watched as it started, by its row:
        # a request that streams the task later (its answer's, a subscriber) joins that one.
        self._live: dict[int, Watched] = {}
        self._running: dict[str, int] = {}  # conversation -> the user row running here
        self._answered = _asking.Answered()
        self._pusher = _push.Pusher(config.push_hosts, push_configs, self._push_body)
        self._courier = Courier(PLATFORM, self._pusher.send, ledger, observe=observe)
        # Tasks to notify with no outbox chunk (cancelled, or asking for input): a bounded
        # queue, best effort.
        self._notices, self._to_notify = anyio.create_memory_object_stream[int](CANCEL_PUSHES)
        self.sse_keepalive_s = SSE_KEEPALIVE_S
        self._requests = self._errors = self._tasks = self._store_backstops = 0

    def __repr__(self) -> str:
        return f"<A2aAdapter waiting={len(self._settled)} streaming={len(self._watched)}>"

    def statistics(self) -> A2aStatistics:
        return A2aStatistics(
            requests=self._requests,
            errors=self._errors,
            tasks=self._tasks,
            store_backstops=self._store_backstops,
            waiting=len(self._settled),
            courier=self._courier.statistics(),
        )

    # -- the platform's lifecycle ------------------------------------------------------------

    async def run(
        self, intake: Intake, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve ``intake``: started before the peer listener its routes are mounted on."""
        self._intake = intake
        async with self._pusher.open(), anyio.create_task_group() as tg:
            await tg.start(self._courier.run)
            tg.start_soon(self._notify)
            task_status.started()
            await anyio.sleep_forever()

    async def _notify(self) -> None:
        async with self._to_notify:
            async for row_id in self._to_notify:
                try:
                    await self._pusher.notify(row_id)
                except Exception:  # best effort: one task's notification never ends A2A
                    log.exception(
                        "a2a push: a cancelled task's notification failed",
                        extra={"task": row_id},
                    )

    @property
    def connected(self) -> bool:
        return True

    async def wait_delivered(self) -> None:
        await self._courier.wait_idle()

    # -- outlet ------------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return [text]

    # A2A messages are admitted as their text parts; nothing of them is ever fetched.
    fetch = _fetch.unsupported

    async def deliver(self, outcome: TurnOutcome) -> None:
        if self._running.get(outcome.conversation) == outcome.user_row_id:
            del self._running[outcome.conversation]
        for row in {outcome.user_row_id, *outcome.rows}:
            self._live.pop(row, None)
        self._settled.set(outcome.user_row_id)  # answer first: pushes are off the reply path
        if outcome.chunks:
            await self._courier.deliver(outcome)
        elif outcome.failure is None:  # stopped: no reply, so no chunk to carry its push
            self._notice(outcome.user_row_id, "cancelled")

    def _notice(self, row_id: int, why: str) -> None:
        try:
            self._notices.send_nowait(row_id)
        except anyio.WouldBlock:
            log.warning("a2a push: too many tasks to notify; one dropped", extra={"why": why})

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        yield

    def asker(self, row: StoredMessage) -> Asker | None:
        # Every task can be asked: its token owns it, and its next message answers.
        return _asking.TaskAsker(self._asked, row.id)

    async def _asked(self, row_id: int, request: ApprovalRequest) -> None:
        """A call of the task's turn waits for a yes (stored before this): whoever waits for
        the task gets it ``input-required``, and so do its push configs."""
        log.info(
            "a2a: a task asks for an approval",
            extra={"task": row_id, "tool": request.tool, "call_id": request.call_id},
        )
        self._settled.set(row_id)
        if self._pusher.on:
            self._notice(row_id, "input-required")

    def watching(self, row: StoredMessage) -> Watch | None:
        self._running[row.conversation] = row.id
        watched = self._watched.get(row.platform_message_id or "")
        if watched is None:
            return None
        self._live[row.id] = watched
        return watched.watch()

    # -- routes ------------------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        """Mount the A2A routes on the peer listener's app."""
        app.router.add_post(RPC_PATH, self._rpc)
        for path in CARD_PATHS:
            app.router.add_get(path, self._card)

    async def _card(self, request: web.Request) -> web.Response:
        url = self._config.public_url or self._base_url() + RPC_PATH
        return web.json_response(agent_card(self._config, url, bearer=self._bearer()))

    async def _rpc(self, request: web.Request) -> web.StreamResponse:
        self._requests += 1
        raw = await request.read()
        try:
            env = convert.envelope(raw, request.headers.get("A2A-Version"))
        except convert.IdentifiedError as exc:
            return self._error(exc.request_id, exc)
        except RpcError as exc:
            return self._error(None, exc)
        try:
            match env.op:
                case Op.STREAM:
                    return await self._send_stream(request, env)
                case Op.SUBSCRIBE:
                    return await self._subscribe(request, env)
                case _:
                    result = await self._call(request, env)
        except Exception as exc:  # every failure is a JSON-RPC error object
            return self._error(env.id, rpc_error_of(exc))
        return web.json_response(convert.result_body(env.id, result))

    def _error(self, rid: str | int | None, error: RpcError) -> web.Response:
        self._errors += 1
        return web.json_response(error_body(rid, error))

    async def _call(self, request: web.Request, env: Envelope) -> Any:
        dialect, params = env.dialect, env.params
        match env.op:
            case Op.SEND:
                send = convert.send_params(params, dialect)
                view = await self._send(request, send)
                return convert.send_result(view, dialect, send.history_length)
            case Op.GET:
                row = await self._row(request, convert.task_id(params))
                view = await self._view(row)
                return convert.task_json(view, dialect, convert.history_length(params))
            case Op.LIST:
                return await self._list(request, convert.list_params(params), dialect)
            case Op.CANCEL:
                row = await self._row(request, convert.task_id(params))
                return convert.task_json(await self._cancel(row), dialect)
            case Op.PUSH_SET | Op.PUSH_GET | Op.PUSH_LIST | Op.PUSH_DELETE:
                v1 = dialect is Dialect.V1
                key = "taskId" if v1 or env.op is Op.PUSH_SET else "id"
                row = await self._row(request, convert.task_id(params, key))
                return await _push.config_call(self._pusher, row.id, env)
            case Op.EXTENDED_CARD:
                raise RpcError(EXTENDED_CARD_NOT_CONFIGURED)
            case _:
                raise RpcError(UNSUPPORTED_OPERATION)

    # -- tasks -------------------------------------------------------------------------------

    def _pmid(self, request: web.Request, message_id: str) -> str:
        """A message id as a platform message id: scoped to the peer token (its digest, so
        nobody can work out another token's ids), shared by every client without tokens."""
        scope = self._scope(request)
        return f"{scope.hex()[:16] if scope else '-'}:{message_id}"

    def _conversation(self, request: web.Request, context: str) -> str:
        """``a2a:<contextId>``; with tokens ``a2a:<token scope>:<contextId>``, so two tokens
        that pick the same contextId never share a conversation (nor its history)."""
        scope = self._pmid(request, "")
        local = context if scope == "-:" else scope + context
        return conversation_key(PLATFORM, local)

    async def _row(self, request: web.Request, task_id: str) -> StoredMessage:
        """The user row of a task this request's token may see; else TaskNotFound."""
        if not _TASK_ID.match(task_id):
            raise RpcError(TASK_NOT_FOUND)
        row = await self._transcripts.message(int(task_id))
        prefix = self._pmid(request, "")
        if (
            row is None
            or row.platform != PLATFORM
            or row.role != "user"
            or not (row.platform_message_id or "").startswith(prefix)
        ):
            raise RpcError(TASK_NOT_FOUND)
        return row

    def _state(self, row: StoredMessage, question: str | None = None) -> TaskState:
        match row.state:
            case MessageState.ANSWERED:
                return TaskState.COMPLETED
            case MessageState.FAILED:
                return TaskState.FAILED
            case MessageState.CANCELLED:
                return TaskState.CANCELED
            case _ if question is not None:
                return TaskState.INPUT_REQUIRED
            case _:
                running = self._running.get(row.conversation) == row.id
                return TaskState.WORKING if running else TaskState.SUBMITTED

    def _view_of(
        self, row: StoredMessage, reply: StoredMessage | None, question: str | None = None
    ) -> TaskView:
        state = self._state(row, question)
        text = reply.content if reply is not None else None
        if state is TaskState.CANCELED:
            text = STOPPED_REPLY
        return TaskView(
            id=str(row.id),
            context_id=_context_of(row),
            state=state,
            message_id=(row.platform_message_id or "").partition(":")[2],
            text=row.content,
            created_at=row.created_at,
            reply=text,
            reply_at=reply.created_at if reply is not None else None,
            question=question if state is TaskState.INPUT_REQUIRED else None,
        )

    async def _view(self, row: StoredMessage) -> TaskView:
        fresh = await self._transcripts.message(row.id)
        if fresh is None:  # deleted meanwhile
            raise RpcError(TASK_NOT_FOUND)
        reply = question = None
        if fresh.state in (MessageState.ANSWERED, MessageState.FAILED):
            reply = await self._transcripts.reply_to(fresh.id)
        elif fresh.state == MessageState.PENDING:
            question = await self._question(fresh.id)
        return self._view_of(fresh, reply, question)

    async def _question(self, row_id: int) -> str | None:
        """What the task asks, while one of its calls waits for a yes (from the store)."""
        call = _asking.waiting(await self._calls.steps(row_id))
        return None if call is None else _asking.question(call.tool, call.arguments)

    @contextmanager
    def _streaming(self, pmid: str, reply: LiveReply, row_id: int = 0) -> Iterator[None]:
        """While a request streams the turn of ``pmid``: the turn's pieces and progress go
        to ``reply`` (when the turn starts meanwhile, or started with a streaming request:
        ``row_id``, the task's row once known, finds that turn's stream)."""
        watched = self._watched.get(pmid) or self._live.get(row_id) or Watched(None)
        self._watched[pmid] = watched
        watched.requests += 1
        watched.replies.append(reply)
        try:
            yield
        finally:
            watched.requests -= 1
            watched.replies.remove(reply)
            if watched.requests == 0:
                self._watched.pop(pmid, None)

    async def _admit(
        self, request: web.Request, send: convert.SendParams, pmid: str
    ) -> StoredMessage:
        """Admit the message, once per messageId (a repeat finds the task's row)."""
        if send.push is not None:
            self._pusher.check(send.push)
        if send.task_id is not None:
            known = await self._row(request, send.task_id)
            if known.platform_message_id != pmid:
                raise RpcError(
                    UNSUPPORTED_OPERATION, "a task takes one message; send without taskId"
                )
        context = send.context_id or uuid.uuid4().hex
        if not _CONTEXT_ID.match(context):
            raise RpcError(INVALID_PARAMS, "contextId: 1 to 128 of A-Z a-z 0-9 . _ : -")
        admission = await self._intake.admit(
            Inbound(
                platform=PLATFORM,
                conversation=self._conversation(request, context),
                platform_message_id=pmid,
                text=send.text,
            )
        )
        row = admission.row
        if admission.duplicate and row.content != send.text:
            raise RpcError(INVALID_PARAMS, "this messageId was sent with another message")
        if not admission.duplicate:
            self._tasks += 1
        if send.push is not None:
            await self._pusher.save(row.id, send.push)
        return row

    async def _send(self, request: web.Request, send: convert.SendParams) -> TaskView:
        """SendMessage: the task once its turn ended or asks for input, or at once
        (``returnImmediately``). The answer to a task that asks decides, and waits the same."""
        pmid = self._pmid(request, send.message_id)
        answer = await self._answering(request, send, pmid)
        if answer is not None:
            row = await self._decide(answer, pmid)
        else:
            row = await self._admit(request, send, pmid)
        if row.state == MessageState.PENDING and not send.return_immediately:
            await self._wait(row.id)
        return await self._view(row)

    async def _answering(
        self, request: web.Request, send: convert.SendParams, pmid: str
    ) -> Answer | None:
        """The task this message answers (its ``taskId``'s, when that task asks for input),
        and the answer; None: the message is a task of its own (or its own task's, resent)."""
        if send.task_id is None:
            return None
        task = await self._row(request, send.task_id)
        if task.platform_message_id == pmid:
            return None  # the task's own message again: admission finds the task
        if self._answered.task_of(pmid) == task.id:
            return Answer(task, None, False)  # an answer resent: taken already
        call = None
        if task.state == MessageState.PENDING:
            call = _asking.waiting(await self._calls.steps(task.id))
        if call is None:
            raise RpcError(
                UNSUPPORTED_OPERATION,
                f"task {task.id} waits for no input; a task takes one message, send without taskId",
            )
        approve = _asking.verdict(send.text)
        if approve is None:
            asked = _asking.question(call.tool, call.arguments)
            raise RpcError(INVALID_PARAMS, f"task {task.id} waits for a yes or a no: {asked}")
        if send.push is not None:
            self._pusher.check(send.push)
            await self._pusher.save(task.id, send.push)
        return Answer(task, call.row_id, approve)

    async def _decide(self, answer: Answer, pmid: str) -> StoredMessage:
        """Decide the call the answer names (as the task's owner: its token reached it)."""
        if answer.call_row is not None:
            decided = await self._intake.decide(
                PLATFORM, answer.call_row, "", answer.approve, owner=True
            )
            self._answered.remember(pmid, answer.task.id)
            log.info(
                "a2a: a task's approval answered",
                extra={"task": answer.task.id, "verdict": decided.verdict},
            )
        return answer.task

    async def _wait(self, row_id: int, *, until_input: bool = True) -> TurnOutcome | None:
        """Until the row's turn has an outcome: delivered here, or found in the store (the
        turn ran on another node, or it ended before this request began to wait). With
        ``until_input``, also until it asks for input (None)."""
        event = self._settled.event(row_id)
        wait_s = CHECK_S
        try:
            # First the store: the outcome may have been delivered before the event existed
            # (the turn ran while this request was still being admitted).
            while (outcome := await self._transcripts.outcome(row_id)) is None:
                if until_input and await self._question(row_id) is not None:
                    return None
                if event.is_set():  # woken (an outcome, a question): read again, then wait
                    event = self._settled.event(row_id)  # on a fresh one (a replica's lag)
                    continue
                with anyio.move_on_after(wait_s) as timer:
                    await event.wait()
                self._store_backstops += timer.cancelled_caught
                wait_s = min(wait_s * 2, CHECK_MAX_S)
            return outcome
        finally:
            self._settled.forget(row_id, event)

    async def _list(
        self, request: web.Request, wanted: convert.ListParams, dialect: Dialect
    ) -> dict[str, Any]:
        """One page of the context's tasks, newest first, read page by page (issue 37, L-8):
        the page's user rows and the rows of their turns, never the whole conversation. The
        page token is the id of the page's last task. A state that only a pending row can be
        in (submitted, working, input-required) is told apart here, so such a page may hold
        fewer tasks than asked (``nextPageToken`` says whether more follow) and
        ``totalSize`` counts the pending ones."""
        if not _CONTEXT_ID.match(wanted.context_id):
            return {"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}
        states = None if wanted.state is None else _ROW_STATES.get(wanted.state, _PENDING)
        found = await self._transcripts.tasks(
            self._conversation(request, wanted.context_id),
            self._pmid(request, ""),
            wanted.page_size,
            wanted.before,
            states,
        )
        replies = {
            r.user_row_id: r for r in found.related if r.role == "assistant" and r.state != "step"
        }
        asked = _asking.questions(found.related)
        views = [self._view_of(row, replies.get(row.id), asked.get(row.id)) for row in found.tasks]
        if wanted.state is not None:
            views = [v for v in views if v.state is wanted.state]
        after = str(found.tasks[-1].id) if found.more and found.tasks else ""
        return {
            "tasks": [convert.task_json(v, dialect, wanted.history_length) for v in views],
            "nextPageToken": after,
            "pageSize": len(views),
            "totalSize": found.total,
        }

    async def _cancel(self, row: StoredMessage) -> TaskView:
        """``/stop`` for the task's turn (here, or on the node running it)."""
        view = await self._view(row)
        if view.state.final:
            raise RpcError(TASK_NOT_CANCELABLE, f"the task is {view.state.value}")
        queued = RpcError(TASK_NOT_CANCELABLE, "the task waits behind another; retry shortly")
        if self._running.get(row.conversation, row.id) != row.id:
            raise queued  # another task of its context runs here: /stop would stop that one
        event = self._settled.event(row.id)  # before the stop: its outcome may come at once
        try:
            answer = await self._intake.command(PLATFORM, row.conversation, "stop")
            if not answer.startswith("Stopping"):  # nothing runs: queued, not yet started
                raise queued
            with anyio.move_on_after(CANCEL_WAIT_S):
                await self._wait(row.id, until_input=False)
        finally:
            self._settled.forget(row.id, event)
        return await self._view(row)

    # -- streaming ---------------------------------------------------------------------------

    async def _send_stream(self, request: web.Request, env: Envelope) -> web.StreamResponse:
        send = convert.send_params(env.params, env.dialect)
        pmid = self._pmid(request, send.message_id)
        reply = LiveReply(shows_tools=True)
        answer = await self._answering(request, send, pmid)
        if answer is not None:  # the task carries on: its stream, from the decision on
            task = answer.task
            with self._streaming(task.platform_message_id or "", reply, task.id):
                await self._decide(answer, pmid)
                return await self._stream(request, env, task, reply)
        with self._streaming(pmid, reply):
            row = await self._admit(request, send, pmid)
            return await self._stream(request, env, row, reply)

    async def _stream(
        self, request: web.Request, env: Envelope, row: StoredMessage, reply: LiveReply
    ) -> web.StreamResponse:
        return await _stream.stream_task(
            request,
            env,
            await self._view(row),
            reply,
            settle=lambda: self._wait(row.id),
            reread=lambda: self._view(row),
            keepalive_s=self.sse_keepalive_s,
            wall=self._wall,
        )

    async def _view_by_id(self, row_id: int) -> TaskView:
        row = await self._transcripts.message(row_id)
        if row is None:
            raise RpcError(TASK_NOT_FOUND)
        return await self._view(row)

    async def _subscribe(self, request: web.Request, env: Envelope) -> web.StreamResponse:
        row = await self._row(request, convert.task_id(env.params))
        view = await self._view(row)
        if view.state.final:
            raise RpcError(UNSUPPORTED_OPERATION, f"the task is {view.state.value} already")
        reply = LiveReply(shows_tools=True)
        with self._streaming(row.platform_message_id or "", reply, row.id):
            return await self._stream(request, env, row, reply)

    async def _push_body(self, row_id: int, dialect: Dialect) -> dict[str, Any]:
        """What a push notification carries: the task as it is now (1.0: a StreamResponse)."""
        body = convert.task_json(await self._view_by_id(row_id), dialect)
        return {"task": body} if dialect is Dialect.V1 else body
