"""The tool loop (SPEC 15): the model's tool calls run, their results go back to the model,
until it answers, each step durable.

A step the model asks for is stored before any of its calls runs; each call is stored
``started`` before it runs and ``finished`` with its result after, each in its own commit
(``gateway.ports.StepLedger``). A re-run of the turn (a crash, a transient failure re-run by
the session, a fallback, a takeover) replays the stored steps: no stored step calls the model
again, no finished call runs again. A call a crash left ``started`` runs again only when its
tool is annotated read-only or idempotent; otherwise the model is told its outcome is
unknown. A call that needs a person's yes waits for it (stored, so a restart keeps the wait,
which counts from the request); no answer in time is a denial the model is told of.

Calls of one step run at once, ``max_parallel_tools`` at a time. The loop stops after
``max_tool_steps`` model calls, after ``max_turn_s``, or when the model repeats an identical
call ``max_repeats`` times, and the reply then says so and what was done. Every model call is
the policy's (``run_step``), unchanged.

The reply is everything the model wrote in the turn: the text it put beside its calls in each
step and then its answer, a blank line between them. That is what a stream showed as it came
(:class:`StepStream` puts the blank line in too), so a peer client's pieces add up to the
answer it gets. Only the current step's text binds: an earlier step's is stored and final, so
a failure of a later model call is the policy's to retry as any.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from gateway.events import Observe
from gateway.events_tools import (
    ApprovalAsked,
    ApprovalDecided,
    ToolCallFinished,
    ToolCallStarted,
    ToolLoopStopped,
    ToolStepChosen,
    ToolStepStored,
)
from gateway.messages import (
    AttemptFailed,
    CallState,
    ReplyDelta,
    StoredCall,
    StoredMessage,
    StoredStep,
    StreamEvent,
    ToolActivity,
    ToolCall,
    ToolOutcome,
    ToolSpec,
    Usage,
)
from gateway.ports import ApprovalRequest, Asker, ReplyStream, StepLedger, ToolBox

#: What the model is told of a call a crash cut off when its tool may not run twice.
UNKNOWN = "unknown: the gateway stopped while this call ran; it may or may not have taken effect"
DENIED = "denied: the person asked did not approve this call; it did not run"
TIMED_OUT = "denied: nobody approved this call within {seconds:g} s; it did not run"
UNAVAILABLE = "error: the tool {name} is not available now (its server is down or it was removed)"
#: Between the texts of two steps, in the reply and on the stream.
SEPARATOR = "\n\n"
#: Shown of a call's arguments in an approval request, at most.
APPROVAL_ARGUMENTS_CHARS = 500
#: How the events (log lines, metrics) name a call of a tool the turn was not offered: the
#: model's own string (any length, any character) is no log field or metric label (security
#: review 2026-12-05, T-2).
NOT_OFFERED = "(not offered)"
Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Limits:
    """A turn's tool-loop bounds (``[agent]``, ``[tools]``)."""

    max_parallel_tools: int = 4
    max_tool_steps: int = 25
    max_turn_s: float = 600.0
    max_tool_result_chars: int = 20_000
    max_repeats: int = 3
    approval_timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class AgentTools:
    """What the agent's tool loops share (built once by the composition root): the tools,
    the store of their steps, and the approval timeout (``[tools]``, read at each turn)."""

    box: ToolBox
    ledger: StepLedger
    approval_timeout_s: Callable[[], float]
    wall: Callable[[], float] = time.time


@dataclass(frozen=True, slots=True)
class Answered:
    """One model call of the loop, as the policy ran it."""

    text: str
    usage: Usage
    calls: tuple[ToolCall, ...]
    model: str
    fell_back: bool


@dataclass(slots=True)
class Outcome:
    """The loop's end: the reply, and what the model calls added up to."""

    reply: str
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    fell_back: bool = False
    stopped: Literal["steps", "time", "repeat"] | None = None


#: Calls the model with the steps so far (``extra``, after the user message) and the tools.
RunStep = Callable[[Messages], Awaitable[Answered]]


class StepStream:
    """The turn's stream as the loop's steps write it (a :class:`ReplyStream`): the first
    text of a step after earlier steps' text comes after :data:`SEPARATOR`, as in the reply;
    and it binds only while text of the current step reached a viewer."""

    __slots__ = ("_after_text", "_inner", "_pending", "_shown")

    def __init__(self, inner: ReplyStream) -> None:
        self._inner = inner
        self._after_text = False  # earlier steps wrote text
        self._pending = False  # the separator is still to come before this step's text
        self._shown = False  # text of this step was put

    def step(self, after_text: bool) -> None:
        """A new model call of the loop starts (``after_text``: earlier steps wrote text)."""
        self._after_text = self._pending = after_text
        self._shown = False

    def put(self, event: StreamEvent) -> None:
        if isinstance(event, ReplyDelta) and event.text:
            if self._pending:
                self._pending = False
                self._inner.put(ReplyDelta(SEPARATOR, event.attempt))
            self._shown = True
        elif isinstance(event, AttemptFailed):  # a retry (if any) starts the step's text over
            self._pending, self._shown = self._after_text, False
        self._inner.put(event)

    @property
    def binding(self) -> bool:
        return self._shown and self._inner.binding


class ToolLoop:
    def __init__(
        self,
        conversation: str,
        turn: int,
        first_row: StoredMessage,
        *,
        box: ToolBox,
        ledger: StepLedger,
        specs: Sequence[ToolSpec],
        asker: Asker | None,
        limits: Limits,
        stream: ReplyStream | None = None,
        observe: Observe = lambda event: None,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._conversation = conversation
        self._turn = turn
        self._first = first_row
        self._box = box
        self._ledger = ledger
        self._specs = {s.name: s for s in specs}
        self._asker = asker
        self._limits = limits
        self._stream = StepStream(stream) if stream is not None else None
        self._observe = observe
        self._wall = wall
        self._clock = clock
        self._done: list[str] = []  # what was done, for a reply cut short

    @property
    def stream(self) -> StepStream | None:
        """Where the model's pieces go while a step streams (the watcher's, steps apart)."""
        return self._stream

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The offered tools as OpenAI's ``tools``."""
        return [
            {
                "type": "function",
                "function": {
                    "name": s.name,
                    "description": s.description,
                    "parameters": dict(s.parameters),
                },
            }
            for s in self._specs.values()
        ]

    async def run(self, run_step: RunStep) -> Outcome:
        """Replay the stored steps, then call the model for each next one, until it answers
        without calls or a limit stops the loop."""
        stored = await self._ledger.steps(self._first)
        extra: Messages = []
        outcome = Outcome("")
        seen: Counter[tuple[str, str]] = Counter()
        said: list[str] = []  # the text the model wrote beside its calls, step by step
        deadline = self._clock() + self._limits.max_turn_s
        for number in range(1, self._limits.max_tool_steps + 1):
            fresh = number > len(stored)
            if not fresh:
                step = stored[number - 1]  # replayed: the model is not asked again
            else:
                if self._clock() > deadline:
                    return self._stopped(outcome, "time")
                if self._stream is not None:
                    self._stream.step(after_text=bool(said))
                answered = await run_step(extra)
                outcome.usage = _add(outcome.usage, answered.usage)
                outcome.model, outcome.fell_back = (
                    answered.model,
                    outcome.fell_back or (answered.fell_back),
                )
                if not answered.calls:
                    outcome.reply = SEPARATOR.join(t for t in (*said, answered.text) if t)
                    return outcome
                step = await self._store(number, answered)
            if step.content:
                said.append(step.content)
            extra.append(_assistant(step))
            for call in step.calls:
                seen[(call.name, _canonical(call.arguments))] += 1
            extra.extend(await self._run_calls(step, fresh=fresh))
            if max(seen.values(), default=0) >= self._limits.max_repeats:
                return self._stopped(outcome, "repeat")
        return self._stopped(outcome, "steps")

    async def _store(self, number: int, answered: Answered) -> StoredStep:
        observe, key, turn = self._observe, self._conversation, self._turn
        observe(ToolStepChosen(key, turn, number, len(answered.calls)))
        row = await self._ledger.record_step(
            self._first, answered.text, answered.calls, answered.model
        )
        observe(ToolStepStored(key, turn, number))
        return StoredStep(row, answered.text, answered.calls, answered.model)

    async def _run_calls(self, step: StoredStep, *, fresh: bool) -> Messages:
        """Each call of ``step`` (at most ``max_parallel_tools`` at once): the tool messages
        for the model, in the step's order. ``fresh``: the model chose it just now (it may
        call only what it was offered); else a stored step being replayed."""
        results: dict[str, str] = {}
        limiter = anyio.CapacityLimiter(self._limits.max_parallel_tools)

        async def one(call: ToolCall) -> None:
            async with limiter:
                offered = call.name in self._specs or not fresh
                spec = self._box.find(call.name) if offered else None
                results[call.id] = await self._call(call, spec, step.call(call.id))

        async with anyio.create_task_group() as tg:
            for call in step.calls:
                tg.start_soon(one, call)
        return [
            {"role": "tool", "tool_call_id": call.id, "content": results[call.id]}
            for call in step.calls
        ]

    async def _call(self, call: ToolCall, spec: ToolSpec | None, stored: StoredCall | None) -> str:
        """One call's result for the model: replayed from the store, or run now (``spec``:
        its tool, None when it is not available or was not offered)."""
        state = stored.state if stored is not None else None
        if stored is not None and state == CallState.FINISHED:
            return stored.result
        if stored is not None and state == CallState.STARTED:
            if spec is None or not spec.replayable:  # it may have taken effect: not twice
                return await self._finish(call, stored.row_id, UNKNOWN, True, "unknown")
            return await self._execute(spec, call, stored.row_id, replayed=True)
        if spec is None:  # unknown or unavailable now: an error the model sees
            opened = stored or await self._ledger.open_call(self._first, call, awaiting=False)
            text = UNAVAILABLE.format(name=call.name)
            return await self._finish(call, opened.row_id, text, True, "error")
        if stored is None and spec.approval:
            stored = await self._ledger.open_call(self._first, call, awaiting=True)
            await self._ask(call, stored)
        if stored is not None and stored.state in (CallState.AWAITING, CallState.APPROVED):
            return await self._approved_then_run(spec, call, stored)
        if stored is not None and stored.state == CallState.DENIED:
            return await self._finish(call, stored.row_id, DENIED, True, "denied")
        opened = stored or await self._ledger.open_call(self._first, call, awaiting=False)
        return await self._execute(spec, call, opened.row_id)

    async def _ask(self, call: ToolCall, stored: StoredCall) -> None:
        self._show(call, "awaiting")
        if self._asker is not None:
            shown = shown_arguments(call.arguments)
            timeout = self._limits.approval_timeout_s
            request = ApprovalRequest(
                stored.row_id, call.id, call.name, shown, self._conversation, timeout
            )
            await self._asker.ask(request)
        self._observe(ApprovalAsked(self._conversation, self._turn, call.id, call.name))

    async def _approved_then_run(self, spec: ToolSpec, call: ToolCall, stored: StoredCall) -> str:
        if stored.state == CallState.AWAITING:
            asked = stored.requested_at if stored.requested_at is not None else self._wall()
            deadline = asked + self._limits.approval_timeout_s  # downtime counts
            stored = await self._ledger.decision(stored.row_id, deadline=deadline)
        if stored.state == CallState.DENIED:
            return await self._finish(call, stored.row_id, DENIED, True, "denied")
        if stored.state == CallState.AWAITING:  # nobody answered in time: a denial
            seconds = self._limits.approval_timeout_s
            self._observe(
                ApprovalDecided(self._conversation, call.id, call.name, "timeout", "timeout")
            )
            text = TIMED_OUT.format(seconds=seconds)
            return await self._finish(call, stored.row_id, text, True, "denied")
        await self._ledger.start_call(stored.row_id)
        return await self._execute(spec, call, stored.row_id)

    async def _execute(
        self, spec: ToolSpec, call: ToolCall, row: int, *, replayed: bool = False
    ) -> str:
        """Run a call committed ``started``, then commit its result."""
        self._observe(ToolCallStarted(self._conversation, self._turn, call.id, call.name, replayed))
        self._show(call, "started")
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            text = f"error: the arguments are not valid JSON ({exc.msg}); the tool did not run"
            return await self._finish(call, row, text, True, "error")
        if not isinstance(arguments, dict):
            text = "error: the arguments must be a JSON object; the tool did not run"
            return await self._finish(call, row, text, True, "error")
        result: ToolOutcome = await self._box.call(spec, arguments, conversation=self._conversation)
        text = self._cut(result.text)
        return await self._finish(
            call, row, text, result.is_error, "error" if result.is_error else "ok"
        )

    async def _finish(
        self,
        call: ToolCall,
        row: int,
        text: str,
        is_error: bool,
        outcome: Literal["ok", "error", "unknown", "denied"],
    ) -> str:
        await self._ledger.finish_call(row, text, is_error=is_error)
        named = call.name if call.name in self._specs else NOT_OFFERED
        self._observe(ToolCallFinished(self._conversation, self._turn, call.id, named, outcome))
        self._show(call, "denied" if outcome == "denied" else "finished", is_error)
        self._done.append(f"{call.name}: {outcome}")
        return text

    def _cut(self, text: str) -> str:
        limit = self._limits.max_tool_result_chars
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[cut: the result had {len(text)} characters, {limit} kept]"

    def _show(self, call: ToolCall, state: str, error: bool = False) -> None:
        if self._stream is not None:
            self._stream.put(ToolActivity(call.id, call.name, state, error))

    def _stopped(self, outcome: Outcome, reason: Literal["steps", "time", "repeat"]) -> Outcome:
        self._observe(ToolLoopStopped(self._conversation, self._turn, reason))
        why = {
            "steps": f"the limit of {self._limits.max_tool_steps} tool steps was reached",
            "time": f"the turn ran for {self._limits.max_turn_s:g} s, its limit",
            "repeat": "the same tool call was repeated without progress",
        }[reason]
        done = "\n".join(f"- {line}" for line in self._done) or "- nothing"
        outcome.reply = f"I stopped before finishing: {why}. What was done:\n{done}"
        outcome.stopped = reason
        return outcome


def _assistant(step: StoredStep) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": step.content or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in step.calls
        ],
    }


def shown_arguments(arguments: str) -> str:
    """A call's arguments as an approval request shows them: cut to
    :data:`APPROVAL_ARGUMENTS_CHARS`, saying so, since a yes approves all of them (security
    review 2026-12-05, T-1: a cut without a word hid what followed)."""
    if len(arguments) <= APPROVAL_ARGUMENTS_CHARS:
        return arguments
    rest = len(arguments) - APPROVAL_ARGUMENTS_CHARS
    return (
        f"{arguments[:APPROVAL_ARGUMENTS_CHARS]}… [{rest:,} more characters not shown;"
        " a yes approves them too]"
    )


def _canonical(arguments: str) -> str:
    """The arguments compared for a repeat: key order and spacing do not matter."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except json.JSONDecodeError:
        return arguments


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens)
