"""A2A's side of the agent's tool calls (SPEC 15): what a task says while its calls run, the
question when one waits for a yes, and what counts as the answer.

A call that needs a yes moves its task to ``input-required``, the status message asking
about the tool and its arguments; A2A's way to answer is the task's next message (a message
with the task's ``taskId``). Its text, trimmed, lower-cased and without a trailing ``.`` or
``!``, must be one of :data:`YES` or :data:`NO`: anything else ("yes, but not to main") is
refused (-32602) and decides nothing, since a guess at a person's intent would be a
decision. Each answer decides the oldest call of the task still waiting (the calls of one
step may wait together: the task asks again for the next).

Nothing here does I/O: the adapter reads the steps and calls ``Intake.decide``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from gateway.messages import CallState, StoredCall, StoredMessage, StoredStep, ToolActivity
from gateway.ports import ApprovalRequest

YES = frozenset({"yes", "y", "approve", "approved", "allow", "ok", "okay"})
NO = frozenset({"no", "n", "deny", "denied", "reject"})
#: Of a call's arguments, the question shows at most this much (as the chat platforms do).
ARGUMENTS_CHARS = 500
#: Answers taken here lately (their message ids): a resent answer is not a second answer.
REMEMBERED = 1024


def verdict(text: str) -> bool | None:
    """True for a yes, False for a no, None for anything else."""
    word = text.strip().lower().rstrip(".!").strip()
    if word in YES:
        return True
    if word in NO:
        return False
    return None


def question(tool: str, arguments: str) -> str:
    shown = arguments[:ARGUMENTS_CHARS] + ("..." if len(arguments) > ARGUMENTS_CHARS else "")
    return f"May I call the tool {tool} with the arguments {shown}? Answer yes or no."


def waiting(steps: Sequence[StoredStep]) -> StoredCall | None:
    """The oldest call of a turn's steps that still waits for a yes."""
    calls = [c for step in steps for c in step.stored if c.state == CallState.AWAITING]
    return min(calls, key=lambda c: c.row_id, default=None)


def questions(rows: Sequence[StoredMessage]) -> dict[int, str]:
    """Of a conversation's transcript: each task (user row) with a call waiting, and its
    question (ListTasks reads them from the transcript it has, without a read per task)."""
    arguments: dict[tuple[int, str], str] = {}
    for row in rows:
        if row.state == "step" and row.tool_calls and row.user_row_id is not None:
            for call in json.loads(row.tool_calls):
                arguments[(row.user_row_id, call["id"])] = call["arguments"]
    asked: dict[int, str] = {}
    for row in rows:  # oldest first: the first waiting call of a task is its question
        task = row.user_row_id
        if row.role == "tool" and row.state == CallState.AWAITING and task and task not in asked:
            found = arguments.get((task, row.call_id or ""), "")
            asked[task] = question(row.tool or "", found)
    return asked


def progress(activity: ToolActivity) -> str | None:
    """What a ``working`` status update says of a call's new state; None: nothing (a call
    waiting for a yes is the ``input-required`` status itself)."""
    match activity.state:
        case "started":
            return f"Using the tool {activity.tool}."
        case "finished":
            ended = "failed" if activity.error else "finished"
            return f"The tool {activity.tool} {ended}."
        case "denied":
            return f"The tool {activity.tool} was not approved; it did not run."
        case _:
            return None


class Answered:
    """The answers taken here lately, by their message's platform id: a client that resends
    its answer (it got no response) does not answer the task's next question with it. Kept in
    memory, the newest :data:`REMEMBERED`: a resend to another node, or after a restart,
    finds the call it answered decided already, and answers another only if one waits."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self._size = size
        self._tasks: OrderedDict[str, int] = OrderedDict()

    def __repr__(self) -> str:
        return f"<Answered {len(self._tasks)}>"

    def task_of(self, pmid: str) -> int | None:
        return self._tasks.get(pmid)

    def remember(self, pmid: str, task: int) -> None:
        self._tasks[pmid] = task
        self._tasks.move_to_end(pmid)
        while len(self._tasks) > self._size:
            self._tasks.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Answer:
    """A message that answers its task's question: the call it decides (None: an answer
    resent, taken already) and whether it is a yes."""

    task: StoredMessage
    call_row: int | None
    approve: bool


@dataclass(frozen=True, slots=True)
class TaskAsker:
    """The asker of one task's turn (``Outlet.asker``): ``asked(row id, request)``."""

    asked: Callable[[int, ApprovalRequest], Awaitable[None]]
    row_id: int

    async def ask(self, request: ApprovalRequest) -> None:
        await self.asked(self.row_id, request)
