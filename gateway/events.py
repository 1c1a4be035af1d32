"""What the runtime reports about itself: one frozen class per event, past tense.

Every part that has something to report (intake, session actors, the store's writer, the
policy engine, couriers, adapters, the cluster) calls one :data:`Observe` with one of these;
the composition root's observer logs it, counts it (``gateway.metrics``) and passes it to the
failpoints (``gateway.failpoints``). Those two dispatch with a ``match`` over :data:`Event`
ending in ``assert_never``, so mypy rejects an event that one of them forgot; the log line is
read off the class (``name``, ``level``) and its fields (:func:`log_line`), so it cannot
forget one either.

The log line keeps the shape it had when events were strings: the message is ``name``, the
``extra`` fields are the event's fields in declaration order (a field of ``None`` that only
some decisions carry is left out: see :func:`log_fields`).

A leaf module, like ``messages`` and ``errors``: it imports nothing of ours but its own parts
(``events_tools``, the tool loop's events; ``events_mcp``, the MCP servers';
``events_schedules``, the scheduler's; ``events_platforms``, the chat platforms' own), so
``policy/`` and ``platforms/`` may import it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from gateway.events_mcp import ToolCalled, ToolServerChanged, ToolsListed
from gateway.events_platforms import (
    DiscordBackfilled,
    SlackEvent,
    TelegramAdmissionDeferred,
    TelegramNoticeDropped,
    TelegramNoticeFailed,
    TelegramPlainFallback,
    TelegramPollFailed,
    TelegramStrangerIgnored,
    TelegramWebhookRefused,
)
from gateway.events_schedules import ScheduleEvent
from gateway.events_tools import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalRefused,
    ToolCallFinished,
    ToolCallStarted,
    ToolLoopStopped,
    ToolStepChosen,
    ToolStepStored,
)

# Per-operation events are counted but logged at debug level only (so are those whose emitter
# logs a line of its own); decisions and failures show at warning level.
DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING

# -- admission and turns -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageAdmitted:
    """A user row was stored pending (its turn is queued on the node holding it)."""

    name: ClassVar[str] = "admitted"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    row: int


@dataclass(frozen=True, slots=True)
class DuplicateIgnored:
    """A redelivered message found its stored row: nothing queued."""

    name: ClassVar[str] = "duplicate"
    level: ClassVar[int] = INFO
    conversation: str
    platform: str
    row: int


@dataclass(frozen=True, slots=True)
class MessageRefused:
    """A message was refused before it was stored (SPEC 14): too many turns waiting in its
    conversation or the gateway (``overloaded``), or over ``max_message_chars``."""

    name: ClassVar[str] = "refused"
    level: ClassVar[int] = INFO
    conversation: str
    platform: str
    reason: Literal["overloaded", "too_long"]
    scope: Literal["conversation", "gateway", ""] = ""


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A session actor took a row for its turn; no model call yet."""

    name: ClassVar[str] = "turn_started"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    row: int
    waited_s: float


@dataclass(frozen=True, slots=True)
class TurnRerun:
    """The turn ended in a transient failure and runs once more on the same row."""

    name: ClassVar[str] = "turn_rerun"
    level: ClassVar[int] = WARNING
    conversation: str
    row: int
    reason: str


@dataclass(frozen=True, slots=True)
class TurnAbandoned:
    """Another node owns the conversation now: the turn ended without writing or sending."""

    name: ClassVar[str] = "turn_abandoned"
    level: ClassVar[int] = INFO
    conversation: str
    row: int


@dataclass(frozen=True, slots=True)
class TurnCancelled:
    """``/stop`` (or shutdown) ended the turn; its row is cancelled."""

    name: ClassVar[str] = "turn_cancelled"
    level: ClassVar[int] = INFO
    conversation: str
    row: int
    platform: str


@dataclass(frozen=True, slots=True)
class TurnInterrupted:
    """Queue mode "interrupt": a newer message stopped the running turn; nothing of it was
    stored or sent, its rows stay pending and the next turn answers them with the new one."""

    name: ClassVar[str] = "turn_interrupted"
    level: ClassVar[int] = INFO
    conversation: str
    row: int
    platform: str


@dataclass(frozen=True, slots=True)
class TurnMerged:
    """A turn answers several messages at once (queue modes "collect", "interrupt"): ``row``
    is the last one (the one replied to), ``rows`` how many."""

    name: ClassVar[str] = "turn_merged"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    row: int
    rows: int


@dataclass(frozen=True, slots=True)
class TurnFenced:
    """The answer commit found the lease taken over: nothing of the turn was stored."""

    name: ClassVar[str] = "turn_fenced"
    level: ClassVar[int] = DEBUG  # the session actor logs its own line
    conversation: str
    row: int


@dataclass(frozen=True, slots=True)
class AnswerCommitted:
    """The reply row and its outbox chunks were committed; nothing sent yet."""

    name: ClassVar[str] = "answer_committed"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    row: int


@dataclass(frozen=True, slots=True)
class TurnCompleted:
    """The turn's answer (a reply, or an honest failure text) is committed."""

    name: ClassVar[str] = "turn_completed"
    conversation: str
    row: int
    platform: str
    failure: str | None  # the failure class, None when answered
    model: str
    seconds: float

    @property
    def level(self) -> int:
        return WARNING if self.failure else INFO


@dataclass(frozen=True, slots=True)
class FirstTokenShown:
    """The first piece of a streamed answer was handed to whoever shows it (SPEC 8);
    ``seconds`` counts from the user row's admission."""

    name: ClassVar[str] = "first_token"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    row: int
    seconds: float


# -- the model and its policy ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttachmentFetched:
    """A turn fetched an attachment's bytes and stored them (SPEC 9): no model call yet."""

    name: ClassVar[str] = "attachment_fetched"
    level: ClassVar[int] = INFO
    conversation: str
    platform: str
    row: int
    kind: str
    size: int


@dataclass(frozen=True, slots=True)
class AttachmentHandled:
    """A turn did one step with one attachment (SPEC 9): ``step`` ``fetch`` (it failed:
    a fetched one is :class:`AttachmentFetched`), ``transcribe`` or ``read`` (a document's
    text); ``outcome`` ``ok`` or the failure class (``too_large``, ``not_configured``,
    ``unsupported``, ``unreadable``, a policy class)."""

    name: ClassVar[str] = "attachment"
    level: ClassVar[int] = INFO
    conversation: str
    platform: str
    row: int
    kind: str
    step: Literal["fetch", "transcribe", "read"]
    outcome: str
    size: int = 0


@dataclass(frozen=True, slots=True)
class ModelCalled:
    """One model request ended."""

    name: ClassVar[str] = "model_call"
    level: ClassVar[int] = DEBUG
    model: str
    outcome: Literal["ok", "error"]
    reason: str  # the failure class, "" when ok


@dataclass(frozen=True, slots=True)
class ModelTokensUsed:
    """A model call answered and reported its token counts."""

    name: ClassVar[str] = "model_tokens"
    level: ClassVar[int] = DEBUG
    model: str
    prompt_tokens: int
    completion_tokens: int


Decision = Literal[
    "retry", "rotate", "bench", "recover", "fallback", "wait_bench", "give_up", "trim"
]


@dataclass(frozen=True, slots=True)
class PolicyDecided:
    """The failure policy chose what to do after a failed call (SPEC section 4).

    The fields after ``reason`` are those of some decisions only: ``delay_s`` (retry, rotate),
    ``to`` (fallback: the next model), ``seconds`` (bench, wait_bench), ``key`` (bench: the
    masked key), ``benched_for_s`` (give_up while every key is benched).
    """

    name: ClassVar[str] = "decision"
    level: ClassVar[int] = WARNING
    conversation: str
    platform: str
    turn: int
    decision: Decision
    model: str
    reason: str
    delay_s: float | None = None
    to: str | None = None
    seconds: float | None = None
    key: str | None = None
    benched_for_s: float | None = None


@dataclass(frozen=True, slots=True)
class ContextCompacted:
    """Compaction (SPEC 11, ``[agent] compaction = "summary"``) folded ``rows`` history rows
    that left the window into the conversation's summary (``outcome`` "ok"), or its model
    call failed with the class ``reason`` and the turn went on without it ("failed")."""

    name: ClassVar[str] = "context_compacted"
    level: ClassVar[int] = INFO
    conversation: str
    outcome: Literal["ok", "failed"]
    rows: int
    reason: str  # the failure class, "" when ok


# -- delivery ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkSent:
    """The platform took a reply chunk; not yet recorded delivered."""

    name: ClassVar[str] = "chunk_sent"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    chunk: int


@dataclass(frozen=True, slots=True)
class ChunkRecorded:
    """A sent chunk is recorded delivered."""

    name: ClassVar[str] = "chunk_recorded"
    level: ClassVar[int] = DEBUG
    conversation: str
    platform: str
    chunk: int


@dataclass(frozen=True, slots=True)
class SendRetried:
    """A chunk's send failed in a retryable way; it is sent again after ``delay_s``."""

    name: ClassVar[str] = "send_retry"
    level: ClassVar[int] = INFO
    conversation: str
    platform: str
    chunk: int
    reason: str
    attempt: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class SendFailed:
    """A chunk could not be sent; it is marked undeliverable."""

    name: ClassVar[str] = "send_failed"
    level: ClassVar[int] = WARNING
    conversation: str
    platform: str
    chunk: int
    reason: str
    attempt: int
    error: str


# -- the store and the cluster --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreCommitted:
    """One group commit of the store."""

    name: ClassVar[str] = "store_commit"
    level: ClassVar[int] = DEBUG
    seconds: float
    operations: int


@dataclass(frozen=True, slots=True)
class TakeoverDone:
    """This node took conversations over from a node that stopped (it logs its own line)."""

    name: ClassVar[str] = "takeover"
    level: ClassVar[int] = DEBUG
    conversations: int


@dataclass(frozen=True, slots=True)
class LeaseWasLost:
    """A heartbeat found a conversation's lease held by another node."""

    name: ClassVar[str] = "lease_lost"
    level: ClassVar[int] = DEBUG
    conversation: str


@dataclass(frozen=True, slots=True)
class HeartbeatFailed:
    """A lease renewal did not reach the database."""

    name: ClassVar[str] = "heartbeat_failed"
    level: ClassVar[int] = DEBUG


@dataclass(frozen=True, slots=True)
class SelfFenced:
    """Silent for most of a lease: this node stopped its turns."""

    name: ClassVar[str] = "self_fenced"
    level: ClassVar[int] = DEBUG
    conversations: int


# -- operations -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigReloaded:
    """A reload of the config file was asked for (SIGHUP, ``botmux reload``, the admin API):
        ``result`` applied, unchanged, refused (a restart key changed: nothing applied), invalid
        (the file did not load: nothing applied) or dry_run (a valid preview: an invalid one is
    ``invalid`` with ``dry_run`` set; both at info level). ``by``: ``signal`` or the peer
        token's name, never a token. Keys are named, values never."""

    name: ClassVar[str] = "config_reloaded"
    result: Literal["applied", "unchanged", "refused", "invalid", "dry_run"]
    by: str
    live: str  # the changed keys that apply live, comma-separated
    restart: str  # the changed keys that need a restart
    version: int
    reason: str
    dry_run: bool = False  # a preview (botmux check): nothing was to change, valid or not

    @property
    def level(self) -> int:
        return INFO if self.dry_run else WARNING


# -- the operator console (SPEC 13) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdminActed:
    """An operator acted through the admin API: who (the peer token's name, never the token;
    "loopback" without tokens), what, on what, and whether it took (``ok``) or named nothing
    (``unknown``: no such code or user)."""

    name: ClassVar[str] = "admin_action"
    level: ClassVar[int] = INFO
    action: Literal["approve", "reject", "revoke"]  # a reload is ConfigReloaded
    by: str
    platform: str
    target: str  # the pairing code, or the user id
    result: Literal["ok", "unknown"]


Event = (
    MessageAdmitted
    | DuplicateIgnored
    | MessageRefused
    | TurnStarted
    | TurnRerun
    | TurnAbandoned
    | TurnCancelled
    | TurnInterrupted
    | TurnMerged
    | TurnFenced
    | AnswerCommitted
    | TurnCompleted
    | FirstTokenShown
    | ModelCalled
    | ModelTokensUsed
    | PolicyDecided
    | ContextCompacted
    | ChunkSent
    | ChunkRecorded
    | SendRetried
    | SendFailed
    | StoreCommitted
    | TakeoverDone
    | LeaseWasLost
    | HeartbeatFailed
    | SelfFenced
    | TelegramPlainFallback
    | TelegramPollFailed
    | TelegramAdmissionDeferred
    | TelegramStrangerIgnored
    | TelegramNoticeDropped
    | TelegramNoticeFailed
    | TelegramWebhookRefused
    | DiscordBackfilled
    | AttachmentFetched
    | AttachmentHandled
    | ConfigReloaded
    | AdminActed
    | ToolStepChosen
    | ToolStepStored
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalAsked
    | ApprovalDecided
    | ApprovalRefused
    | ToolLoopStopped
    | ToolServerChanged
    | ToolsListed
    | ToolCalled
    | ScheduleEvent
    | SlackEvent
)
Observe = Callable[[Event], None]

# A decision's fields that only some decisions have: absent from its log line when None.
_OPTIONAL = frozenset({"delay_s", "to", "seconds", "key", "benched_for_s"})


def log_line(event: Event) -> tuple[int, str, dict[str, object]]:
    """The event's log line: its level, its message (the name), its ``extra`` fields. Read off
    the class, so a new event cannot be forgotten here (mypy rejects one without a ``name``
    or a ``level``, as the metrics' and the failpoints' ``match`` reject one they lack)."""
    return event.level, event.name, log_fields(event)


def log_fields(event: Event) -> dict[str, object]:
    """The ``extra`` of the event's log line: its fields, in declaration order."""
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, PolicyDecided):
        return {k: v for k, v in fields.items() if v is not None or k not in _OPTIONAL}
    return fields
