"""The values that travel between botmux's parts.

Adapters, the router, session actors, the store and the agent exchange only these frozen,
slotted dataclasses, so every boundary is a plain value that tests can build and compare.
This module imports nothing of ours: everything else may import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

#: What whoever waits for a turn learns when ``/stop`` cancelled it before it answered.
STOPPED_REPLY = "The turn was stopped before it answered."


@dataclass(frozen=True, slots=True)
class DataUrl:
    """An image the gateway encoded for the model: ``data:<content_type>;base64,<payload>``,
    the base64 kept as bytes. A 20 MiB image is 27 MB of it; as bytes it is one buffer that
    the model request's body takes as it is (``agent._body``), where a ``str`` would be
    decoded, copied and escaped again (each fresh buffer of that size ~20 ms of page faults
    on the benchmark machine). ``str()`` gives the URL as text (a copy)."""

    content_type: str
    payload: bytes = field(repr=False)  # base64: nothing in it needs escaping in JSON

    def __str__(self) -> str:
        return f"data:{self.content_type};base64,{self.payload.decode('ascii')}"


#: An image a turn sends: a URL (https, or a data URL as text) or one the gateway encoded.
Image = str | DataUrl


@dataclass(frozen=True, slots=True)
class ControlCommand:
    """A command the runtime answers itself (SPEC section 2). The one table of them,
    :data:`COMMANDS`, feeds ``/help``, Telegram's command menu and Discord's slash commands.

    ``skips_queue``: answered at once, never queued behind the conversation's turns.
    ``alias_of``: another name for that command (Telegram's habitual ``/start``): listed in
    Telegram's menu, where users expect it, but not in ``/help`` or as a slash command.
    """

    name: str
    description: str
    skips_queue: bool = True
    alias_of: str | None = None
    argument: str = ""  # what follows the name, if it takes something (``/unschedule ID``)


COMMANDS = (
    ControlCommand("start", "Say hello and show what I can do", alias_of="help"),
    ControlCommand("help", "Show what I can do and the commands"),
    ControlCommand("new", "Start a fresh conversation context"),
    ControlCommand("status", "Show the model in use and the queue"),
    ControlCommand("stop", "Stop the reply being written"),
    ControlCommand("schedules", "List this conversation's scheduled messages"),
    ControlCommand("unschedule", "Remove a scheduled message: /unschedule ID", argument="id"),
)

#: Control commands: answered at once by the runtime, never queued as turns (SPEC section 2).
CONTROL_COMMANDS = frozenset(c.name for c in COMMANDS if c.skips_queue)


def command_named(name: str) -> ControlCommand | None:
    """The control command ``name`` stands for (an alias gives the command it names)."""
    for command in COMMANDS:
        if command.name == name:
            return command_named(command.alias_of) if command.alias_of else command
    return None


def conversation_key(platform: str, local: str) -> str:
    """``<platform>:<local part>``: every conversation key has this shape (SPEC section 2)."""
    return f"{platform}:{local}"


def platform_of(key: str) -> str:
    """The platform a conversation key belongs to (``telegram`` for ``telegram:42``)."""
    return key.partition(":")[0]


def local_part(key: str, platform: str) -> str | None:
    """What follows ``<platform>:`` in ``key``; None when ``key`` is not ``platform``'s."""
    head, sep, rest = key.partition(":")
    return rest if sep and head == platform else None


class MessageState(StrEnum):
    """Where a user row is in the turn lifecycle (SPEC section 3)."""

    PENDING = "pending"
    ANSWERED = "answered"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ChunkState(StrEnum):
    PENDING = "pending"
    SENDING = "sending"  # handed to the platform (only with gateway.unrecorded_sends = "drop")
    DELIVERED = "delivered"
    EXPIRED = "expired"  # too old to send after a restart, or in flight at a crash
    FAILED = "failed"  # the platform refused it for good


#: The kinds of attachment botmux knows (SPEC section 9).
ATTACHMENT_KINDS = ("image", "audio", "document")
#: Failure classes of a turn whose attachments could not be used and that had nothing else
#: to answer: over a limit, a type botmux cannot read, voice without ``[transcription]``.
ATTACHMENT_FAILURES = ("too_large", "unsupported", "not_configured")


VOICE_TRANSCRIPT = "[voice transcript]"  # marks a transcript where a row's text is shown


@dataclass(frozen=True, slots=True)
class AttachmentRef:
    """A file that came with a message (SPEC section 9): what admission stores with the user
    row, before any byte of it is fetched.

    ``kind`` is ``"image"``, ``"audio"`` or ``"document"``; ``name`` the file name as the user
    sent it (``"photo.jpg"`` when the platform has none); ``content_type`` its MIME type
    (``""`` when unknown); ``size`` its length in bytes when the platform says it before
    fetching; ``source`` the platform's handle (Telegram file_id, Discord attachment URL;
    ``""`` for inline peer data). ``sha256`` is set once the bytes are in the store.
    """

    kind: str
    name: str
    content_type: str
    size: int | None
    source: str
    sha256: str | None = None
    # What botmux made of the bytes, once (a voice note's transcript, a document's text),
    # kept on the row so that a re-run or a later turn never transcribes or extracts again.
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Inbound:
    """One platform message, ready for admission.

    ``platform_message_id`` is stable across redeliveries (Telegram's update, Discord's
    message id, the peer's Idempotency-Key); admission is unique on it per platform.
    ``reply_target`` is what the adapter needs to answer in place (a message id to reply to).
    """

    platform: str
    conversation: str
    platform_message_id: str
    text: str
    sender: str = ""
    reply_target: str = ""
    attachments: tuple[AttachmentRef, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A row of the transcript."""

    id: int
    conversation: str
    role: str  # "user" | "assistant"
    content: str
    state: str
    created_at: float
    platform: str = ""
    platform_message_id: str | None = None
    user_row_id: int | None = None  # assistant rows: the user row they answer
    failure: str | None = None  # assistant rows: the failure class when this is an error reply
    reply_target: str = ""
    # assistant rows: the model's token counts for the answer (None: not reported, or older)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # A tool step (SPEC 15): an assistant row (state "step") carries the calls the model asked
    # for (JSON: [{"id", "name", "arguments"}]); a "tool" row is one call, its content the
    # result once finished.
    tool_calls: str | None = None
    call_id: str | None = None
    tool: str | None = None
    sender: str | None = None  # user rows: the platform's id of who sent it ("": a peer)
    attachments: tuple[AttachmentRef, ...] = ()  # user rows: in the order they were sent

    @property
    def shown(self) -> str:
        """The row's text as people are shown it (``botmux sessions show``, the transcript
        route, the console): what was written, then each voice note's transcript, marked as
        one (SPEC 9: the transcript is kept on the row's attachment reference)."""
        heard = [
            f"{VOICE_TRANSCRIPT} {ref.text}"
            for ref in self.attachments
            if ref.kind == "audio" and ref.text is not None
        ]
        return "\n".join([self.content, *heard] if self.content else heard)


@dataclass(frozen=True, slots=True)
class RowPage:
    """One page of a transcript (the transcript route): rows oldest first; ``more``: older
    rows exist before the first."""

    rows: list[StoredMessage]
    more: bool


@dataclass(frozen=True, slots=True)
class TaskRows:
    """One page of A2A tasks: their user rows, newest first; the rows of their turns that say
    how each ended or what it asks (replies, tool steps and calls), oldest first; how many
    tasks match in all; ``more``: older tasks exist after the page."""

    tasks: list[StoredMessage]
    related: list[StoredMessage]
    total: int
    more: bool


@dataclass(frozen=True, slots=True)
class Admission:
    """The outcome of admitting an Inbound: the stored user row, and whether it was new.

    ``local`` is False when another node holds the conversation's lease (several nodes on
    PostgreSQL): that node was notified in the admission's transaction and runs the turn.
    """

    row: StoredMessage
    duplicate: bool
    local: bool = True


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of the model's context (system, user or assistant).

    ``images``: sent beside the text as ``image_url`` parts to a model that sees images (a
    data URL or an https URL each); a reference ``sha256:<hex>:<content type>`` is one the
    turn has not resolved (an older turn's image): it is never sent (SPEC 9)."""

    role: str
    content: str
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    """The model's token counts for one answer, as it reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ReplyDelta:
    """A piece of the answer as the model wrote it. ``attempt`` numbers the model calls of
    the turn (from 1): the pieces of one attempt, joined, are its text so far."""

    text: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """The model call that was streaming the answer failed (``reason``: its failure class):
    the text of that attempt is void; the policy may try again, and a new attempt's pieces
    start from nothing. The turn's end is its outcome, delivered as ever."""

    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class ToolActivity:
    """A tool call of the turn changed state (SPEC 15's progress): ``started``, ``finished``
    (``error``: its result is an error), ``awaiting`` a person's yes, or ``denied``."""

    call_id: str
    tool: str
    state: str
    error: bool = False


#: What a streaming turn hands to whoever shows its answer while the model writes it.
StreamEvent = ReplyDelta | AttemptFailed | ToolActivity

#: What became of a person's answer to a tool call's approval (SPEC 15, ``Intake.decide``).
ApprovalVerdict = Literal["approved", "denied", "not_allowed", "decided", "unknown"]
#: What the person who answered is told, by verdict.
APPROVAL_ANSWERS: dict[ApprovalVerdict, str] = {
    "approved": "Approved.",
    "denied": "Denied.",
    "not_allowed": "Only the person whose message started this, or an approver, can answer.",
    "decided": "This was answered already.",
    "unknown": "This request is no longer known.",
}


@dataclass(frozen=True, slots=True)
class Decided:
    """What became of a person's answer to an approval (``Intake.decide``): the verdict a
    platform acts on (a status, an edited message), and what the person is told."""

    verdict: ApprovalVerdict

    @property
    def text(self) -> str:
        return APPROVAL_ANSWERS[self.verdict]

    @property
    def taken(self) -> bool:
        """The answer decided the call (approved or denied)."""
        return self.verdict in ("approved", "denied")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a turn may offer it to the model (SPEC 15). ``name`` is the model's name
    for it (``<server>__<tool>``, shortened with a hash past the 64 characters providers
    accept); ``server`` and ``tool`` are where it comes from. ``read_only`` and
    ``idempotent`` are the server's annotations (``readOnlyHint``, ``idempotentHint``): a call
    left ``started`` by a crash runs again only when one of them holds. ``approval``: whether
    a call waits for a person's yes (the server's ``approval`` setting and the annotations)."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # a JSON Schema object
    server: str
    tool: str
    read_only: bool = False
    idempotent: bool = False
    approval: bool = False

    @property
    def replayable(self) -> bool:
        """Whether a call cut off mid-run (outcome unknown) may simply run again."""
        return self.read_only or self.idempotent


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool call gave the model: text (a tool's error, its timeout or its server being
    down are outcomes too, with ``is_error``: never a failed turn), and images for vision
    models."""

    text: str
    is_error: bool = False
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolServerStatus:
    """An MCP server as ``/status``, ``/readyz``'s detail and the console show it."""

    name: str
    state: str  # "starting" | "up" | "down"
    tools: int  # offered now
    detail: str = ""  # why it is down, or what it is
    names: tuple[str, ...] = ()  # the tools offered now, by the model's names for them


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a model asked for in a tool step: its id (the model's), the tool's name as
    the model knows it (``<server>__<tool>``) and the arguments (the model's JSON text)."""

    id: str
    name: str
    arguments: str


class CallState(StrEnum):
    """A tool call's stored state (SPEC 15): waiting for a yes, decided, running, done."""

    AWAITING = "awaiting"
    APPROVED = "approved"
    DENIED = "denied"
    STARTED = "started"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class StoredCall:
    """A tool call as stored: its row, state and (once finished) result; for an approval,
    when it was asked (epoch seconds) and who decided."""

    row_id: int
    call_id: str
    tool: str
    arguments: str
    state: str
    result: str = ""
    is_error: bool = False
    requested_at: float | None = None
    decided_by: str | None = None


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A model's tool step as stored before any of its calls ran: the text it wrote beside
    them, the calls, and what is stored of each call so far (by call id)."""

    row_id: int
    content: str
    calls: tuple[ToolCall, ...]
    model: str = ""
    stored: tuple[StoredCall, ...] = ()

    def call(self, call_id: str) -> StoredCall | None:
        return next((c for c in self.stored if c.call_id == call_id), None)


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified failure: the class of SPEC section 4 and the facts that go with it."""

    reason: str
    retryable: bool
    status: int = 0
    retry_after: float | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a model turn produced: a reply, or a failure (with the honest reply text)."""

    reply: str
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    failure: Failure | None = None
    fell_back: bool = False
    # Part of the failed attempt reached a viewer who cannot be shown a correction (a peer
    # client's stream): the turn is not re-run (SPEC 8).
    shown: bool = False


@dataclass(frozen=True, slots=True)
class OutboxChunk:
    """One piece of a reply, queued for delivery on its platform."""

    id: int
    conversation: str
    platform: str
    message_id: int  # the assistant row
    user_row_id: int
    seq: int
    text: str
    created_at: float
    reply_target: str = ""
    state: str = ChunkState.PENDING


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """A finished turn, handed to the platform that must deliver it."""

    conversation: str
    user_row_id: int
    reply: str
    failure: Failure | None
    chunks: tuple[OutboxChunk, ...]
    usage: Usage = field(default_factory=Usage)
    # A merged turn (SPEC 10): the earlier rows it answered too (``user_row_id`` is the last).
    also: tuple[int, ...] = ()
    # An interrupted turn (queue mode "interrupt"): nothing to send, its preview goes, and its
    # rows stay pending for the next turn (nobody waiting learns anything from this outcome).
    # Also a turn whose rows were settled elsewhere while it ran (``TurnSettled``).
    interrupted: bool = False

    @property
    def rows(self) -> tuple[int, ...]:
        """Every user row this outcome settles, oldest first."""
        return (*self.also, self.user_row_id)


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    key: str
    platform: str
    created_at: float
    updated_at: float
    messages: int
    pending: int


@dataclass(frozen=True, slots=True)
class ConversationListing:
    """A conversation as the operator console lists it: its activity, its pending rows and
    its newest failure reply (None: none)."""

    key: str
    platform: str
    created_at: float
    updated_at: float
    messages: int
    pending: int
    last_failure: str | None
    last_failure_at: float | None


@dataclass(frozen=True, slots=True)
class PairingCode:
    """A DM pairing request waiting for an operator (``botmux pairing approve``)."""

    platform: str
    code: str
    user_id: str
    label: str
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Backlog:
    """What waits, read before admitting a message: the conversation's pending rows and
    the whole store's (each counted up to the limit asked, so the count stays cheap), and
    whether the message is stored already (a redelivery is a duplicate, never refused)."""

    conversation: int
    total: int
    stored: bool


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """The model's summary of a conversation's rows that left the context window (SPEC 11,
    ``[agent] compaction = "summary"``): it covers every history row up to ``through``."""

    conversation: str
    content: str
    through: int  # the id of the newest row folded into it
    updated_at: float


# -- scheduled messages (SPEC 16) -----------------------------------------------------------

#: A firing's platform message id is ``schedule:<id>:<due time, UTC, RFC 3339>``.
SCHEDULE_PREFIX = "schedule:"
#: The ``sender`` of a firing's user row: a ``prompt`` is a model turn, a ``text`` is sent as
#: it is, with no model call.
SCHEDULED_PROMPT = "schedule:prompt"
SCHEDULED_TEXT = "schedule:text"


def firing_id(schedule: str, due: str) -> str:
    """The platform message id of ``schedule``'s firing at ``due`` (its RFC 3339 name)."""
    return f"{SCHEDULE_PREFIX}{schedule}:{due}"


def schedule_of(platform_message_id: str | None) -> str | None:
    """The schedule a row's firing belongs to (None: the row is not a firing)."""
    found = _FIRING.match(platform_message_id or "")
    return found.group(1) if found else None


_FIRING = re.compile(r"^schedule:(.+):\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A scheduled message as stored (SPEC 16): from the config (``origin`` ``"config"``,
    ``id`` its name) or made by a conversation (``"conversation"``: the agent's tool).

    ``kind``/``spec``/``timezone``: when it is due (``gateway.schedule_times.When``);
    ``action`` ``"prompt"`` (a model turn) or ``"text"`` (sent as is) with its ``body``.
    ``version`` grows when the definition changes; ``first_seen`` is when this version was
    first stored (a cron's or an interval's first due time is after it); ``cursor`` is the
    latest due time fired or skipped (epoch seconds; None: none yet)."""

    id: str
    conversation: str
    kind: str  # "cron" | "every" | "at"
    spec: str
    action: str  # "prompt" | "text"
    body: str
    timezone: str = "UTC"
    catch_up: str = "latest"  # "latest" | "skip"
    enabled: bool = True
    origin: str = "conversation"  # "config" | "conversation"
    created_by: str = ""
    version: int = 1
    first_seen: float = 0.0
    cursor: float | None = None

    def defines_same(self, other: Schedule) -> bool:
        """Whether ``other`` is the same schedule as far as its firings go."""
        keys = ("conversation", "kind", "spec", "timezone", "action", "body", "catch_up")
        same = all(getattr(self, k) == getattr(other, k) for k in keys)
        return same and self.enabled == other.enabled


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """What a schedule did, as ``botmux schedules list``, ``/schedules``, the console and the
    admin API show it: its last firing (due time, user row, when it was admitted), that
    firing's answer and delivery (when, and the platform's id of the first message), the last
    failure, the due times missed, and the next due time (computed by the reader)."""

    schedule: Schedule
    next_due: float | None = None
    last_due: float | None = None
    last_row: int | None = None
    last_fired_at: float | None = None
    missed: int = 0
    row_state: str | None = None  # the last firing's user row: pending, answered, ...
    answer_failure: str | None = None  # its answer's failure class
    chunks: int = 0
    delivered: int = 0
    undeliverable: int = 0  # chunks the platform refused for good, or expired
    delivered_at: float | None = None
    delivered_id: str | None = None  # the platform's id of the first message delivered
    last_failure: str | None = None
    last_failure_at: float | None = None

    @property
    def delivery(self) -> str:
        """The last firing's delivery, in a word: ``never fired``, ``waiting`` (no answer
        yet), ``delivering``, ``delivered``, ``not delivered`` (fired and never delivered),
        ``cancelled``."""
        if self.last_row is None:
            return "never fired"
        if self.row_state == "pending":
            return "waiting"
        if self.row_state == "cancelled":
            return "cancelled"
        if self.undeliverable:
            return "not delivered"
        if self.row_state is None:
            return "not delivered"  # the row is gone (the conversation was deleted)
        if self.chunks and self.delivered >= self.chunks:
            return "delivered"
        return "delivering"
