"""The config of scheduled messages (SPEC 16): ``[scheduler]``, the settings, and
``[[schedules]]``, the list (TOML cannot hold both under one name).

Each ``[[schedules]]`` entry is checked whole and every problem named with its key: exactly
one of ``cron``/``every``/``at`` and one of ``prompt``/``text``, a cron expression cronsim
reads, an IANA time zone, an interval of at least a minute, an RFC 3339 time with its offset,
and a conversation key of a platform that is on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Gt

from gateway._schema import TABLE, Problem, rule
from gateway.messages import Schedule, platform_of
from gateway.schedule_times import CatchUp, When, WhenKind, problem, zone

#: A config schedule's name is its id: in its firings' platform message ids, in ``/schedules``.
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: Conversation keys a schedule can fire into, by platform (SPEC 2).
KEY_FORMS = {
    "telegram": re.compile(r"^telegram:-?\d+(:topic:\d+)?$"),
    "discord": re.compile(r"^discord:\d+$"),
    "slack": re.compile(
        r"^slack:[TE][A-Z0-9]{2,31}:[CGD][A-Z0-9]{2,31}(:thread:\d{1,12}\.\d{1,9})?$"
    ),
    "peer": re.compile(r"^peer:[A-Za-z0-9._:-]{1,128}$"),
}


def _name(value: str) -> str | None:
    return None if _NAME.match(value) else "must be 1-64 letters, digits, '_', '.' or '-'"


def _zone(value: str) -> str | None:
    try:
        zone(value)
    except ValueError:
        # The value is not repeated: it may have come from the environment (SPEC 6), and the
        # error names the key.
        return "is not an IANA time zone (such as Europe/Berlin)"
    return None


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """``[scheduler]``: whether conversations may schedule through the agent's tools, their
    limits, the default time zone, and the loop's tolerances."""

    __pydantic_config__ = TABLE

    agent_tools: bool = False  # schedule_message, list_schedules, cancel_schedule
    max_per_conversation: Annotated[int, Ge(0)] = 20
    # Schedules conversations may make across the gateway (conversations are free to make:
    # a Slack thread, a Telegram topic, a peer session each is one); config schedules do not
    # count.
    max_total: Annotated[int, Ge(0)] = 1000
    min_interval_s: Annotated[float, Ge(60)] = 300.0  # for schedules a conversation made
    timezone: Annotated[str, rule(_zone)] = "UTC"  # cron's, when an entry names none
    # A due time this late is still the loop's own lateness, not downtime (catch_up applies
    # past it).
    grace_s: Annotated[float, Gt(0)] = 60.0
    # How often the loop reads the store's schedules again, for those another node added
    # (its own changes wake it at once; this is no polling of due times).
    refresh_s: Annotated[float, Gt(0)] = 60.0


@dataclass(frozen=True, slots=True)
class ScheduleEntry:
    """One ``[[schedules]]`` entry."""

    __pydantic_config__ = TABLE

    name: Annotated[str, rule(_name)]
    conversation: str
    cron: str = ""
    every: str = ""
    at: str = ""
    timezone: str = ""  # for cron; default [scheduler] timezone
    prompt: str = ""
    text: str = ""
    catch_up: CatchUp = "latest"
    enabled: bool = True

    def when(self, default_zone: str) -> When:
        kinds: list[tuple[WhenKind, str]] = [("cron", self.cron), ("every", self.every)]
        kinds.append(("at", self.at))
        kind, spec = next(((k, v) for k, v in kinds if v), ("cron", ""))
        return When(kind, spec, (self.timezone or default_zone) if kind == "cron" else "UTC")

    def schedule(self, default_zone: str) -> Schedule:
        when = self.when(default_zone)
        action, body = ("text", self.text) if self.text else ("prompt", self.prompt)
        return Schedule(
            id=self.name,
            conversation=self.conversation,
            kind=when.kind,
            spec=when.spec,
            timezone=when.timezone,
            action=action,
            body=body,
            catch_up=self.catch_up,
            enabled=self.enabled,
            origin="config",
        )


def conversation_problem(key: str, platforms_on: set[str]) -> str | None:
    """What is wrong with a schedule's conversation key (None: nothing)."""
    platform = platform_of(key)
    form = KEY_FORMS.get(platform)
    if form is None:
        return (
            f"{key!r} is not a conversation key a schedule can fire into:"
            " telegram:<chat id>, discord:<channel id>, slack:<team>:<channel> or"
            " peer:<session id>"
        )
    if not form.match(key):
        return f"{key!r} is not a {platform} conversation key (SPEC 2's form)"
    if platform not in platforms_on:
        return f"{key!r} is a {platform} conversation and [{platform}] is not configured (off)"
    return None


def schedule_problems(
    entries: tuple[ScheduleEntry, ...], scheduler: SchedulerConfig, platforms_on: set[str]
) -> list[Problem]:
    """Every problem of ``[[schedules]]``, each with its key."""
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        key = f"schedules[{i}]"
        if entry.name in seen:
            problems.append((f"{key}.name", f"the same name as schedules[{seen[entry.name]}]"))
        seen.setdefault(entry.name, i)
        given = [k for k in ("cron", "every", "at") if getattr(entry, k)]
        if len(given) != 1:
            problems.append((key, "needs exactly one of cron, every and at"))
        if bool(entry.prompt) == bool(entry.text):
            problems.append(
                (key, "needs exactly one of prompt (a model turn) and text (sent as is)")
            )
        if entry.timezone and given != ["cron"]:
            problems.append((f"{key}.timezone", "is for cron (every and at are absolute)"))
        if len(given) == 1:
            when = entry.when(scheduler.timezone)
            found = problem(when, min_interval_s=60)
            if found is not None:
                bad_zone = entry.timezone and "time zone" in found
                problems.append((f"{key}.{'timezone' if bad_zone else given[0]}", found))
        found = conversation_problem(entry.conversation, platforms_on)
        if found is not None:
            problems.append((f"{key}.conversation", found))
    return problems


def configured(
    entries: tuple[ScheduleEntry, ...], scheduler: SchedulerConfig
) -> tuple[Schedule, ...]:
    """The config's schedules as the store keeps them."""
    return tuple(entry.schedule(scheduler.timezone) for entry in entries)
