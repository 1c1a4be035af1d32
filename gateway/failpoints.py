"""Failpoints: named places in the turn lifecycle where a test can crash or freeze the process.

A testing aid, nothing more. Armed only by the environment variable ``BOTMUX_FAILPOINT``,
read once when ``botmux run`` starts, for example::

    BOTMUX_FAILPOINT=after_answer_commit:kill        # SIGKILL at the first pass
    BOTMUX_FAILPOINT=between_chunks:kill@2           # at the second pass
    BOTMUX_FAILPOINT=after_model_call:stop           # SIGSTOP: frozen until SIGCONT

Each failpoint is an event the runtime already reports to its observer (the one sink that
logs and counts; the events are ``gateway.events``), so no call site carries test code, and
unarmed they cost nothing (the observer skips them); :func:`place` maps an event to the name
a failpoint can be armed at.

| failpoint | the event | where in SPEC section 3 |
|---|---|---|
| ``after_admission`` | ``admitted`` | user row committed, turn not yet queued |
| ``before_model_call`` | ``turn_started`` | the turn took its row, no model call yet |
| ``after_model_call`` | ``model_call`` (ok) | the model answered, nothing stored yet |
| ``after_answer_commit`` | ``answer_committed`` | reply and outbox committed, nothing sent |
| ``after_send_before_record`` | ``chunk_sent`` | the platform took a chunk, not yet recorded |
| ``between_chunks`` | ``chunk_recorded`` | one chunk recorded delivered, the next not sent |
| ``after_attachment_fetch`` | ``attachment_fetched`` | a file's bytes stored, no model call |
| ``before_step_stored`` | ``tool_step_chosen`` | the model chose tool calls, not stored |
| ``after_step_stored`` | ``tool_step_stored`` | a tool step committed, no call run |
| ``after_call_started`` | ``tool_call_started`` | a call committed started, not run |
| ``after_call_finished`` | ``tool_call_finished`` | a call's result committed |
| ``awaiting_approval`` | ``approval_asked`` | an approval asked and committed |
| ``after_approval_stored`` | ``approval_decided`` | the decision committed, the call not run |
| ``before_schedule_admission`` | ``schedule_due`` | a schedule is due, its firing not admitted |
| ``after_schedule_admission`` | ``schedule_fired`` (fired) | a firing's row committed, no turn |
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import assert_never

from gateway.errors import ConfigError
from gateway.events import (
    AdminActed,
    AnswerCommitted,
    AttachmentFetched,
    AttachmentHandled,
    ChunkRecorded,
    ChunkSent,
    ConfigReloaded,
    ContextCompacted,
    DuplicateIgnored,
    Event,
    FirstTokenShown,
    HeartbeatFailed,
    LeaseWasLost,
    MessageAdmitted,
    MessageRefused,
    ModelCalled,
    ModelTokensUsed,
    PolicyDecided,
    SelfFenced,
    SendFailed,
    SendRetried,
    StoreCommitted,
    TakeoverDone,
    TurnAbandoned,
    TurnCancelled,
    TurnCompleted,
    TurnFenced,
    TurnInterrupted,
    TurnMerged,
    TurnRerun,
    TurnStarted,
)
from gateway.events_mcp import ToolCalled, ToolServerChanged, ToolsListed
from gateway.events_platforms import (
    DiscordBackfilled,
    SlackAdmissionDeferred,
    SlackConnectionChanged,
    SlackRequestRefused,
    SlackStrangerIgnored,
    TelegramAdmissionDeferred,
    TelegramNoticeDropped,
    TelegramNoticeFailed,
    TelegramPlainFallback,
    TelegramPollFailed,
    TelegramStrangerIgnored,
    TelegramWebhookRefused,
)
from gateway.events_schedules import (
    ScheduleCaughtUp,
    ScheduleChanged,
    ScheduleDue,
    ScheduleFailed,
    ScheduleFired,
    ScheduleMissed,
    SchedulesFull,
    SchedulesSynced,
)
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

EVENTS = {
    "after_admission": "admitted",
    "before_model_call": "turn_started",
    "after_model_call": "model_call",
    "after_answer_commit": "answer_committed",
    "after_send_before_record": "chunk_sent",
    "between_chunks": "chunk_recorded",
    "after_attachment_fetch": "attachment_fetched",
    "before_step_stored": "tool_step_chosen",
    "after_step_stored": "tool_step_stored",
    "after_call_started": "tool_call_started",
    "after_call_finished": "tool_call_finished",
    "awaiting_approval": "approval_asked",
    "after_approval_stored": "approval_decided",
    "before_schedule_admission": "schedule_due",
    "after_schedule_admission": "schedule_fired",
}
ENV = "BOTMUX_FAILPOINT"
_SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


@dataclass(slots=True)
class Failpoints:
    """The armed failpoints, by event name: (failpoint, fire on the n-th pass, action)."""

    armed: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    passes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Failpoints:
        spec = env.get(ENV, "").strip()
        armed: dict[str, tuple[str, int, str]] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, action = item.partition(":")
            action, _, nth = action.partition("@")
            if name not in EVENTS or action not in _SIGNALS or (nth and not nth.isdigit()):
                raise ConfigError(
                    ENV,
                    f"{item!r}: expected NAME:ACTION or NAME:ACTION@N, ACTION kill or stop,"
                    f" NAME one of {', '.join(EVENTS)}",
                )
            armed[EVENTS[name]] = (name, int(nth or 1), action)
        return cls(armed)

    def __bool__(self) -> bool:
        return bool(self.armed)

    def passed(self, event: Event) -> None:
        """Called for every observed event; kills or freezes the process at an armed one."""
        name = place(event)
        point = None if name is None else self.armed.get(name)
        if name is None or point is None:
            return
        count = self.passes[name] = self.passes.get(name, 0) + 1
        if count == point[1]:
            sig = _SIGNALS[point[2]]
            os.write(2, f"botmux: failpoint {point[0]} reached: {sig.name}\n".encode())
            os.kill(os.getpid(), sig)


def place(event: Event) -> str | None:
    """The event name a failpoint can be armed at (a value of ``EVENTS``), if this is one."""
    match event:
        case (
            MessageAdmitted()
            | TurnStarted()
            | AnswerCommitted()
            | ChunkSent()
            | ChunkRecorded()
            | AttachmentFetched()
            | ToolStepChosen()
            | ToolStepStored()
            | ToolCallStarted()
            | ToolCallFinished()
            | ApprovalAsked()
            | ApprovalDecided()
            | ScheduleDue()
        ):
            return event.name
        case ScheduleFired(outcome=outcome):
            return event.name if outcome == "fired" else None
        case ModelCalled(outcome=outcome):
            return event.name if outcome == "ok" else None
        case (
            DuplicateIgnored()
            | MessageRefused()
            | TurnRerun()
            | TurnAbandoned()
            | TurnCancelled()
            | TurnInterrupted()
            | TurnMerged()
            | TurnFenced()
            | TurnCompleted()
            | FirstTokenShown()
            | ModelTokensUsed()
            | PolicyDecided()
            | ContextCompacted()
            | SendRetried()
            | SendFailed()
            | StoreCommitted()
            | TakeoverDone()
            | LeaseWasLost()
            | HeartbeatFailed()
            | SelfFenced()
            | TelegramPlainFallback()
            | TelegramPollFailed()
            | TelegramAdmissionDeferred()
            | TelegramStrangerIgnored()
            | TelegramNoticeDropped()
            | TelegramNoticeFailed()
            | TelegramWebhookRefused()
            | DiscordBackfilled()
            | SlackAdmissionDeferred()
            | SlackRequestRefused()
            | SlackStrangerIgnored()
            | SlackConnectionChanged()
            | AttachmentHandled()
            | ConfigReloaded()
            | AdminActed()
            | ApprovalRefused()
            | ToolLoopStopped()
            | ToolServerChanged()
            | ToolsListed()
            | ToolCalled()
            | ScheduleCaughtUp()
            | ScheduleMissed()
            | ScheduleFailed()
            | SchedulesSynced()
            | ScheduleChanged()
            | SchedulesFull()
        ):
            return None
        case _:
            assert_never(event)
