"""The store's writes as types: one frozen class per kind of write, the same on both backends.

A write is a command for the group-commit writer (``_writer``); ``Write[R]`` says what its
caller gets back, so ``await group.submit(AdmitRow(inbound))`` is an :class:`Admission` to
mypy too. The backends apply runs of one class at a time (a ``match`` over :data:`StoreWrite`
ending in ``assert_never``), each returning one result per write, in order; a result that is
a :class:`~gateway.errors.StoreError` (``LeaseLost``) fails that write alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.backlog import Caps
from gateway.messages import (
    Admission,
    ChunkState,
    Inbound,
    StoredMessage,
    TurnOutcome,
    TurnResult,
)

R_co = TypeVar("R_co", covariant=True)
W = TypeVar("W")


class Write(Generic[R_co]):
    """A write whose caller gets an ``R_co`` back once it committed."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class AdmitRow(Write[Admission]):
    """Store the user row as pending, unless (platform, platform id) is already stored,
    with its attachment references; ``blobs`` are bytes that came inline (the peer API),
    by sha256, stored in the same transaction (SPEC 9). ``caps``: refused (its result an
    ``Overloaded``, nothing stored) past them, checked in the same transaction
    (``gateway.backlog``)."""

    inbound: Inbound
    blobs: tuple[tuple[str, bytes], ...] = ()
    caps: Caps | None = None


@dataclass(frozen=True, slots=True)
class AnswerTurn(Write[TurnOutcome]):
    """Store the reply, settle the user row, queue the reply's chunks. ``also``: the earlier
    rows of a merged turn (SPEC 10), settled with it and linked to the same reply."""

    user_row: StoredMessage
    result: TurnResult
    chunks: tuple[str, ...]
    also: tuple[int, ...] = ()
    delivered_as: str | None = None  # the chunks are stored delivered, as this platform id

    @property
    def chunk_state(self) -> ChunkState:
        return ChunkState.PENDING if self.delivered_as is None else ChunkState.DELIVERED

    @property
    def tokens(self) -> tuple[int | None, int | None]:
        """The counts for the reply row's token columns: none when the model counted none."""
        usage = self.result.usage
        if usage.prompt_tokens == 0 and usage.completion_tokens == 0:
            return None, None
        return usage.prompt_tokens, usage.completion_tokens


@dataclass(frozen=True, slots=True)
class CancelTurn(Write[None]):
    user_row_id: int
    also: tuple[int, ...] = ()  # the other rows of a merged turn, cancelled with it

    @property
    def rows(self) -> tuple[int, ...]:
        return (*self.also, self.user_row_id)


@dataclass(frozen=True, slots=True)
class ResetConversation(Write[None]):
    conversation: str


@dataclass(frozen=True, slots=True)
class MarkDelivered(Write[None]):
    chunk_id: int
    platform_message_id: str


@dataclass(frozen=True, slots=True)
class MarkSending(Write[None]):
    chunk_id: int


@dataclass(frozen=True, slots=True)
class ExpireChunks(Write[None]):
    chunk_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FailChunk(Write[None]):
    chunk_id: int


@dataclass(frozen=True, slots=True)
class ExpireInFlight(Write[int]):
    """Chunks left ``sending`` by a dead process are not sent again: how many there were.
    ``conversations``: only those (taken over from a dead node); None: all."""

    conversations: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class RequestPairing(Write[tuple[str | None, str]]):
    platform: str
    user_id: str
    label: str
    ttl_s: float
    max_pending: int


@dataclass(frozen=True, slots=True)
class ApprovePairing(Write[str | None]):
    platform: str
    code: str


@dataclass(frozen=True, slots=True)
class RejectPairing(Write[str | None]):
    """Refuse a pending code: its user gets no new one until it would have expired."""

    platform: str
    code: str


@dataclass(frozen=True, slots=True)
class RevokeUser(Write[bool]):
    platform: str
    user_id: str


@dataclass(frozen=True, slots=True)
class PurgeConversation(Write[int]):
    """Mark the conversation's pending rows failed (never run, nothing sent): how many."""

    conversation: str


@dataclass(frozen=True, slots=True)
class DeleteConversation(Write[int | None]):
    """Remove the conversation's rows and outbox: how many rows, None when there was none.
    With ``idle_before`` (the retention sweep) only if it is still idle past its cutoff
    (``anonymous_before`` for ``peer:anon-*``) and has nothing pending."""

    conversation: str
    idle_before: float | None = None
    anonymous_before: float | None = None


@dataclass(frozen=True, slots=True)
class RecordPreview(Write[None]):
    """A turn's preview message (SPEC 8), recorded before its first edit: after a crash the
    re-run turn edits it into the answer instead of leaving partial text behind."""

    user_row_id: int
    message_id: str


@dataclass(frozen=True, slots=True)
class SetPushConfig(Write[None]):
    """An A2A task's push notification config (SPEC 12), stored as the adapter's JSON;
    ``config`` None deletes it."""

    user_row_id: int
    config_id: str
    config: str | None


@dataclass(frozen=True, slots=True)
class DeleteTurn(Write[bool | None]):
    """Remove one answered turn (``DELETE /v1/responses/{id}``): the user row, its replies,
    their outbox chunks and preview; the conversation's other rows stay. True: deleted,
    False: the turn is still pending (nothing removed), None: no such user row."""

    user_row_id: int


@dataclass(frozen=True, slots=True)
class SaveSummary(Write[bool]):
    """Store the conversation's summary (compaction, SPEC 11) if it covers more than the one
    stored and nothing of it precedes a reset: whether it was stored."""

    conversation: str
    content: str
    through: int


@dataclass(frozen=True, slots=True)
class SaveAttachment(Write[None]):
    """What the turn learnt of attachment ``position`` of a user row (SPEC 9): its bytes,
    stored content-addressed (``sha256``, shared by every row that sent the same file), and
    what was made of them (``text``: a transcript, a document's text). None: unchanged."""

    user_row_id: int
    position: int
    sha256: str | None = None
    data: bytes | None = None
    text: str | None = None


StoreWrite = (
    AdmitRow
    | AnswerTurn
    | CancelTurn
    | ResetConversation
    | MarkDelivered
    | MarkSending
    | ExpireChunks
    | FailChunk
    | ExpireInFlight
    | RequestPairing
    | ApprovePairing
    | RejectPairing
    | RevokeUser
    | PurgeConversation
    | DeleteConversation
    | RecordPreview
    | DeleteTurn
    | SaveSummary
    | SaveAttachment
    | SetPushConfig
)


def only(kind: type[W], run: Sequence[StoreWrite]) -> list[W]:
    """A run of writes of one class (the writer groups them so), typed as that class."""
    writes: list[W] = [w for w in run if isinstance(w, kind)]
    assert len(writes) == len(run), "a run mixes kinds of writes"
    return writes
