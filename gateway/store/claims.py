"""Answers that are not turns (SPEC 17): a control command's answer, a refusal notice. A turn
is de-duplicated by its admission (unique platform message id); these store no row, so a
platform that delivers one message twice, possibly to two nodes (Slack's ``message`` and
``app_mention``), claims the answer first: the first claimer answers, the others do not.

A claim matters only while the message may still be delivered again (Slack retries within
minutes): claims older than :data:`CLAIM_KEPT_S` are deleted with each batch of claims.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store._rows import numbered
from gateway.store.commands import PgTx, SqliteTx, Write, WriteHandler

#: How long a claim is kept (seconds): far past Slack's last retry, about five minutes on.
CLAIM_KEPT_S = 86_400.0


@dataclass(frozen=True, slots=True)
class ClaimAnswer(Write[bool]):
    """Claim the answer to a platform's message: True for the first claim of it (answer it),
    False when it was claimed already (on this node or another)."""

    platform: str
    message_id: str


@dataclass(frozen=True, slots=True)
class ReleaseAnswer(Write[bool]):
    """Give up a claim: the answer could not be given (its command failed in the store), so
    the message's next delivery, on any node, claims it again. True when a claim was held."""

    platform: str
    message_id: str


_FORGET = "DELETE FROM answer_claims WHERE claimed_at < ?"
_CLAIM = (
    "INSERT INTO answer_claims (platform, message_id, claimed_at) VALUES (?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)


def claim_sqlite(tx: SqliteTx, ops: list[ClaimAnswer]) -> list[bool]:
    tx.db.execute(_FORGET, (tx.now - CLAIM_KEPT_S,))
    return [tx.db.execute(_CLAIM, (op.platform, op.message_id, tx.now)).rowcount == 1 for op in ops]


async def claim_postgres(tx: PgTx, ops: list[ClaimAnswer]) -> list[bool]:
    await tx.db.execute("DELETE FROM answer_claims WHERE claimed_at < $1", tx.now - CLAIM_KEPT_S)
    claimed = []
    for op in ops:  # one at a time: the same message twice in a batch is claimed once
        status = await tx.db.execute(
            "INSERT INTO answer_claims (platform, message_id, claimed_at) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            op.platform,
            op.message_id,
            tx.now,
        )
        claimed.append(status == "INSERT 0 1")
    return claimed


_RELEASE = "DELETE FROM answer_claims WHERE platform = ? AND message_id = ?"


def release_sqlite(tx: SqliteTx, ops: list[ReleaseAnswer]) -> list[bool]:
    return [tx.db.execute(_RELEASE, (op.platform, op.message_id)).rowcount == 1 for op in ops]


async def release_postgres(tx: PgTx, ops: list[ReleaseAnswer]) -> list[bool]:
    released = []
    for op in ops:
        status = await tx.db.execute(numbered(_RELEASE), op.platform, op.message_id)
        released.append(status == "DELETE 1")
    return released


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[ClaimAnswer, bool](ClaimAnswer, claim_sqlite, claim_postgres),
    WriteHandler[ReleaseAnswer, bool](ReleaseAnswer, release_sqlite, release_postgres),
)
