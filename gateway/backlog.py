"""Bounds on what waits: the pending caps checked before a message is stored (SPEC section 14).

The check runs inside the admission's own transaction, on the writer (``AdmitRow.caps``):
each backend reads, for each message of the batch, the conversation's pending rows and the
store's (each counted only up to its cap) and whether the message is stored already
(``Backlog``), and :func:`decide` adds what the batch admits before it. On one node that is
exact: the writer commits one batch at a time, so no admission of this process can be in
flight beside the read, and a burst of 20 messages to a conversation capped at 32 is admitted
whole. On PostgreSQL the counts include what other nodes committed; several nodes admitting
to one conversation at the same instant can each pass the last free place, so the overshoot
is at most the other nodes' admissions in flight at that moment.

The check used to be a read of its own before the admission (one more round trip to the
store's reader per message, and a per-conversation lock held from the read to the commit);
folding it into the admission removed both.

A redelivered message is recognised before any cap is applied: a duplicate is never refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import Overloaded
from gateway.messages import Backlog, Inbound

#: The Retry-After suggested when a conversation is full (its turns take seconds each) and
#: when the whole gateway is (it drains more slowly).
CONVERSATION_RETRY_S = 5.0
GATEWAY_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class Caps:
    per_conversation: int
    total: int


DEFAULT_CAPS = Caps(per_conversation=32, total=10_000)  # [gateway]'s defaults


def verdict(read: Backlog, caps: Caps) -> Overloaded | None:
    """The refusal, or None: admit (decide; the caller acts)."""
    if read.stored:
        return None  # a duplicate: the store answers with the stored row, nothing is added
    if read.total >= caps.total:
        return Overloaded(
            f"too many messages wait in this gateway (max_pending_total = {caps.total})",
            retry_after=GATEWAY_RETRY_S,
            scope="gateway",
        )
    if read.conversation >= caps.per_conversation:
        return Overloaded(
            f"too many messages wait in this conversation"
            f" (max_pending_per_conversation = {caps.per_conversation})",
            retry_after=CONVERSATION_RETRY_S,
            scope="conversation",
        )
    return None


def decide(
    batch: Sequence[tuple[Inbound, Caps | None]], reads: Sequence[Backlog | None]
) -> list[Overloaded | None]:
    """For each admission of one transaction, in order: refused, or None (stored, or a
    duplicate). ``reads``: what the store held before the batch (None where no caps apply);
    an admission counts what the batch admitted before it, and one whose platform id an
    earlier one of the batch carries is a duplicate."""
    added: dict[str, int] = {}
    total = 0
    seen: set[tuple[str, str]] = set()
    out: list[Overloaded | None] = []
    for (inbound, caps), read in zip(batch, reads, strict=True):
        key = (inbound.platform, inbound.platform_message_id)
        refusal = None
        if caps is not None and read is not None:
            so_far = Backlog(
                conversation=read.conversation + added.get(inbound.conversation, 0),
                total=read.total + total,
                stored=read.stored or key in seen,
            )
            refusal = verdict(so_far, caps)
        out.append(refusal)
        if refusal is None:
            if key not in seen and not (read is not None and read.stored):
                added[inbound.conversation] = added.get(inbound.conversation, 0) + 1
                total += 1
            seen.add(key)
    return out
