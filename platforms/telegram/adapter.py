"""The Telegram adapter: python-telegram-bot (PTB) driven inside botmux's task group.

Exactly-once admission: PTB's update queue is our admission (``_admission``, which says why
the polling offset can never pass an update before its row is committed).

Webhook mode: our own aiohttp listener (``_webhook``), deciding through the same intake.

Several nodes (a cluster, ``leases`` given): in polling mode only the node holding the
``telegram:poller`` lease polls (``_poller`` says how and why a change of poller loses
nothing); every node sends its own conversations' replies; webhooks need no lease.

Replies go through the shared outbox courier (ordered, retried only when that cannot
duplicate), rendered to HTML by :mod:`platforms.telegram.render`. Command answers, pairing
codes and "text only" notices are not turns: a small notice actor sends them directly.

Approvals (SPEC 15, ``_approvals``): a turn's tool call that waits for a yes is asked in the
chat with inline buttons; a click is a ``callback_query`` update, decided in the intake's
order like a message is admitted, and answered through the notice actor.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, assert_never

import anyio
from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Conflict, TelegramError
from telegram.ext import Application, ExtBot, Updater

from gateway.config import TelegramConfig
from gateway.errors import ConversationClosed, GatewayError, PlatformError, Refused
from gateway.events import Observe
from gateway.events_platforms import (
    TelegramAdmissionDeferred,
    TelegramNoticeDropped,
    TelegramNoticeFailed,
    TelegramPlainFallback,
    TelegramPollFailed,
    TelegramStrangerIgnored,
)
from gateway.messages import (
    COMMANDS,
    AttachmentRef,
    Failure,
    OutboxChunk,
    StoredMessage,
    TurnOutcome,
)
from gateway.ports import Access, Asker, Intake, Leases, Ledger, Watch
from platforms._access import check_access
from platforms._attachments import MAX_DOWNLOADS
from platforms._courier import Courier, SentByCourier
from platforms._live import LiveSection
from platforms._notices import NoticeBox
from platforms._preview import Previews
from platforms._refusals import RefusalNotices
from platforms._typing import keep_typing
from platforms.telegram import _files, _sends, _stream, _transport, convert, errors, render
from platforms.telegram._admission import AdmissionDeferred, Pending, UpdateQueue, Verdict
from platforms.telegram._approvals import ChatApprovals, ClickAnswer, send_answer
from platforms.telegram._notice import Notice, SendNotice, chat_of, send_text
from platforms.telegram._poller import PollerKeeper
from platforms.telegram._statistics import Counts, TelegramStatistics
from platforms.telegram._webhook import WebhookServer
from platforms.telegram.convert import PLATFORM, Target

log = logging.getLogger(__name__)

ALLOWED_UPDATES = ("message", "callback_query")  # callback queries: approval clicks
STOP_DEADLINE_S = 15.0  # shutting PTB down (final offset confirmation, closing clients)


@dataclass(frozen=True, slots=True)
class UpdateReceived:
    """An update from the poller or the webhook; its verdict is given through ``pending``."""

    update: Update
    pending: Pending


class TelegramAdapter(LiveSection[TelegramConfig], SentByCourier):
    platform = PLATFORM
    _intake: Intake  # what the incoming side serves: given to run()

    def __init__(
        self,
        config: TelegramConfig,
        *,
        ledger: Ledger,
        access: Access,
        observe: Observe,
        leases: Leases | None = None,
        live: Callable[[], TelegramConfig] | None = None,  # a reload's section
        attachment_limit: Callable[[], int] = lambda: convert.BOT_API_DOWNLOAD_LIMIT,
    ) -> None:
        self._use_config(config, live)
        self._attachment_limit = attachment_limit  # [agent] max_attachment_bytes, now
        self._downloads = anyio.CapacityLimiter(MAX_DOWNLOADS)
        self._leases = leases  # several nodes: only the holder of "telegram:poller" polls
        self._ledger = ledger
        self._access = access
        self._observe = observe
        self._courier = Courier(PLATFORM, self._send_chunk, ledger, observe=observe)
        self._updates_tx, self._updates_rx = anyio.create_memory_object_stream[UpdateReceived](64)
        self._notices = NoticeBox[Notice](self._send_notice, on_full=self._notice_dropped, size=256)
        self._queue = UpdateQueue(self._submit)
        self._refusals = RefusalNotices()
        self._previews = Previews(_stream.budget())
        self._counts = Counts()
        self._approvals = ChatApprovals(
            self._running_bot, self._previews, self._counts, self._notify
        )
        self._requests: list[_transport.BotApiRequest] = []  # the Bot API transports, once built
        self._bot: ExtBot[None] | None = None
        self._me = convert.BotIdentity(0, "")
        self._connected = False
        self._reachable = True  # until a poll (or, not polling in a cluster, a call) says otherwise
        self._keeper: PollerKeeper | None = None  # several nodes, polling mode
        self.webhook_port: int | None = None

    def __repr__(self) -> str:
        polling = " polling" if self._polling() else ""
        name = self._me.username or "?"
        return f"<TelegramAdapter {self._config.mode}{polling} @{name} {self._counts}>"

    def statistics(self) -> TelegramStatistics:
        return self._counts.snapshot(
            polling=self._polling(),
            poller=self._keeper.statistics() if self._keeper is not None else None,
            courier=self._courier.statistics(),
            previews=self._previews.statistics(),
        )

    def _polling(self) -> bool:
        """This node runs getUpdates now, in a cluster (a single node: always False)."""
        return self._keeper is not None and self._keeper.polling

    @property
    def connected(self) -> bool:
        """Started (getMe answered) and Telegram reachable as last seen: by this node's
        getUpdates while it polls; in a cluster, by its other Bot API calls while another
        node polls. A node that does not poll is ready: it sends its conversations' replies."""
        return self._connected and self._reachable

    # -- outlet --------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return render.render(text)

    async def deliver(self, outcome: TurnOutcome) -> None:
        target = convert.parse_key(outcome.conversation)

        async def discard(message_id: str) -> None:
            await _stream.discard(self._running_bot(), target, int(message_id))

        await self._previews.settle(outcome, discard, self._ledger.preview_of)
        await self._courier.deliver(outcome)

    async def wait_delivered(self) -> None:
        await self._courier.wait_idle()
        await self._notices.wait_idle()

    def asker(self, row: StoredMessage) -> Asker | None:
        return self._approvals.asker(row)  # buttons in the turn's chat (``_approvals``)

    def watching(self, row: StoredMessage) -> Watch | None:
        """A preview of the answer while the model writes it (``_stream``), where shown."""
        bot = self._bot
        if bot is None:
            return None
        target = convert.parse_key(row.conversation)
        adopt = partial(self._ledger.preview_of, row.id) if self._previews.resumed(row) else None
        record = partial(self._ledger.record_preview, row.id)
        preview = _stream.open_preview(
            bot, self._config, self._previews.budget, target, row, record=record, adopt=adopt
        )
        if preview is None or self._previews.open(preview) is None:
            return None
        return Watch(stream=preview)

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        bot = self._bot
        if bot is None:
            yield
            return
        target = convert.parse_key(conversation)

        async def typing() -> object:
            return await bot.send_chat_action(
                target.chat_id, ChatAction.TYPING, message_thread_id=target.thread_id
            )

        preview = self._previews.current(conversation)
        try:
            async with keep_typing(
                typing,
                every=self._config.typing_interval_s,
                deadline=self._config.typing_deadline_s,
                conversation=conversation,
                until=None if preview is None else preview.shown,
                quiet=partial(self._approvals.waits.waiting, conversation),
            ):
                yield
        finally:
            self._approvals.waits.ended(conversation)

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        """An attachment's bytes: getFile, then its URL streamed within ``limit`` (``_files``)."""
        bot = self._running_bot()
        async with self._downloads:  # MAX_DOWNLOADS at a time: each body is held whole
            return await _files.fetch(
                bot, ref, limit=limit, timeout_s=self._config.request_timeout_s
            )

    async def _send_chunk(self, chunk: OutboxChunk) -> str:
        """One outbox chunk, for the courier (PlatformError; a 429 pauses previews: yield_to)."""
        target = convert.parse_key(chunk.conversation)
        # Finals count against the previews' budget (never waiting on it): previews yield.
        try:
            with self._previews.budget.spend(_stream.keys_for(target, "edit")):
                return await self._send_final(target, chunk)
        except PlatformError as exc:
            if exc.retry_after is not None:
                _stream.yield_to(self._previews.budget, target, exc.retry_after)
            raise

    async def _send_final(self, target: Target, chunk: OutboxChunk) -> str:
        bot = self._running_bot()
        preview = self._previews.edit_target(chunk.id)
        if preview is not None:
            done = await _stream.finalise(bot, target, int(preview), chunk)
            self._previews.edited(chunk.id)
            if done:
                return f"{target.chat_id}:{preview}"
            # the preview is gone: the chunk is sent as a new message
        reply = None
        if not target.private and chunk.seq == 0 and chunk.reply_target.isdigit():
            reply = ReplyParameters(int(chunk.reply_target), allow_sending_without_reply=True)
        try:
            try:
                chat_id, message_id = await _sends.send_message(
                    bot,
                    target.chat_id,
                    chunk.text,
                    parse_mode=ParseMode.HTML,
                    thread_id=target.thread_id,
                    reply=reply,
                )
            except BadRequest as exc:
                if not errors.entities_refused(exc):
                    raise
                # Telegram refused the formatting, so nothing was sent: the same chunk as plain
                # text is a different request, not a retry of this one.
                self._counts.plain_fallbacks += 1
                self._observe(TelegramPlainFallback(chunk.conversation, chunk.id, str(exc)))
                chat_id, message_id = await _sends.send_message(
                    bot,
                    target.chat_id,
                    render.to_plain(chunk.text),
                    thread_id=target.thread_id,
                    reply=reply,
                )
        except TelegramError as exc:
            raise errors.translate(exc) from exc
        return f"{chat_id}:{message_id}"

    def _running_bot(self) -> ExtBot[None]:
        if self._bot is None:
            raise PlatformError("the Telegram bot is not started", status=0)
        return self._bot

    # -- the actor -----------------------------------------------------------------------

    def _build_application(self) -> Application[Any, Any, Any, Any, Any, Any]:
        config = self._config
        origin = config.api_base.rstrip("/")
        timeout = config.request_timeout_s

        def request(
            pool: int,
            on_answer: Callable[[bool], None] | None = None,
            screen: Callable[[list[Any]], list[Any]] | None = None,
        ) -> _transport.BotApiRequest:
            made = _transport.BotApiRequest(
                on_answer=on_answer,
                screen=screen,
                connection_pool_size=pool,
                read_timeout=timeout,
                write_timeout=timeout,
                connect_timeout=timeout,
                pool_timeout=timeout,
            )
            self._requests.append(made)  # PTB shuts them down only once initialized
            return made

        builder = (
            Application.builder()
            .token(config.token)
            .base_url(f"{origin}/bot")
            .base_file_url(f"{origin}/file/bot")
            .request(request(32, self._answered))
            .get_updates_request(request(2, self._polled, self._screen))
            .update_queue(self._queue)
            .concurrent_updates(False)
            .job_queue(None)
        )
        if config.mode == "webhook":
            builder = builder.updater(None)
        return builder.build()

    async def run(
        self, intake: Intake, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._intake = intake  # what the updates are handed to, from now on
        application = self._build_application()
        # Initializing the application calls getMe: a wrong token fails the start here.
        try:
            await errors.initialize(application)
        except PlatformError:  # a refused getMe: PTB leaves the requests open
            with anyio.CancelScope(shield=True):
                for made in self._requests:
                    await made.shutdown()
            raise
        async with anyio.create_task_group() as tg, application:
            try:
                await application.start()
                bot = self._bot = application.bot
                self._me = convert.BotIdentity(bot.id, bot.username)
                tg.start_soon(self._intake_loop)
                await tg.start(self._notices.run)
                await tg.start(self._previews.run)
                await tg.start(self._courier.run)
                await self._register_commands(bot)
                updater = application.updater
                if updater is None:
                    webhook = WebhookServer(
                        self._config,
                        allowed_updates=ALLOWED_UPDATES,
                        screen=self._screen,
                        submit=self._submit,
                        bot=self._running_bot,
                        observe=self._observe,
                    )
                    await tg.start(webhook.run, bot)
                    self.webhook_port = webhook.port
                elif self._leases is None:
                    await self._start_polling(updater)
                self._connected = True
                log.info(
                    "telegram connected",
                    extra={"bot": bot.username, "mode": self._config.mode},
                )
                task_status.started()
                if updater is not None and self._leases is not None:
                    # Not waiting for the lease to be ready: this node sends either way.
                    self._keeper = PollerKeeper(
                        self._leases,
                        updater,
                        start=partial(self._start_polling, updater),
                        accepting=lambda: self._intake.accepting,
                        idle=self._idle_look,
                    )
                    await self._keeper.run()
                await anyio.sleep_forever()
            finally:
                self._connected = False
                with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_DEADLINE_S):
                    await self._stop(application)
                self._updates_tx.close()  # the intake and notice actors end by themselves
                self._notices.close()
                self._previews.close()

    async def _stop(self, application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        """Stop PTB in order; the poller's last getUpdates confirms only admitted updates. In
        a cluster the poller lease is released after the poller stopped, never before."""
        updater = application.updater
        steps: list[Callable[[], Awaitable[None]]] = []
        if updater is not None and updater.running:
            steps.append(updater.stop)
        if self._keeper is not None:
            steps.append(self._keeper.release)
        if application.running:
            steps.append(application.stop)
        steps.append(application.shutdown)
        for step in steps:
            try:
                await step()
            except Exception as exc:  # keep stopping the rest: nothing here may hide the cause
                log.warning(
                    "telegram shutdown step failed",
                    extra={"step": getattr(step, "__qualname__", "?"), "error": repr(exc)},
                )

    async def _start_polling(self, updater: Updater) -> None:
        await updater.start_polling(
            poll_interval=0,
            timeout=dt.timedelta(seconds=self._config.poll_timeout_s),
            allowed_updates=ALLOWED_UPDATES,
            bootstrap_retries=3,
            error_callback=self._poll_error,
        )

    async def _idle_look(self) -> None:
        """Several nodes, not polling: if Telegram looked unreachable, probe it."""
        if not self._reachable:
            await self._probe()

    async def _register_commands(self, bot: Bot) -> None:
        commands = [BotCommand(c.name, c.description) for c in COMMANDS]
        try:
            await bot.set_my_commands(commands)
        except TelegramError as exc:  # the menu is a convenience: commands work without it
            log.warning("setMyCommands failed", extra={"error": repr(errors.translate(exc))})

    def _answered(self, reached: bool) -> None:
        """Another Bot API call came back (or failed): in a cluster, a node that does not poll
        learns from its own calls (sends, typing) whether Telegram is reachable."""
        if self._leases is not None and self._config.mode == "polling" and not self._polling():
            self._polled(reached)

    async def _probe(self) -> None:
        """Not polling, and Telegram looked unreachable: a getMe, so ``/readyz`` recovers
        without waiting for this node's next send (its answer goes through ``_answered``)."""
        with contextlib.suppress(TelegramError):
            await self._running_bot().get_me()

    def _polled(self, reached: bool) -> None:
        """A getUpdates came back (or failed): Telegram's reachability, for ``/readyz``."""
        if reached != self._reachable:
            self._reachable = reached
            log.log(
                logging.INFO if reached else logging.WARNING,
                "telegram reachable again" if reached else "telegram unreachable",
            )

    def _poll_error(self, exc: TelegramError) -> None:
        """PTB's poll loop hit an error; it polls again by itself (with backoff)."""
        if isinstance(exc, AdmissionDeferred):
            return  # already logged when the admission failed
        if isinstance(exc, Conflict) and self._leases is not None:
            log.warning(
                "another getUpdates ran with this bot token (Telegram 409): a node that lost"
                " the poller lease, or a process outside this cluster",
                extra={"error": str(exc)},
            )
            return
        if isinstance(exc, Conflict):
            log.warning(
                "another process is polling with this bot token (Telegram 409);"
                " only one botmux may run per bot",
                extra={"error": str(exc)},
            )
            return
        self._observe(TelegramPollFailed(error=repr(errors.translate(exc))))

    def _screen(self, updates: list[Any]) -> list[Any]:
        """Updates PTB cannot parse go on as empty ones, acknowledged (``screen_updates``)."""
        kept, screened = convert.screen_updates(updates)
        for update_id, reason in screened:
            self._counts.unreadable += 1
            log.warning(
                "telegram update unreadable: acknowledged and skipped",
                extra={"update": update_id, "reason": reason},
            )
        return kept

    async def _submit(self, update: Update) -> Verdict:
        """Hand an update to the intake actor; return its verdict once given."""
        pending = Pending()
        await self._updates_tx.send(UpdateReceived(update, pending))
        return await pending.wait()

    async def _intake_loop(self) -> None:
        """One update at a time, in arrival order: admission order is arrival order."""
        async with self._updates_rx:
            async for received in self._updates_rx:
                verdict = Verdict.HOLD  # if cancelled (shutting down): never acknowledge it
                try:
                    verdict = await self._take(received.update)
                finally:
                    received.pending.give(verdict)

    async def _take(self, update: Update) -> Verdict:
        self._counts.updates += 1
        if not self._intake.accepting:
            self._counts.held += 1
            return Verdict.HOLD
        try:
            return await self._admit(update)
        except ConversationClosed:
            self._counts.held += 1
            return Verdict.HOLD
        except GatewayError as exc:
            # The store failed (the pairing and allowlist reads included): Telegram keeps the
            # update and delivers it again. (Refused never gets here: it is answered above.)
            self._counts.deferred += 1
            self._observe(TelegramAdmissionDeferred(update=update.update_id, error=repr(exc)))
            return Verdict.RETRY
        except Exception:
            # A bug on one update must not wedge every later one behind it (it would come back
            # forever): log it loudly and let Telegram forget it.
            log.exception(
                "telegram update skipped: could not handle it", extra={"update": update.update_id}
            )
            return Verdict.ACK

    async def _admit(self, update: Update) -> Verdict:
        if update.callback_query is not None:  # a click on an approval's button
            await self._approvals.clicked(self._intake, update.callback_query)
            return Verdict.ACK
        incoming = convert.read(update, self._me, self._group_mode(), self._attachment_limit())
        if incoming is None:
            self._counts.ignored += 1
            return Verdict.ACK
        config = self._config
        access = await check_access(
            self._access,
            PLATFORM,
            incoming.user_id,
            allow_users=config.allow_users,
            open_here=not incoming.private and incoming.target.chat_id in config.allow_chats,
            may_pair=incoming.private,  # a code in a group would be posted to the whole group
            label=incoming.label,
        )
        if not access.allowed:
            self._counts.strangers += 1
            code = access.pairing_code
            if code is not None:
                self._notify(SendNotice(incoming.target, convert.pairing_text(code)))
            self._observe(
                TelegramStrangerIgnored(incoming.user_id, incoming.target.chat_id, bool(code))
            )
            return Verdict.ACK
        reply_to = None if incoming.private else incoming.message_id
        match incoming.kind:
            case "command":
                self._counts.commands += 1
                name, _, args = incoming.text.partition(" ")
                text = await self._intake.command(PLATFORM, incoming.conversation, name, args)
                self._notify(SendNotice(incoming.target, text, reply_to))
            case "unreadable":
                self._notify(SendNotice(incoming.target, convert.TEXT_ONLY, reply_to))
            case "turn":
                try:
                    admission = await self._intake.admit(incoming.inbound())
                except Refused as exc:  # an answer, not a store failure: tell them, acknowledge
                    self._counts.refused += 1
                    notice = self._refusals.text(exc, incoming.conversation)
                    if notice is not None:
                        self._notify(SendNotice(incoming.target, notice, reply_to))
                    return Verdict.ACK
                if admission.duplicate:
                    self._counts.duplicates += 1
                else:
                    self._counts.admitted += 1
            case _:
                assert_never(incoming.kind)
        return Verdict.ACK

    def _group_mode(self) -> convert.GroupMode:
        mode = self._config.group_mode
        return "all" if mode == "all" else "off" if mode == "off" else "mention"

    # -- notices: short answers that are not turns ----------------------------------------

    def _notify(self, notice: Notice) -> None:
        self._notices.send_nowait(notice)

    def _notice_dropped(self, notice: Notice) -> None:
        """The notice mailbox was full: visible, never silent (logged and counted)."""
        self._observe(TelegramNoticeDropped(chat=chat_of(notice)))

    async def _send_notice(self, notice: Notice) -> Message | None:
        bot = self._running_bot()
        match notice:
            case ClickAnswer():
                failed = await send_answer(bot, notice)
                if failed is not None:
                    log.warning("approval click not answered", extra={"error": failed})
                return None
            case SendNotice(target=target):
                sent = await send_text(bot, notice)
                if isinstance(sent, Failure):
                    self._observe(TelegramNoticeFailed(target.chat_id, sent.reason, sent.reason))
                    return None
                self._counts.notices += 1
                return sent
            case _:
                assert_never(notice)
