"""Intake (``gateway.ports.Intake``): what platform adapters call to hand work to the runtime.

``admit`` is SPEC section 3's step 2: the user row is committed first, then its turn is
queued, and only then does the adapter acknowledge the platform. A redelivered message is
found by its platform id and queues nothing. Control commands skip the conversation's queue, and
so do deletions, which stop the conversation's turn first. The rest of what adapters need of
the runtime is in small role ports: ``gateway.ledger``, ``access``, ``transcripts``,
``push_configs``.

Before anything is stored, a message is bounded (SPEC section 14): longer than
``max_message_chars`` it is refused (:class:`MessageTooLong`), and past the pending caps too
(:class:`Overloaded`, see :mod:`gateway.backlog`); a redelivery is still a duplicate.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.approvals import Approvals
from gateway.backlog import DEFAULT_CAPS, Caps
from gateway.config import GatewayConfig
from gateway.config_tools import ResolvedProfile
from gateway.errors import ConversationClosed, MailboxFull, MessageTooLong, Overloaded
from gateway.events import DuplicateIgnored, MessageAdmitted, MessageRefused, Observe
from gateway.mailbox import ResetContext, StopTurn
from gateway.messages import (
    COMMANDS,
    Admission,
    Decided,
    Inbound,
    ToolServerStatus,
    command_named,
    platform_of,
)
from gateway.ports import TurnRunner
from gateway.queue import QueuePolicy
from gateway.router import Router
from gateway.schedule_book import ScheduleBook
from gateway.store import (
    AdmitRow,
    DeleteConversation,
    DeleteTurn,
    Message,
    PendingCount,
    ResetConversation,
    Store,
)
from gateway.store.schedules import Fired, FireSchedule

log = logging.getLogger(__name__)

HELP = "\n".join(
    [
        "I'm botmux, a gateway to an AI assistant. Send a message and I'll answer.",
        *(f"/{c.name} - {c.description}" for c in COMMANDS if c.alias_of is None),
    ]
)
STOP_NOT_SENT = "Could not stop the reply: this conversation is busy. Try /stop again shortly."


@dataclass(frozen=True, slots=True)
class IntakeStatistics:
    """What the intake did with the messages handed to it (``GatewayIntake.statistics()``)."""

    admitted: int  # stored and queued
    duplicates: int  # redeliveries: stored already, nothing queued
    refused: int  # too long, or past the pending caps
    refused_conversation: int  # past the conversation's pending cap
    refused_gateway: int  # past the gateway's


class GatewayIntake:
    def __init__(
        self,
        store: Store,
        router: Router,
        runner: TurnRunner,
        *,
        observe: Observe = lambda event: None,
        elsewhere: Callable[[str, str], Awaitable[bool]] | None = None,
        caps: Caps = DEFAULT_CAPS,
        max_message_chars: int = 32_000,
        queues: Mapping[str, QueuePolicy] | None = None,
        live: Callable[[], GatewayConfig] | None = None,  # a reload's limits, read at use
        approvals: Approvals | None = None,  # tool calls' approvals (SPEC 15)
        profile: Callable[[str], ResolvedProfile] | None = None,  # for /status
        tool_status: Callable[[], list[ToolServerStatus]] = list,
        schedules: ScheduleBook | None = None,  # /schedules, /unschedule (SPEC 16)
    ) -> None:
        self._schedules = schedules
        self._approvals = approvals
        self._profile = profile
        self._tool_status = tool_status
        self._queues = queues or {}  # by platform, for /status
        # Several nodes: send a control command to the node running the conversation (True
        # when another node holds it and was told).
        self._elsewhere = elsewhere
        self._store = store
        self._router = router
        self._runner = runner
        self._observe = observe
        self._accepting = True
        fixed = GatewayConfig(
            max_pending_per_conversation=caps.per_conversation,
            max_pending_total=caps.total,
            max_message_chars=max_message_chars,
        )
        self._live = live or (lambda: fixed)
        self._admitted = self._duplicates = self._refusals = 0
        self._refused_conversation = self._refused_gateway = 0

    def _caps(self) -> Caps:
        g = self._live()
        return Caps(per_conversation=g.max_pending_per_conversation, total=g.max_pending_total)

    def __repr__(self) -> str:
        return f"<GatewayIntake accepting={self._accepting} {self.statistics()}>"

    def statistics(self) -> IntakeStatistics:
        return IntakeStatistics(
            admitted=self._admitted,
            duplicates=self._duplicates,
            refused=self._refusals,
            refused_conversation=self._refused_conversation,
            refused_gateway=self._refused_gateway,
        )

    @property
    def accepting(self) -> bool:
        return self._accepting

    def stop_accepting(self) -> None:
        self._accepting = False

    async def admit(self, inbound: Inbound, blobs: Mapping[str, bytes] | None = None) -> Admission:
        if not self._accepting:
            raise ConversationClosed("botmux is shutting down")
        max_chars = self._live().max_message_chars
        if len(inbound.text) > max_chars:
            self._refused(inbound, "too_long")
            raise MessageTooLong(
                f"the message has {len(inbound.text)} characters, more than"
                f" max_message_chars = {max_chars}",
                limit=max_chars,
                length=len(inbound.text),
            )
        try:
            # The caps are checked in the admission's own transaction (gateway.backlog).
            admit = AdmitRow(inbound, tuple((blobs or {}).items()), self._caps())
            admission = await self._store.submit(admit)
        except Overloaded as exc:
            scope: Literal["conversation", "gateway"] = (
                "gateway" if exc.scope == "gateway" else "conversation"
            )
            if scope == "gateway":
                self._refused_gateway += 1
            else:
                self._refused_conversation += 1
            self._refused(inbound, "overloaded", scope=scope)
            raise
        facts = (inbound.conversation, inbound.platform, admission.row.id)
        if admission.duplicate:
            self._duplicates += 1
            self._observe(DuplicateIgnored(*facts))
        else:
            self._admitted += 1
            self._observe(MessageAdmitted(*facts))
            if admission.local:  # else the node holding the conversation was notified
                await self._router.deliver(admission.row)
        return admission

    async def fire(self, write: FireSchedule) -> Fired:
        """A schedule's firing (SPEC 16): admitted with its cursor in one transaction
        (``FireSchedule``), then queued like any admission; a second firing of the same due
        time finds the row and queues nothing. No caps: a schedule's rate is bounded where it
        is made."""
        if not self._accepting:
            raise ConversationClosed("botmux is shutting down")
        fired = await self._store.submit(write)
        admission = fired.admission
        if admission is None:
            return fired
        facts = (write.inbound.conversation, write.inbound.platform, admission.row.id)
        if admission.duplicate:
            self._duplicates += 1
            self._observe(DuplicateIgnored(*facts))
        else:
            self._admitted += 1
            self._observe(MessageAdmitted(*facts))
            if admission.local:
                await self._router.deliver(admission.row)
        return fired

    def _refused(
        self,
        inbound: Inbound,
        reason: Literal["overloaded", "too_long"],
        *,
        scope: Literal["conversation", "gateway", ""] = "",
    ) -> None:
        self._refusals += 1
        self._observe(MessageRefused(inbound.conversation, inbound.platform, reason, scope))

    async def command(self, platform: str, conversation: str, name: str, args: str = "") -> str:
        """The answer to a control command; ``args``: what followed its name."""
        known = command_named(name)
        match known.name if known is not None else name:
            case "help":
                return HELP
            case "schedules" | "unschedule" if self._schedules is None:
                return "Scheduled messages are not available here."
            case "schedules":
                assert self._schedules is not None
                return await self._schedules.listing(conversation)
            case "unschedule":
                assert self._schedules is not None
                if not args.strip():
                    return "Which one? /unschedule ID (/schedules lists them)."
                by = f"{platform}:command"
                return await self._schedules.remove(
                    args.split()[0], conversation=conversation, by=by
                )
            case "status":
                return await self._status(conversation)
            case "new":
                await self._store.submit(ResetConversation(conversation))
                if self._router.get(conversation) is not None:
                    self._send_control(conversation, ResetContext())
                elif self._elsewhere is not None:  # its node drops its cached history
                    await self._elsewhere(conversation, "new")
                return "Started a fresh context: earlier messages no longer count."
            case "stop":
                actor = self._router.get(conversation)
                stats = actor.statistics() if actor is not None else None
                if stats is not None and (stats.running is not None or stats.collecting):
                    if self._send_control(conversation, StopTurn()):
                        return "Stopping the current reply."
                    return STOP_NOT_SENT  # the truth: nothing was told to stop
                if (
                    actor is None
                    and self._elsewhere is not None
                    and await self._store.read(PendingCount(conversation)) > 0
                    and await self._elsewhere(conversation, "stop")
                ):
                    return "Stopping the current reply."
                return "Nothing is running."
            case _:
                return f"Unknown command /{name}. " + HELP

    def _send_control(self, conversation: str, message: StopTurn | ResetContext) -> bool:
        """Whether the conversation's actor got ``message``."""
        try:
            return self._router.send_nowait(conversation, message)
        except MailboxFull:
            log.warning(
                "control message refused: mailbox full", extra={"conversation": conversation}
            )
            return False

    async def _status(self, conversation: str) -> str:
        status: dict[str, Any] = self._runner.status()
        actor = self._router.get(conversation)
        stats = actor.statistics() if actor is not None else None
        # Evicted, or running on another node: the store knows what is queued.
        queued = stats.queued if stats else await self._store.read(PendingCount(conversation))
        lines = [f"Model: {status.get('model') or 'not configured'}"]
        for line in status.get("lines", []):
            lines.append(str(line))
        lines.append(f"Queued turns here: {queued}")
        policy = (
            self._queues.get(conversation)
            or self._queues.get(platform_of(conversation))
            or QueuePolicy()
        )
        lines.append(f"Queue mode: {policy.mode} ({queued} message(s) waiting or running)")
        lines.extend(self._tool_lines(conversation))
        lines.append(_context_line(status.get("context", {}).get(conversation)))
        if stats is not None and stats.last_fell_back:
            lines.append(f"The last turn fell back to {stats.last_model}.")
        return "\n".join(lines)

    def _tool_lines(self, conversation: str) -> list[str]:
        """The conversation's profile and its tools, and the tool servers' states (SPEC 15)."""
        if self._profile is None:
            return []
        profile = self._profile(conversation)
        name = profile.name or "default ([agent])"
        tools = ", ".join(profile.tools) if profile.tools else "none"
        lines = [f"Profile: {name}; tools: {tools}"]
        for server in self._tool_status():
            detail = f" ({server.detail})" if server.detail and server.state != "up" else ""
            lines.append(
                f"Tool server {server.name}: {server.state}, {server.tools} tool(s){detail}"
            )
        return lines

    async def decide(
        self, platform: str, call_row: int, user_id: str, approve: bool, *, owner: bool = False
    ) -> Decided:
        """A person's answer to a tool call's approval (SPEC 15): what became of it.
        ``owner``: the caller proved it owns the conversation (a peer token's session)."""
        if self._approvals is None:  # no tools here: no call can be waiting
            return Decided("unknown")
        return await self._approvals.decide(platform, call_row, user_id, approve, owner=owner)

    async def delete(self, conversation: str, *, by: str) -> int | None:
        """Remove a conversation, its rows and its outbox (``DELETE /api/sessions/{id}``):
        the rows removed, or None when there was no such conversation. A turn running here
        is stopped and the actor's cached history dropped, so nothing of it is sent again."""
        if self._router.get(conversation) is not None:
            self._send_control(conversation, StopTurn())
            self._send_control(conversation, ResetContext())
        removed = await self._store.submit(DeleteConversation(conversation))
        if removed is not None:
            log.warning(
                "conversation deleted",
                extra={"conversation": conversation, "rows": removed, "by": by},
            )
        return removed

    async def delete_turn(self, user_row_id: int, *, by: str) -> bool | None:
        """Remove one settled turn (``DELETE /v1/responses/{id}``), keeping the rest of its
        conversation: True; False while it is pending; None when there is no such row. The
        actor reads its history from the store again, so the model no longer sees it."""
        row = await self._store.read(Message(user_row_id))
        deleted = await self._store.submit(DeleteTurn(user_row_id))
        if deleted and row is not None:
            if self._router.get(row.conversation) is not None:
                self._send_control(row.conversation, ResetContext(reload=True))
            log.warning(
                "turn deleted",
                extra={"conversation": row.conversation, "turn": user_row_id, "by": by},
            )
        return deleted


def _context_line(used: tuple[int, int] | None) -> str:
    """The context the conversation's last request used (SPEC 11), as the agent estimated it."""
    if used is None:
        return "Context: no request yet"
    tokens, window = used
    if not window:
        return f"Context: ~{tokens} tokens in the last request (no token bound)"
    share = 100 * tokens // window
    return f"Context: ~{tokens} of {window} prompt tokens in the last request ({share}%)"
