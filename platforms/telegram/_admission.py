"""Telegram admission through PTB's update queue: putting an update is admitting it.

Exactly-once admission, and why it holds with PTB's own poller. PTB's ``Updater`` fetches a
batch with ``getUpdates(offset)``, awaits ``update_queue.put(update)`` for each update in turn,
and only then advances its offset (``last update_id + 1``), which Telegram takes as the
acknowledgement on the next ``getUpdates``. We give PTB an update queue whose ``put`` *is* the
admission: it hands the update to this adapter's intake actor and returns only once the user
row is committed (or the update was found not to be a turn). So the offset can only move past
an update after its row is in the store; a crash anywhere before that leaves the update
unacknowledged, Telegram sends it again, and the store's unique (platform, message id) turns
the second admission into a no-op. There is no window in which an update is acknowledged but
not admitted. What we rely on, in PTB 22.x (``telegram/ext/_updater.py``): the offset is
assigned after the puts of its batch; ``updater.stop()`` confirms only that offset. A test
holds an admission and checks the update stays unconfirmed, so a PTB change would show up.

When the update cannot be admitted now, ``put`` does not return normally: while botmux drains
(``Intake.accepting`` is false) it waits until the poller is stopped, so nothing is
acknowledged; when the store failed, it raises :class:`AdmissionDeferred`, a ``TelegramError``
PTB's poll loop answers by polling again, later, from the same offset (admitted updates of
the batch come back as duplicates and are skipped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import Enum

import anyio
from telegram import Update
from telegram.error import TelegramError


class Verdict(Enum):
    """What becomes of an update: acknowledged, asked again later, or held unacknowledged."""

    ACK = "ack"  # admitted, or not a turn: Telegram may forget it
    RETRY = "retry"  # admission failed: get it again later
    HOLD = "hold"  # draining: never acknowledge it in this process


class AdmissionDeferred(TelegramError):
    """Raised from the update queue's ``put`` so PTB polls the same updates again later."""


class Pending:
    """A verdict not given yet: the poller or the webhook handler waits on it."""

    def __init__(self) -> None:
        self._given = anyio.Event()
        self.verdict = Verdict.HOLD

    def give(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self._given.set()

    async def wait(self) -> Verdict:
        await self._given.wait()
        return self.verdict


class UpdateQueue(asyncio.Queue[object]):
    """PTB's update queue, where putting an Update is admitting it (see the module docs).

    Anything else PTB puts (its stop signal) is queued as usual for the Application.
    """

    def __init__(self, decide: Callable[[Update], Awaitable[Verdict]]) -> None:
        super().__init__()
        self._decide = decide

    async def put(self, item: object) -> None:
        if not isinstance(item, Update):
            await super().put(item)
            return
        verdict = await self._decide(item)
        if verdict is Verdict.RETRY:
            raise AdmissionDeferred(f"update {item.update_id} was not admitted; polling again")
        if verdict is Verdict.HOLD:
            await anyio.sleep_forever()  # until updater.stop() cancels the poll: no ack
