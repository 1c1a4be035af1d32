"""What a turn's tool loop reports (SPEC 15): one frozen class per event, as in
``gateway.events`` (which unites them with the others into ``Event``). A leaf module: it
imports nothing of ours.

Each event marks a step of the durable tool loop, so the failpoints can crash the process at
each (``gateway.failpoints``): after the model chose its calls and before the step is stored,
after it is stored, after a call is started, after it finished, while an approval is
awaited, after the decision is stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


@dataclass(frozen=True, slots=True)
class ToolStepChosen:
    """The model answered with tool calls; the step is not stored yet."""

    name: ClassVar[str] = "tool_step_chosen"
    level: ClassVar[int] = DEBUG
    conversation: str
    turn: int
    step: int  # the step's number in the turn, from 1
    calls: int


@dataclass(frozen=True, slots=True)
class ToolStepStored:
    """A tool step was committed before any of its calls ran."""

    name: ClassVar[str] = "tool_step_stored"
    level: ClassVar[int] = DEBUG
    conversation: str
    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A call was committed ``started`` and is about to run (``replayed``: a re-run of one a
    crash left started, allowed because its tool is read-only or idempotent)."""

    name: ClassVar[str] = "tool_call_started"
    level: ClassVar[int] = DEBUG
    conversation: str
    turn: int
    call_id: str
    tool: str
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A call's result was committed: ``ok``, ``error`` (the tool's, a timeout, a server
    down), ``unknown`` (a crash cut it off and its tool may not run twice), ``denied``."""

    name: ClassVar[str] = "tool_call_finished"
    level: ClassVar[int] = INFO
    conversation: str
    turn: int
    call_id: str
    tool: str
    outcome: Literal["ok", "error", "unknown", "denied"]


@dataclass(frozen=True, slots=True)
class ApprovalAsked:
    """A call waits for a person's yes; the request was committed and shown."""

    name: ClassVar[str] = "approval_asked"
    level: ClassVar[int] = INFO
    conversation: str
    turn: int
    call_id: str
    tool: str


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """An approval was answered and the answer committed (``timeout``: nobody answered in
    ``[tools] approval_timeout_s``, a denial). ``by``: the platform and user who decided."""

    name: ClassVar[str] = "approval_decided"
    level: ClassVar[int] = INFO
    conversation: str
    call_id: str
    tool: str
    decision: Literal["approved", "denied", "timeout"]
    by: str


@dataclass(frozen=True, slots=True)
class ApprovalRefused:
    """Someone who may not decide an approval clicked it (not the turn's user, not an
    approver), or decided one already decided: told so, nothing stored."""

    name: ClassVar[str] = "approval_refused"
    level: ClassVar[int] = INFO
    by: str
    reason: Literal["not_allowed", "decided", "unknown"]


@dataclass(frozen=True, slots=True)
class ToolLoopStopped:
    """A turn's tool loop stopped before the model answered: ``steps`` (max_tool_steps),
    ``time`` (max_turn_s) or ``repeat`` (the same call again and again)."""

    name: ClassVar[str] = "tool_loop_stopped"
    level: ClassVar[int] = WARNING
    conversation: str
    turn: int
    reason: Literal["steps", "time", "repeat"]


ToolEvent = (
    ToolStepChosen
    | ToolStepStored
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalAsked
    | ApprovalDecided
    | ApprovalRefused
    | ToolLoopStopped
)
