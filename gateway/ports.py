"""The seams between the runtime and its parts, as structural protocols.

Like ``messages`` and ``errors``, this module imports nothing of ours but those two, so
platforms and the agent can implement these protocols without importing the runtime, and the
runtime can use them without importing any platform or the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from gateway.messages import (
    Admission,
    AttachmentRef,
    ChatMessage,
    Decided,
    Failure,
    Image,
    Inbound,
    RowPage,
    StoredCall,
    StoredMessage,
    StoredStep,
    StreamEvent,
    TaskRows,
    ToolCall,
    ToolOutcome,
    ToolServerStatus,
    ToolSpec,
    TurnOutcome,
    TurnResult,
)


class ReplyStream(Protocol):
    """Where a turn's answer goes while the model writes it (SPEC 8): a peer client's
    stream, later a chat preview. The final answer still arrives as the turn's outcome
    (:meth:`Outlet.deliver`); what a stream shows is ephemeral."""

    def put(self, event: StreamEvent) -> None:
        """The next piece (:class:`~gateway.messages.ReplyDelta`) or the end of an attempt
        (:class:`~gateway.messages.AttemptFailed`). Never blocks: a slow viewer must not hold
        up the model, so whoever shows the text buffers it or skips ahead."""
        ...

    @property
    def binding(self) -> bool:
        """Whether text of the current attempt reached a viewer who cannot be shown a
        correction (a peer client): a failure of the attempt then ends the turn as failed,
        with no retry or fallback. A preview that can be replaced is never binding."""
        ...


@dataclass(frozen=True, slots=True)
class Watch:
    """Someone waits for a turn right now (a peer request): where its growing answer goes,
    if anywhere, and what the request asked of the model. Not durable: a turn resumed after
    a restart has no watcher, and runs without streaming."""

    stream: ReplyStream | None = None
    response_format: Mapping[str, Any] | None = None
    #: An extra system instruction for this turn only (``/v1/responses`` ``instructions``).
    instructions: str | None = None


class Transcriber(Protocol):
    """Voice and audio to text (``[transcription]``, SPEC 9), under the failure policy."""

    @property
    def configured(self) -> bool:
        """Whether a transcription endpoint is configured at all."""
        ...

    async def transcribe(
        self, conversation: str, ref: AttachmentRef, data: bytes, *, turn: int = 0
    ) -> str | Failure:
        """The transcript of ``data``, or the class of the failure for good."""
        ...


class TurnRunner(Protocol):
    """Runs one model turn (the agent, under the failure policy)."""

    async def run_turn(
        self,
        conversation: str,
        history: Sequence[ChatMessage],
        text: str,
        *,
        turn: int = 0,
        before_call: Callable[[], None] | None = None,
        watch: Watch | None = None,
        images: Sequence[Image] = (),
        tools: TurnTools | None = None,
    ) -> TurnResult:
        """``turn`` is the user row's id, for the log lines of the turn's decisions.
        ``images``: image URLs (data or https) sent beside ``text`` to models that see them.
        ``tools``: the turn's part in the tool loop (SPEC 15): its steps' row, its asker.
        ``before_call`` runs right before each model request leaves, with no await between
        it and the request; it may cancel the turn (the request is then never sent).
        ``watch``: who waits for the answer now; with a stream, the model streams into it."""
        ...

    def status(self) -> dict[str, object]:
        """What ``/status`` shows about models and credentials."""
        ...


class Outlet(Protocol):
    """A platform's outgoing side: how replies are cut, delivered and announced."""

    platform: str

    def render(self, text: str) -> list[str]:
        """The reply as the chunks that will be sent, in order, each within the platform's limit."""
        ...

    async def deliver(self, outcome: TurnOutcome) -> None:
        """Queue the outcome's chunks for delivery (recorded through ``Ledger.delivered``)."""
        ...

    def delivered_as(self, row: StoredMessage) -> str | None:
        """The platform message id the answer to ``row`` is stored delivered as, in the
        answer's own commit, when handing the outcome to ``deliver`` is its delivery (the
        peer API: the waiting request's response); None: ``deliver`` sends the chunks and
        records each."""
        ...

    def activity(self, conversation: str) -> AbstractAsyncContextManager[None]:
        """Show that a turn is running (typing) for as long as the context is open."""
        ...

    def watching(self, row: StoredMessage) -> Watch | None:
        """Who waits for the turn of ``row`` now, asked as the turn starts; None: nobody
        beyond the final delivery (the chat platforms, until they show previews)."""
        ...

    def asker(self, row: StoredMessage) -> Asker | None:
        """Who can be asked to approve a tool call in the turn of ``row`` (SPEC 15), and how;
        None: nobody (tools that need an approval are not offered to that turn)."""
        ...

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        """The bytes of ``ref`` (SPEC 9), never holding more than ``limit`` bytes in memory:
        raises :class:`~gateway.errors.AttachmentTooLarge` past it; other failures raise the
        GatewayError subclasses of the platform's translation table (classified by
        ``policy.classify`` like a failed send)."""
        ...


class PlatformAdapter(Outlet, Protocol):
    """A chat platform's actor: its outlet, built first (the session actors deliver through
    it), and its incoming side, which serves an :class:`Intake` once started.

    Built by the composition root as ``Adapter(config_section, ledger=..., ...)`` with the
    role ports it uses, and started with ``await task_group.start(adapter.run, intake)``.
    """

    async def run(
        self, intake: Intake, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED
    ) -> None:
        """Connect and serve ``intake`` until cancelled; ``task_status.started()`` once
        connected."""
        ...

    @property
    def connected(self) -> bool:
        """For ``/readyz``: the platform connection is up."""
        ...

    async def wait_delivered(self) -> None:
        """Until every queued reply chunk was sent (or given up): the drain waits on it."""
        ...

    def statistics(self) -> object:
        """Its counters and state now: a frozen dataclass (STYLE), holding no secret; the
        admin API's diagnostics show it."""
        ...


class Leases(Protocol):
    """Named leases shared by the nodes of a cluster (PostgreSQL store): one holder at a time.

    A platform adapter uses them for what only one node may do: poll Telegram's getUpdates
    (``telegram:poller``), run a Discord shard (``discord:shard:<n>``). On a single node the
    adapter is given none and does it all. A lease is kept by calling ``hold`` again every
    ``period_s``; it is lost when its node stops renewing (dies, freezes, loses the database)
    for ``lease_s``, and another node's ``hold`` then takes it.
    """

    @property
    def period_s(self) -> float:
        """How often to call ``hold`` (the cluster's heartbeat)."""
        ...

    async def hold(self, name: str) -> bool:
        """Take ``name`` if no live node holds it, or keep it: True while this node holds it."""
        ...

    def held(self, name: str) -> bool:
        """Whether this node held ``name`` at its last heartbeat (no I/O)."""
        ...

    async def release(self, name: str) -> None:
        """Give ``name`` up now (a clean stop), so another node takes it at once."""
        ...

    @property
    def node(self) -> str:
        """This node's name."""
        ...

    async def live_nodes(self) -> list[str]:
        """The names of the nodes alive now (heartbeats fresh), sorted; this one included."""
        ...


class Intake(Protocol):
    """What a platform's incoming side asks of the runtime: admission, control commands and
    deletions (each talks to the conversation's session actor)."""

    @property
    def accepting(self) -> bool:
        """False once draining began: adapters refuse new work (the peer API answers 503)."""
        ...

    async def admit(self, inbound: Inbound, blobs: Mapping[str, bytes] | None = None) -> Admission:
        """Store the message (exactly once) and queue its turn; return the stored row.
        ``blobs``: attachment bytes that came inline, by sha256, stored with the row."""
        ...

    async def command(self, platform: str, conversation: str, name: str, args: str = "") -> str:
        """Run a control command (``help``, ``status``, ``new``, ``stop``, ``schedules``,
        ``unschedule``); ``args``: what followed its name (``/unschedule ID``); its reply."""
        ...

    async def delete(self, conversation: str, *, by: str) -> int | None:
        """Remove the conversation, its rows and outbox (logged, naming ``by``): the rows
        removed, or None when there is no such conversation."""
        ...

    async def delete_turn(self, user_row_id: int, *, by: str) -> bool | None:
        """Remove one settled turn, keeping its conversation's other rows (logged, naming
        ``by``): True; False while it is pending (nothing removed); None: no such row."""
        ...

    async def decide(
        self, platform: str, call_row: int, user_id: str, approve: bool, *, owner: bool = False
    ) -> Decided:
        """A person's answer to a tool call's approval (SPEC 15): what became of it. Only the
        turn's own user or a ``[tools] approvers`` entry may answer; ``owner``: the caller
        proved it owns the conversation (a peer token's session)."""
        ...


class Ledger(Protocol):
    """The delivery ledger: what became of each reply chunk a platform was handed, and the
    preview message of each turn (SPEC 3 step 5, SPEC 8)."""

    async def before_send(self, chunk_id: int) -> None:
        """Call right before handing a chunk to the platform (see unrecorded_sends)."""
        ...

    async def delivered(self, chunk_id: int, platform_message_id: str) -> None: ...

    async def undeliverable(self, chunk_id: int, reason: str) -> None:
        """The platform refused a chunk for good: record it, never resend it."""
        ...

    async def record_preview(self, user_row_id: int, message_id: str) -> None:
        """Record the preview message of a turn before its first edit (SPEC 8), so that after
        a crash the re-run turn edits it into the answer."""
        ...

    async def preview_of(self, user_row_id: int) -> str | None:
        """The recorded preview message of a turn, if any."""
        ...


class Access(Protocol):
    """DM pairing (SPEC 14): whether an unknown user was approved, and their code."""

    async def is_approved(self, platform: str, user_id: str) -> bool:
        """Whether an operator approved this user through DM pairing."""
        ...

    async def request_pairing(self, platform: str, user_id: str, label: str) -> str | None:
        """A pairing code to send to an unknown user, or None: they have one already (it is
        sent once), or too many codes are waiting for an operator."""
        ...


class Recall(Protocol):
    """What a chat adapter knows of its messages through the store, beyond their admission:
    the same on every node and after a restart (Slack, SPEC 17)."""

    async def claim_answer(self, platform: str, message_id: str) -> bool:
        """Claim the answer that is not a turn (a command's, a refusal) to a message: True for
        the first claim (answer it), False when it was claimed already, here or elsewhere."""
        ...

    async def release_answer(self, platform: str, message_id: str) -> None:
        """Give the claim up: the answer could not be given (its command failed in the
        store), so the message's next delivery, on any node, may claim it again."""
        ...

    async def conversation_known(self, conversation: str) -> bool:
        """Whether a turn was admitted in the conversation (it is stored)."""
        ...


class Transcripts(Protocol):
    """Reads of stored turns: what a peer client, an A2A task or a response id reads back."""

    async def message(self, row_id: int) -> StoredMessage | None:
        """One stored row by its id (None: no such row, or deleted)."""
        ...

    async def reply_to(self, user_row_id: int) -> StoredMessage | None:
        """The assistant row that settled a user row (its own, or a merged turn's)."""
        ...

    async def outcome(self, user_row_id: int) -> TurnOutcome | None:
        """How the turn of a user row ended (read from the store); None while it is pending."""
        ...

    async def page(self, conversation: str, limit: int, before: int | None) -> RowPage:
        """The newest ``limit`` rows below row id ``before`` (None: the newest), oldest first."""
        ...

    async def previous_turn(self, conversation: str, row_id: int) -> int | None:
        """The newest user row before ``row_id`` (None: it is the first)."""
        ...

    async def tasks(
        self,
        conversation: str,
        prefix: str,
        limit: int,
        before: int | None,
        states: tuple[str, ...] | None,
    ) -> TaskRows:
        """A page of A2A tasks: user rows whose platform message id starts with ``prefix``,
        newest first, below ``before``, in ``states`` (user row states) when given."""
        ...

    async def attachment(self, conversation: str, sha256: str) -> tuple[str, bytes] | None:
        """(content type, bytes) of one of the conversation's attachments (SPEC 9)."""
        ...


class CallReads(Protocol):
    """Reads of a turn's stored tool steps and calls (SPEC 15): what an approval answered
    through the peer API or an A2A task's question is looked up in."""

    async def steps(self, turn_row_id: int) -> list[StoredStep]:
        """The stored tool steps of the turn that starts with ``turn_row_id`` (SPEC 15), each
        with its calls as stored (an A2A task's question, a call already answered)."""
        ...

    async def tool_row(self, conversation: str, call_id: str) -> StoredMessage | None:
        """The conversation's newest tool row of call ``call_id`` (None: no such call)."""
        ...

    async def awaiting_call(self, conversation: str, call_id: str) -> int | None:
        """The row of the newest call of ``conversation`` with the model's id ``call_id``
        that still awaits an approval (what a peer client's answer names)."""
        ...


class PushConfigs(Protocol):
    """An A2A task's push notification configs (SPEC 12), stored as the adapter's JSON."""

    async def save(self, user_row_id: int, config_id: str, config: str) -> None:
        """Store (or replace) one."""
        ...

    async def configs(self, user_row_id: int) -> list[str]:
        """The task's configs, oldest first."""
        ...

    async def delete(self, user_row_id: int, config_id: str) -> None: ...


class ToolBox(Protocol):
    """The tools the agent may call (SPEC 15): MCP servers' and the built-in ones."""

    def offered(self, patterns: Sequence[str]) -> list[ToolSpec]:
        """The tools available now whose names (``<server>__<tool>``) match one of the
        globs; a server that is down offers none."""
        ...

    def find(self, name: str) -> ToolSpec | None:
        """The tool the model named, if it is available now."""
        ...

    async def started(self) -> None:
        """Returns once no server is on its first try any more (up, or down after it): until
        then a server offers nothing only because it has not answered yet (the gateway has
        just started, or a reload added it)."""
        ...

    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, conversation: str
    ) -> ToolOutcome:
        """Run one call for the turn of ``conversation`` (the built-in tools act on it: the
        scheduling tools, SPEC 16). A tool's own error, its timeout, its server being down or
        dying mid-call are an outcome with ``is_error`` (the model is told), never raised."""
        ...

    def status(self) -> list[ToolServerStatus]:
        """Every configured server's state, for ``/status``, ``/readyz`` and the console."""
        ...


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for a person's yes, as a platform shows it (SPEC 15): the tool and its
    arguments (cut to 500 characters: the arguments approved are the ones stored), and the
    call's row, which a decision names."""

    call_row: int
    call_id: str
    tool: str
    arguments: str
    conversation: str
    timeout_s: float


class Asker(Protocol):
    """Who can be asked for an approval in a turn, and how (buttons in a chat, an event on a
    peer stream, an A2A task's ``input-required``)."""

    async def ask(self, request: ApprovalRequest) -> None:
        """Show the request; the answer comes back through ``Intake.decide``."""
        ...


class StepLedger(Protocol):
    """A turn's durable tool steps (SPEC 15), kept under the turn's first user row: each step
    stored before any of its calls runs, each call started and finished in commits of its
    own, so a re-run replays them."""

    async def steps(self, first_row: StoredMessage) -> list[StoredStep]: ...

    async def record_step(
        self, first_row: StoredMessage, content: str, calls: Sequence[ToolCall], model: str
    ) -> int:
        """The step's row id."""
        ...

    async def open_call(
        self, first_row: StoredMessage, call: ToolCall, *, awaiting: bool
    ) -> StoredCall:
        """The call's row: ``started`` (about to run), or ``awaiting`` a yes (asked now);
        opened once (a replay gets the stored one)."""
        ...

    async def start_call(self, call_row: int) -> None:
        """An approved call is about to run."""
        ...

    async def finish_call(self, call_row: int, result: str, *, is_error: bool) -> None: ...

    async def decision(self, call_row: int, *, deadline: float) -> StoredCall:
        """Wait until an awaiting call is approved or denied, or until ``deadline`` (epoch
        seconds): the call as stored then (still ``awaiting``: nobody answered in time)."""
        ...


@dataclass(frozen=True, slots=True)
class TurnTools:
    """A turn's part in the tool loop: its first user row (its steps hang off it, so a re-run
    of the turn, merged with later rows or not, finds them), and who can be asked for an
    approval now (None: nobody, and tools that need one are not offered)."""

    first_row: StoredMessage
    asker: Asker | None = None
