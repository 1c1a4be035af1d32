"""Bounds on what waits: the pending caps checked before a message is stored (SPEC section 14).

The counts come from the store (``Store.backlog``: the conversation's pending rows and the
store's, each counted only up to its cap, plus whether the message is stored already), so they
are right after a restart and, on PostgreSQL, include what other nodes admitted. The read and
the admission are two steps. Within one conversation this process runs them one admission at
a time (a lock per conversation, held from the read to the commit), so the conversation's
count is exact on one node: a burst of 20 messages to a conversation capped at 32 is admitted
whole. For the gateway-wide count the gate adds what the read cannot see: admissions of this
process still in flight, and those that finished while the read ran. That sum is an upper
bound (an admission committed just before the read is counted twice), so one node never goes
past ``max_pending_total`` and at worst refuses early by the number of admissions in flight.
Several nodes admitting to one conversation at the same instant can each pass the last free
place: the overshoot is at most the other nodes' admissions in flight at that moment.

A redelivered message is recognised before any cap is applied: a duplicate is never refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from gateway.errors import Overloaded
from gateway.messages import Backlog, Inbound
from gateway.store.base import Store

#: The Retry-After suggested when a conversation is full (its turns take seconds each) and
#: when the whole gateway is (it drains more slowly).
CONVERSATION_RETRY_S = 5.0
GATEWAY_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class Caps:
    per_conversation: int
    total: int


DEFAULT_CAPS = Caps(per_conversation=32, total=10_000)  # [gateway]'s defaults


@dataclass(frozen=True, slots=True)
class Seen:
    """What this process adds to a store read: in flight now, and finished during the read."""

    conversation: int
    total: int


def verdict(read: Backlog, seen: Seen, caps: Caps) -> Overloaded | None:
    """The refusal, or None: admit (decide; the caller acts)."""
    if read.stored:
        return None  # a duplicate: the store answers with the stored row, nothing is added
    if read.total + seen.total >= caps.total:
        return Overloaded(
            f"too many messages wait in this gateway (max_pending_total = {caps.total})",
            retry_after=GATEWAY_RETRY_S,
            scope="gateway",
        )
    if read.conversation + seen.conversation >= caps.per_conversation:
        return Overloaded(
            f"too many messages wait in this conversation"
            f" (max_pending_per_conversation = {caps.per_conversation})",
            retry_after=CONVERSATION_RETRY_S,
            scope="conversation",
        )
    return None


class _Tally:
    """One conversation's admissions in this process, while any are reading or in flight."""

    __slots__ = ("added", "in_flight", "lock", "users")

    def __init__(self) -> None:
        self.users = 0
        self.in_flight = 0
        self.added = 0  # admissions that added a row: only ever grows while the tally lives
        self.lock = anyio.Lock()  # one admission of the conversation at a time, read to commit


class Reservation:
    """A place held by an admission between its check and its commit."""

    __slots__ = ("conversation", "released")

    def __init__(self, conversation: str) -> None:
        self.conversation = conversation
        self.released = False


class BacklogGate:
    def __init__(self, store: Store, caps: Caps, *, live: Callable[[], Caps] | None = None) -> None:
        self._store = store
        self._caps = live or (lambda: caps)  # live: a reload's caps, read at each reservation
        self._tallies: dict[str, _Tally] = {}
        self._in_flight = 0
        self._added = 0
        self._stats = {"refused_conversation": 0, "refused_gateway": 0}

    @property
    def caps(self) -> Caps:
        return self._caps()

    def __repr__(self) -> str:
        return f"<BacklogGate {self.caps} in_flight={self._in_flight}>"

    def statistics(self) -> dict[str, int]:
        return {**self._stats, "in_flight": self._in_flight, "tracked": len(self._tallies)}

    async def reserve(self, inbound: Inbound) -> Reservation:
        """A place for ``inbound``, or :class:`Overloaded` (nothing was stored). Release it
        with :meth:`release`, in the same task, once the admission returned or failed: until
        then the conversation's next admission waits here."""
        tally = self._tallies.get(inbound.conversation)
        if tally is None:
            tally = self._tallies[inbound.conversation] = _Tally()
        tally.users += 1
        try:
            await tally.lock.acquire()
        except BaseException:
            self._leave(inbound.conversation, tally)
            raise
        added, added_here = self._added, tally.added
        try:
            read = await self._store.backlog(
                inbound.conversation,
                inbound.platform,
                inbound.platform_message_id,
                conversation_limit=self.caps.per_conversation,
                total_limit=self.caps.total,
            )
        except BaseException:
            tally.lock.release()
            self._leave(inbound.conversation, tally)
            raise
        # No await from here to the reservation: the check and the hold are one step.
        seen = Seen(
            conversation=tally.in_flight + tally.added - added_here,
            total=self._in_flight + self._added - added,
        )
        refusal = verdict(read, seen, self.caps)
        if refusal is not None:
            self._stats[f"refused_{refusal.scope}"] += 1
            tally.lock.release()
            self._leave(inbound.conversation, tally)
            raise refusal
        tally.in_flight += 1
        self._in_flight += 1
        return Reservation(inbound.conversation)

    def release(self, reservation: Reservation, *, added: bool) -> None:
        """The admission ended: it stored a new row (``added``), or not (a duplicate, a
        failure)."""
        if reservation.released:
            return
        reservation.released = True
        tally = self._tallies[reservation.conversation]
        tally.lock.release()
        tally.in_flight -= 1
        self._in_flight -= 1
        if added:
            tally.added += 1
            self._added += 1
        self._leave(reservation.conversation, tally)

    def _leave(self, conversation: str, tally: _Tally) -> None:
        tally.users -= 1
        if tally.users == 0:
            del self._tallies[conversation]
