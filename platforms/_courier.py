"""The outbox's delivery side, shared by the chat platforms.

A platform adapter hands each finished turn's chunks to its courier. The courier sends them
in order within a conversation and concurrently across conversations, records each delivered
chunk (so a restart does not send it again), and retries a failed send only when
``policy.classify_send`` says repeating it cannot duplicate it: a platform 429 is waited out
(its retry_after, up to a cap), errors that prove nothing was delivered are retried with
backoff, and a send that may have gone through is not repeated unless the platform
deduplicates it. A chunk that cannot be delivered is marked failed and logged; the chunks
after it are still sent.

No error of one chunk leaves its lane (which would end the courier, its adapter and with them
the gateway, and again at every start while the chunk waits in the outbox): a send that fails
in a way that is no platform refusal (a bug, or a stored value the client library refuses:
``Unsendable``) is *poisoned*: the chunk is parked (marked failed, reason ``poisoned``, logged
once, a bug with its traceback, counted in ``botmux_delivery_attempts_total``) and never tried
again. A store failure while recording is logged and leaves the chunk as the store has it (the
next start or takeover sends what is still pending).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from gateway.errors import PlatformError, StoreError, Unsendable
from gateway.events import ChunkRecorded, ChunkSent, Observe, SendFailed, SendRetried
from gateway.messages import OutboxChunk, StoredMessage, TurnOutcome
from gateway.ports import Ledger
from policy import classify_send
from policy.backoff import Backoff

log = logging.getLogger(__name__)

SendChunk = Callable[[OutboxChunk], Awaitable[str]]
#: The failure reason of a parked chunk (its ``botmux_delivery_attempts_total`` reason).
POISONED = "poisoned"


class SentByCourier:
    """For an outlet whose courier sends its replies: nothing is stored delivered with the
    answer (``Outlet.delivered_as``); each chunk is recorded once the platform took it."""

    def delivered_as(self, row: StoredMessage) -> None:
        return None


@dataclass(frozen=True, slots=True)
class CourierStatistics:
    """The chunks a courier sent, and what it holds now (``Courier.statistics()``)."""

    sent: int  # chunks the platform took
    retries: int  # sends repeated after a retryable failure
    failed: int  # chunks given up on (marked failed), the poisoned included
    poisoned: int  # chunks parked: their send failed unexpectedly
    lanes: int  # conversations with replies being sent now
    queued: int  # turns in the mailbox, not yet in a lane


class Courier:
    def __init__(
        self,
        platform: str,
        send: SendChunk,
        ledger: Ledger,
        *,
        backoff: Backoff | None = None,
        max_attempts: int = 6,
        retry_after_cap: float = 300.0,
        mailbox: int = 1024,
        observe: Observe = lambda event: None,
    ) -> None:
        self.platform = platform
        self._send_chunk = send
        self._ledger = ledger
        self._backoff = backoff or Backoff(0.5, 30.0)
        self._max_attempts = max_attempts
        self._cap = retry_after_cap
        self._observe = observe
        self._send, self._receive = anyio.create_memory_object_stream[TurnOutcome](mailbox)
        self._lanes: dict[str, deque[TurnOutcome]] = {}
        # Replies handed over and not yet sent and recorded: idle at 0. Counted, because the
        # lanes and the mailbox cannot say it: a reply handed straight to the waiting
        # receiver is in neither until the receiving task runs, and a lane that finished in
        # that moment used to declare the courier idle (a drain then stopped the node with
        # that reply unsent, and the node that took the conversation over sent it again).
        self._outstanding = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._sent = self._retries = self._failed = self._poisoned = 0

    def __repr__(self) -> str:
        return f"<Courier {self.platform} lanes={len(self._lanes)}>"

    def statistics(self) -> CourierStatistics:
        return CourierStatistics(
            sent=self._sent,
            retries=self._retries,
            failed=self._failed,
            poisoned=self._poisoned,
            lanes=len(self._lanes),
            queued=self._send.statistics().current_buffer_used,
        )

    async def deliver(self, outcome: TurnOutcome) -> None:
        """Queue a turn's chunks (waits while the mailbox is full)."""
        if self._outstanding == 0:
            self._idle = anyio.Event()
        self._outstanding += 1
        try:
            await self._send.send(outcome)
        except BaseException:
            self._settled()
            raise

    def _settled(self) -> None:
        self._outstanding -= 1
        if self._outstanding == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until nothing is queued or being sent."""
        await self._idle.wait()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # Both ends close when the courier stops, so nothing is left open behind it.
        async with anyio.create_task_group() as tg:
            task_status.started()
            with self._send:
                async with self._receive:
                    async for outcome in self._receive:
                        lane = self._lanes.get(outcome.conversation)
                        if lane is None:
                            lane = self._lanes[outcome.conversation] = deque()
                            tg.start_soon(self._drain, outcome.conversation, lane)
                        lane.append(outcome)

    async def _drain(self, conversation: str, lane: deque[TurnOutcome]) -> None:
        try:
            while lane:
                for chunk in lane[0].chunks:
                    try:
                        await self._deliver_chunk(chunk)
                    except StoreError as exc:
                        log.warning(
                            "reply chunk not recorded: the store failed",
                            extra={"chunk": chunk.id, "platform": self.platform, "error": str(exc)},
                        )
                    except Exception as exc:  # cancellation is no Exception: it goes on
                        await self._park(chunk, exc)
                lane.popleft()
                self._settled()
        finally:
            del self._lanes[conversation]

    async def _park(self, chunk: OutboxChunk, exc: Exception) -> None:
        """A poisoned chunk: marked failed, never sent again; the lane goes on. Reported as
        ``send_failed`` (reason ``poisoned``); a bug, not :class:`Unsendable`, also with
        its traceback."""
        self._failed += 1
        self._poisoned += 1
        if not isinstance(exc, Unsendable):
            log.error(
                "reply chunk parked: sending it raised an unexpected error",
                exc_info=exc,
                extra={"chunk": chunk.id, "platform": self.platform},
            )
        self._observe(
            SendFailed(
                chunk.conversation,
                self.platform,
                chunk.id,
                POISONED,
                1,
                error=f"{type(exc).__name__}: {exc}"[:200],
            )
        )
        try:
            await self._ledger.undeliverable(chunk.id, POISONED)
        except StoreError as error:
            log.warning(
                "parked reply chunk not recorded: the store failed",
                extra={"chunk": chunk.id, "platform": self.platform, "error": str(error)},
            )

    async def _deliver_chunk(self, chunk: OutboxChunk) -> None:
        await self._ledger.before_send(chunk.id)
        attempt = 0
        while True:
            attempt += 1
            try:
                platform_id = await self._send_chunk(chunk)
            except PlatformError as exc:
                failure = classify_send(exc)
                wait = failure.retry_after
                if wait is None:
                    wait = self._backoff.delay(attempt - 1)
                facts = (chunk.conversation, self.platform, chunk.id, failure.reason, attempt)
                if failure.retryable and attempt < self._max_attempts and wait <= self._cap:
                    self._retries += 1
                    self._observe(SendRetried(*facts, delay_s=round(wait, 3)))
                    await anyio.sleep(wait)
                    continue
                self._failed += 1
                self._observe(SendFailed(*facts, error=str(exc)[:200]))
                await self._ledger.undeliverable(chunk.id, failure.reason)
                return
            self._sent += 1
            self._observe(ChunkSent(chunk.conversation, self.platform, chunk.id))
            await self._ledger.delivered(chunk.id, platform_id)
            self._observe(ChunkRecorded(chunk.conversation, self.platform, chunk.id))
            return
