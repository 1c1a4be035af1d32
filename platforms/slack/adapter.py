"""The Slack actor (SPEC 17): Socket Mode or the Events API in, the Web API out, on slack_sdk.

Both ways in hand the adapter the same payloads (``_envelopes``): Socket Mode's envelopes
(``_socket``, the default) or the Events API's signed POSTs (``_events_api``). The actor takes
them one at a time, in arrival order: reads the event (``convert``), checks access (allow
lists, DM pairing: ``platforms._access``), admits the turn through ``Intake``, and only then
gives the verdict on which the envelope is acknowledged (or the POST answered 200). A store
failure leaves it unacknowledged, so Slack delivers it again; while draining it is held for
the next process or node.

Exactly once: admission is keyed on the message's channel and ``ts``, not the event id. A
mention arrives twice (``message`` and ``app_mention``, two event ids, one ``ts``): whichever
comes first is admitted, the other is a duplicate (a no-op, acknowledged); Slack's retries and
the replays after a reconnect are duplicates the same way. An answer that is not a turn (a
command's, a refusal) is claimed in the store by channel and ``ts`` first (``Recall``), so the
second of the pair does not answer again, on whichever node it arrives. Several nodes each
hold their own Socket Mode connection (Slack gives each envelope to one); no lease is needed,
and each node sends its own conversations' replies. A follow-up without a mention in a thread
is answered when the thread is a stored conversation (remembered after one read).

Replies go through the shared outbox courier, rendered to mrkdwn (``render``) and posted with
``chat.postMessage`` (``_stream``); previews are a message edited with ``chat.update`` inside
Slack's rate tiers. Files come with the bot token from Slack's file host only (``_files``).
Approvals (SPEC 15) are Block Kit buttons (``_approvals``). Slack shows bots no typing
indicator outside its assistant threads: there is none here, the preview shows the answer
growing instead.

Why slack_sdk and not slack-bolt: bolt acknowledges an event before its listener runs unless
``process_before_response`` is set, answers an event type no listener matches with a 404 (so
Slack delivers it again and again) and takes the envelope's fate from its middleware's
response; here the acknowledgement is the admission's verdict, decided in one place. What bolt
would add that is needed, the request signature's check, is slack_sdk's ``SignatureVerifier``,
which bolt itself uses.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import assert_never

import aiohttp
import anyio
from anyio.abc import TaskStatus
from slack_sdk.web.async_client import AsyncWebClient

from gateway.config_slack import SlackConfig
from gateway.errors import ConversationClosed, GatewayError, PlatformError, Refused
from gateway.events import Observe
from gateway.events_platforms import SlackAdmissionDeferred, SlackStrangerIgnored
from gateway.messages import AttachmentRef, OutboxChunk, StoredMessage, TurnOutcome
from gateway.ports import Access, Asker, Intake, Ledger, Recall, Watch
from platforms._access import check_access
from platforms._attachments import MAX_DOWNLOADS
from platforms._courier import Courier, SentByCourier
from platforms._live import LiveSection
from platforms._notices import NoticeBox
from platforms._preview import Previews
from platforms._refusals import RefusalNotices
from platforms.slack import _files, _notice, _stream, convert, render
from platforms.slack._approvals import ChatApprovals
from platforms.slack._envelopes import Envelope, Pending, Verdict
from platforms.slack._events_api import EventsServer
from platforms.slack._notice import Notice, SendText
from platforms.slack._socket import SocketLink
from platforms.slack._statistics import Counts, SlackStatistics
from platforms.slack.convert import PLATFORM, Identity, Seen, Target
from platforms.slack.errors import TRANSLATED, translate

log = logging.getLogger(__name__)

MAILBOX = 256
#: Messages whose non-turn answer (a command's, a refusal) was claimed, and threads known to be
#: stored conversations: remembered this long (most recent kept), sparing the store a read.
REMEMBERED = 4096


class _Recent:
    """A bounded set, oldest forgotten first."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self._size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def discard(self, key: str) -> None:
        self._keys.pop(key, None)

    def add(self, key: str) -> bool:
        """Remember ``key``; False when it was remembered already."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True


class SlackAdapter(LiveSection[SlackConfig], SentByCourier):
    platform = PLATFORM
    _intake: Intake  # what the incoming side serves: given to run()

    def __init__(
        self,
        config: SlackConfig,
        *,
        ledger: Ledger,
        access: Access,
        recall: Recall,
        observe: Observe = lambda event: None,
        live: Callable[[], SlackConfig] | None = None,  # a reload's section
    ) -> None:
        self._use_config(config, live)
        self._file_origins = _files.file_origins(config.api_base)  # restart keys: fixed
        self._socket_mode = config.socket_mode
        self._ledger = ledger
        self._access = access
        self._recall = recall
        self._observe = observe
        self._courier = Courier(PLATFORM, self._send_chunk, ledger, observe=observe)
        self._mailbox, self._taken = anyio.create_memory_object_stream[Envelope](MAILBOX)
        self._waiting: set[Pending] = set()
        self._notices = NoticeBox[Notice](self._send_notice, on_full=self._dropped, size=256)
        self._refusals = RefusalNotices()
        self._previews = Previews(_stream.budget())
        self._counts = Counts()
        self._approvals = ChatApprovals(
            self._live_client, self._previews, self._counts, self._notify
        )
        self._downloads = anyio.CapacityLimiter(MAX_DOWNLOADS)
        self._answered = _Recent()  # channel:ts whose non-turn answer was claimed (any node)
        self._threads = _Recent()  # thread conversations known to be stored
        self._client: AsyncWebClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._me = Identity("", "", "")
        self._link: SocketLink | None = None
        self._server: EventsServer | None = None

    def __repr__(self) -> str:
        return f"<SlackAdapter {self._mode} team={self._me.team or '?'} {self._counts}>"

    @property
    def _mode(self) -> str:
        return "socket" if self._socket_mode else "events"

    @property
    def events_port(self) -> int | None:
        """The Events API listener's port, once listening (None in Socket Mode)."""
        return self._server.port if self._server is not None else None

    def statistics(self) -> SlackStatistics:
        return self._counts.snapshot(
            mode=self._mode,
            connected=self.connected,
            courier=self._courier.statistics(),
            previews=self._previews.statistics(),
        )

    @property
    def connected(self) -> bool:
        """For ``/readyz``: ``auth.test`` answered, and the Socket Mode connection said hello
        (or the Events API listener is up)."""
        if self._client is None or not self._me.user_id:
            return False
        if self._link is not None:
            return self._link.connected
        return self.events_port is not None

    # -- outlet --------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return render.render(text)

    async def deliver(self, outcome: TurnOutcome) -> None:
        target = convert.parse_key(outcome.conversation)

        async def discard(ts: str) -> None:
            await _stream.discard(self._live_client(), target, ts)

        await self._previews.settle(outcome, discard, self._ledger.preview_of)
        await self._courier.deliver(outcome)

    async def wait_delivered(self) -> None:
        await self._courier.wait_idle()
        await self._notices.wait_idle()

    def asker(self, row: StoredMessage) -> Asker | None:
        return self._approvals.asker(row)  # Block Kit buttons where the turn answers

    def watching(self, row: StoredMessage) -> Watch | None:
        """A preview message of the answer while the model writes it (``_stream``)."""
        if self._client is None:
            return None
        target = convert.parse_key(row.conversation)
        adopt = partial(self._ledger.preview_of, row.id) if self._previews.resumed(row) else None
        record = partial(self._ledger.record_preview, row.id)
        preview = _stream.open_preview(
            self._live_client,
            self._config,
            self._previews.budget,
            target,
            row,
            record=record,
            adopt=adopt,
        )
        if preview is None or self._previews.open(preview) is None:
            return None
        return Watch(stream=preview)

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        """No typing indicator: Slack's Web API has none for bots (the preview shows the
        answer growing). What the turn waited for (an approval) ends with it."""
        try:
            yield
        finally:
            self._approvals.waits.ended(conversation)

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        """A file's bytes, with the bot token, from Slack's file host only (``_files``)."""
        session = self._session
        if session is None:
            raise PlatformError("the Slack client is not started", status=0)
        async with self._downloads:  # MAX_DOWNLOADS at a time: each body is held whole
            return await _files.fetch(
                session,
                ref,
                token=self._config.bot_token,
                limit=limit,
                origins=self._file_origins,
            )

    async def _send_chunk(self, chunk: OutboxChunk) -> str:
        """One outbox chunk (PlatformError; a 429 pauses the channel's previews too)."""
        target = convert.parse_key(chunk.conversation)
        client = self._live_client()
        try:
            # Finals count against the previews' budget (never waiting on it): previews yield.
            with self._previews.budget.spend(_stream.keys_for(target.channel)):
                preview = self._previews.edit_target(chunk.id)
                if preview is not None:
                    done = await _stream.finalise(client, target, preview, chunk)
                    self._previews.edited(chunk.id)
                    if done:
                        return preview
                return await _stream.send(client, target, chunk)
        except PlatformError as exc:
            if exc.retry_after is not None and exc.retry_after > 0:
                self._previews.budget.pause(("channel", target.channel), exc.retry_after)
            raise

    def _live_client(self) -> AsyncWebClient:
        if self._client is None:
            raise PlatformError("the Slack client is not started", status=0)
        return self._client

    # -- the actor -----------------------------------------------------------------------

    async def run(
        self, intake: Intake, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._intake = intake  # what the envelopes are handed to, from now on
        config = self._config
        timeout = aiohttp.ClientTimeout(total=config.request_timeout_s)
        session = self._session = aiohttp.ClientSession(timeout=timeout)
        try:
            async with anyio.create_task_group() as tg:
                # The actors first: each closes its streams however the start ends.
                await tg.start(self._intake_loop)
                await tg.start(self._notices.run)
                await tg.start(self._previews.run)
                await tg.start(self._courier.run)
                # One session for every Web API call (kept-alive connections); no retries of
                # the SDK's own: the courier and the notices decide what may be sent again.
                client = AsyncWebClient(
                    token=config.bot_token,
                    base_url=config.api_base,
                    session=session,
                    retry_handlers=[],
                )
                self._me = await self._identify(client)
                self._client = client
                if self._socket_mode:
                    self._link = SocketLink(
                        config, submit=self._submit, observe=self._observe, hello=self._hello
                    )
                    await tg.start(self._link.run)
                else:
                    self._server = EventsServer(config, submit=self._submit, observe=self._observe)
                    await tg.start(self._server.run)
                log.info(
                    "slack connected",
                    extra={"team": self._me.team, "bot": self._me.user_id, "mode": self._mode},
                )
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._mailbox.close()
            self._notices.close()
            self._previews.close()
            for pending in list(self._waiting):
                pending.give(Verdict.HOLD)  # never acknowledged by this process
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await session.close()

    async def _identify(self, client: AsyncWebClient) -> Identity:
        """``auth.test``: who the bot is (a wrong token fails the start here)."""
        try:
            answer = await client.auth_test()
        except TRANSLATED as exc:
            raise translate(exc) from exc
        team, user, bot = answer.get("team_id"), answer.get("user_id"), answer.get("bot_id")
        if not (convert.is_id(team) and convert.is_id(user)):
            raise PlatformError("slack auth.test did not say who the bot is", status=0)
        return Identity(str(team), str(user), str(bot) if convert.is_id(bot) else "")

    def _hello(self) -> None:
        self._counts.hellos += 1

    async def _submit(self, envelope: Envelope) -> Verdict:
        """Hand an envelope to the actor; its verdict once given (HOLD once stopped)."""
        self._waiting.add(envelope.pending)
        try:
            try:
                await self._mailbox.send(envelope)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return Verdict.HOLD
            return await envelope.pending.wait()
        finally:
            self._waiting.discard(envelope.pending)

    async def _intake_loop(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """One envelope at a time, in arrival order: admission order is arrival order."""
        async with self._taken:
            task_status.started()
            async for envelope in self._taken:
                verdict = Verdict.HOLD  # if cancelled (shutting down): never acknowledged
                try:
                    verdict = await self._take(envelope)
                finally:
                    envelope.pending.give(verdict)
                    if verdict is Verdict.ACK:
                        self._counts.acknowledged += 1

    async def _take(self, envelope: Envelope) -> Verdict:
        self._counts.envelopes += 1
        if not self._intake.accepting:
            self._counts.held += 1
            return Verdict.HOLD
        try:
            await self._handle(envelope)
        except ConversationClosed:
            self._counts.held += 1
            return Verdict.HOLD
        except GatewayError as exc:
            # The store failed (the pairing and allow list reads included): left
            # unacknowledged, Slack delivers it again. (Refused never gets here.)
            self._counts.deferred += 1
            self._observe(SlackAdmissionDeferred(_message_of(envelope), repr(exc)))
            return Verdict.RETRY
        except Exception:
            # A bug on one envelope must not have Slack send it forever: logged loudly, and
            # acknowledged.
            log.exception(
                "slack envelope skipped: could not handle it", extra={"kind": envelope.kind}
            )
        return Verdict.ACK

    async def _handle(self, envelope: Envelope) -> None:
        if envelope.kind == "interactive":
            click = convert.clicked(envelope.payload)
            if click is None:
                self._counts.ignored += 1
                return
            await self._approvals.clicked(self._intake, click)
            return
        if envelope.kind != "events_api":  # a slash command, a shortcut: not subscribed
            self._counts.ignored += 1
            return
        found = convert.event_of(envelope.payload)
        if found is None:
            self._counts.unreadable += 1
            log.warning("slack payload unreadable: acknowledged and skipped")
            return
        team, event = found
        seen = convert.seen_from(team, event)
        if seen is None:
            self._counts.ignored += 1  # another event type, or no message Slack sends
            return
        await self._on_message(seen)

    async def _on_message(self, seen: Seen) -> None:
        config = self._config
        target = convert.target_of(seen, reply_in_thread=config.reply_in_thread)
        decide = partial(convert.decide, seen, self._me, require_mention=config.require_mention)
        in_thread = seen.thread_ts is not None and target.key in self._threads
        decision = decide(in_thread=in_thread)
        if isinstance(decision, convert.Ignore) and seen.thread_ts is not None and not in_thread:
            # A follow-up without a mention in a thread this node does not remember: answered
            # if a turn was admitted in it, on any node, before a restart too (one read).
            followed = decide(in_thread=True)
            known = not isinstance(followed, convert.Ignore) and (
                await self._recall.conversation_known(target.key)
            )
            if known:
                self._threads.add(target.key)
                decision = followed
        if isinstance(decision, convert.Ignore):
            self._counts.ignored += 1
            return
        access = await check_access(
            self._access,
            PLATFORM,
            seen.user,
            allow_users=config.allow_users,
            open_here=not seen.dm and seen.channel in config.allow_channels,
            may_pair=seen.dm,  # a code in a channel would be shown to the whole channel
            label=seen.user,
        )
        if not access.allowed:
            self._counts.strangers += 1
            code = access.pairing_code
            if code is not None:
                self._notify(SendText(target, convert.pairing_text(code)))
            self._observe(SlackStrangerIgnored(seen.user, seen.channel, bool(code)))
            return
        match decision:
            case convert.Command(name=name, args=args):
                if not await self._claim(seen):
                    self._counts.duplicates += 1  # the other of message + app_mention
                    return
                self._counts.commands += 1
                try:
                    text = await self._intake.command(PLATFORM, target.key, name, args)
                except GatewayError:  # the store failed: Slack's next try runs it, any node
                    await self._unclaim(seen)
                    raise
                # Shown as written: a schedule's text in /schedules is anyone's (a model's),
                # and <!channel> in it would ping the channel (security review, SL-1).
                self._notify(SendText(target, _stream.escaped(text)))
            case convert.Turn(text=text):
                await self._admit(seen, target, text)
            case _:
                assert_never(decision)

    async def _admit(self, seen: Seen, target: Target, text: str) -> None:
        try:
            admission = await self._intake.admit(convert.inbound(seen, target, text))
        except Refused as exc:  # an answer, not a store failure: tell them, acknowledge
            self._counts.refused += 1
            notice = self._refusals.text(exc, target.key)
            if notice is not None and await self._claim(seen):
                self._notify(SendText(target, notice))
            return
        if target.thread_ts is not None:
            self._threads.add(target.key)
        if admission.duplicate:
            self._counts.duplicates += 1
        else:
            self._counts.admitted += 1

    async def _claim(self, seen: Seen) -> bool:
        """Whether this node gives the message's answer that is not a turn: the first claim
        of it in the store (the other event of the pair may be on another node). The set in
        memory spares the store the second event on this node; a message is remembered there
        only once its claim is settled (a store failure leaves it to Slack's next try)."""
        if seen.message_id in self._answered:
            return False
        claimed = await self._recall.claim_answer(PLATFORM, seen.message_id)
        self._answered.add(seen.message_id)
        return claimed

    async def _unclaim(self, seen: Seen) -> None:
        """Give the claim of :meth:`_claim` up, the answer not given. When the store cannot
        take that either, the message's next delivery finds it claimed and is not answered:
        logged, as the message is lost then (a store failing between two writes)."""
        self._answered.discard(seen.message_id)
        try:
            await self._recall.release_answer(PLATFORM, seen.message_id)
        except GatewayError as exc:
            log.error(
                "slack command not run, and its claim could not be given up: it will not be"
                " answered",
                extra={"message_id": seen.message_id, "error": repr(exc)},
            )

    # -- notices: short answers that are not turns ----------------------------------------

    def _notify(self, notice: Notice) -> None:
        self._notices.send_nowait(notice)

    def _dropped(self, notice: Notice) -> None:
        log.warning(
            "slack notice dropped: mailbox full", extra={"channel": _notice.channel_of(notice)}
        )

    async def _send_notice(self, notice: Notice) -> None:
        failure = await _notice.send(self._live_client(), notice)
        if failure is not None:
            log.warning(
                "slack notice failed",
                extra={"channel": _notice.channel_of(notice), "error": failure.detail},
            )
            return
        self._counts.notices += 1


def _message_of(envelope: Envelope) -> str:
    """The ``<channel>:<ts>`` an envelope carries, for a log line ("" when none)."""
    found = convert.event_of(envelope.payload)
    if found is None:
        return ""
    event = found[1]
    channel, ts = event.get("channel"), event.get("ts")
    return convert.message_id(str(channel), str(ts)) if channel and ts else ""
