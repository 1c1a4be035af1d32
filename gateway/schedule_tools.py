"""The agent's own scheduling tools (SPEC 16): ``schedule_message``, ``list_schedules`` and
``cancel_schedule``, a ``gateway.ports.ToolBox`` of built-in tools acting on the current
conversation's schedules only (the tool loop hands each call its turn's conversation).

They are offered when ``[scheduler] agent_tools = true`` (read at each turn: a reload turns
them on or off) through profiles like any tool: a profile's ``tools`` globs match their plain
names. The limits are ``gateway.schedule_book``'s (``max_per_conversation``,
``min_interval_s``); a refusal is a tool result with ``is_error`` that says why, so the model
can tell the person. ``schedule_message`` is neither read-only nor idempotent (a call a crash
cut off is not run again: the model is told its outcome is unknown); ``cancel_schedule`` is
idempotent; ``list_schedules`` read-only.

:class:`ToolBoxes` puts several toolboxes behind one (the MCP servers' and these).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.config_schedules import SchedulerConfig
from gateway.messages import ToolOutcome, ToolServerStatus, ToolSpec
from gateway.ports import ToolBox
from gateway.schedule_book import ScheduleBook, ScheduleRefused, describe, stamp
from gateway.schedule_times import When, WhenKind

SERVER = "botmux"  # the specs' server: built in

_SCHEDULE = {
    "type": "object",
    "properties": {
        "cron": {
            "type": "string",
            "description": "Five-field cron expression, minute hour day month weekday"
            " ('0 9 * * 1-5': weekdays at 09:00), in `timezone`",
        },
        "every": {
            "type": "string",
            "description": "An interval: a whole number and s, m, h or d ('6h'); due at whole"
            " multiples of it since 1970-01-01T00:00Z",
        },
        "at": {
            "type": "string",
            "description": "One time, RFC 3339 with its offset ('2026-12-24T18:00:00+01:00')",
        },
        "timezone": {
            "type": "string",
            "description": "IANA time zone of `cron` ('Europe/Berlin'): the user's if they said"
            " it, else leave it out for the configured one",
        },
        "prompt": {
            "type": "string",
            "description": "At each due time you are asked this, and your answer is sent",
        },
        "text": {
            "type": "string",
            "description": "At each due time this text is sent as it is (no model call)",
        },
    },
    "additionalProperties": False,
}
_CANCEL = {
    "type": "object",
    "properties": {"id": {"type": "string", "description": "The schedule's id"}},
    "required": ["id"],
    "additionalProperties": False,
}
SPECS = (
    ToolSpec(
        "schedule_message",
        "Schedule a message in this conversation: exactly one of cron, every or at (when), and"
        " exactly one of prompt or text (what). Returns the schedule's id.",
        _SCHEDULE,
        SERVER,
        "schedule_message",
    ),
    ToolSpec(
        "list_schedules",
        "List this conversation's scheduled messages: ids, when they fire next, what they"
        " send, and whether the last one was delivered.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        SERVER,
        "list_schedules",
        read_only=True,
    ),
    ToolSpec(
        "cancel_schedule",
        "Remove one of this conversation's scheduled messages by its id.",
        _CANCEL,
        SERVER,
        "cancel_schedule",
        idempotent=True,
    ),
)


class ScheduleTools:
    """The scheduling tools, on ``book``, offered while ``settings().agent_tools``."""

    def __init__(self, book: ScheduleBook, settings: Callable[[], SchedulerConfig]) -> None:
        self._book = book
        self._settings = settings

    def __repr__(self) -> str:
        return f"<ScheduleTools on={self._settings().agent_tools}>"

    def offered(self, patterns: Sequence[str]) -> list[ToolSpec]:
        if not self._settings().agent_tools:
            return []
        return [s for s in SPECS if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]

    def find(self, name: str) -> ToolSpec | None:
        if not self._settings().agent_tools:
            return None
        return next((s for s in SPECS if s.name == name), None)

    def status(self) -> list[ToolServerStatus]:
        return []  # built in: no server to be up or down

    async def started(self) -> None:
        return

    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, conversation: str
    ) -> ToolOutcome:
        try:
            match spec.name:
                case "schedule_message":
                    return await self._schedule(arguments, conversation)
                case "list_schedules":
                    records = await self._book.records(conversation)
                    text = "\n\n".join(describe(r) for r in records)
                    return ToolOutcome(text or "No schedules in this conversation.")
                case "cancel_schedule":
                    found = str(arguments.get("id", "")).strip()
                    text = await self._book.remove(found, conversation=conversation, by="agent")
                    return ToolOutcome(text, is_error=not text.startswith("Removed"))
                case _:
                    return ToolOutcome(f"error: no built-in tool {spec.name}", is_error=True)
        except ScheduleRefused as exc:
            return ToolOutcome(f"refused: {exc}", is_error=True)

    async def _schedule(self, arguments: Mapping[str, Any], conversation: str) -> ToolOutcome:
        given = {k: arguments.get(k) for k in ("cron", "every", "at", "prompt", "text")}
        if any(v is not None and not isinstance(v, str) for v in given.values()):
            raise ScheduleRefused("cron, every, at, prompt and text are strings")
        kinds: list[tuple[WhenKind, str]] = [
            (k, v) for k in ("cron", "every", "at") if isinstance(v := given[k], str) and v
        ]
        if len(kinds) != 1:
            raise ScheduleRefused("give exactly one of cron, every and at")
        actions = [(k, v) for k in ("prompt", "text") if isinstance(v := given[k], str) and v]
        if len(actions) != 1:
            raise ScheduleRefused("give exactly one of prompt and text")
        tz = arguments.get("timezone") or self._settings().timezone
        if not isinstance(tz, str):
            raise ScheduleRefused("timezone is an IANA name such as Europe/Berlin")
        (kind, spec), (action, body) = kinds[0], actions[0]
        when = When(kind, spec.strip(), tz if kind == "cron" else "UTC")
        made = await self._book.add(conversation, when, action, body, by="agent")
        records = await self._book.records(conversation)
        nxt = next((r.next_due for r in records if r.schedule.id == made.id), None)
        return ToolOutcome(
            f"Scheduled {made.id}: {when.describe()}, next {stamp(nxt)}."
            f" /unschedule {made.id} removes it."
        )


class ToolBoxes:
    """Several toolboxes as one: the tools of each (the first that has a name answers for
    it), and every server's status."""

    def __init__(self, *boxes: ToolBox) -> None:
        self._boxes = boxes

    def __repr__(self) -> str:
        return f"<ToolBoxes {self._boxes!r}>"

    def offered(self, patterns: Sequence[str]) -> list[ToolSpec]:
        return [spec for box in self._boxes for spec in box.offered(patterns)]

    def find(self, name: str) -> ToolSpec | None:
        return next((s for box in self._boxes if (s := box.find(name)) is not None), None)

    async def started(self) -> None:
        for box in self._boxes:
            await box.started()

    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, conversation: str
    ) -> ToolOutcome:
        for box in self._boxes:
            if box.find(spec.name) is not None:
                return await box.call(spec, arguments, conversation=conversation)
        return ToolOutcome(f"error: the tool {spec.name} is not available now", is_error=True)

    def status(self) -> list[ToolServerStatus]:
        return [status for box in self._boxes for status in box.status()]
