"""Scheduled messages on a running gateway (SPEC 16), its clock moved by hand: a cron schedule
fires at its minute as an admission of its conversation; a ``text`` is sent as it is with no
model call, a ``prompt`` is a model turn whose answer is stored and delivered; the transcript
marks the firing; a second firing of the same due time (a restart) is a no-op; downtime is
caught up (``latest``: once, "missed 2") or skipped; reload adds, changes and removes.

Telegram and Discord firings are tests/test_schedules_platforms.py; the agent's tools
tests/test_schedule_tools.py; several nodes and crashes tests/test_schedules_cluster.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from gateway.config import parse_config
from gateway.events import AnswerCommitted, TurnCompleted
from gateway.events_schedules import (
    ScheduleCaughtUp,
    ScheduleFired,
    ScheduleMissed,
    SchedulesSynced,
)
from gateway.store import Transcript
from gateway.store.schedules import ScheduleRecords
from tests.fakes.openai_server import Hold, ok, open_fake_model
from tests.harness import Events, config_text, running_gateway
from tests.support.clocks import WallClock

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

MORNING = """
[[schedules]]
name = "morning"
conversation = "peer:home"
cron = "0 9 * * *"
timezone = "Europe/Berlin"
text = "Good morning! Stand-up in 30 minutes."

[[schedules]]
name = "digest"
conversation = "peer:home"
cron = "30 9 * * *"
timezone = "Europe/Berlin"
prompt = "Write today's digest in one line."
"""


def config(tmp_path: Path, model_url: str, schedules: str) -> str:
    return config_text(tmp_path / "botmux.db", model_url, extra=schedules)


async def test_a_cron_schedule_fires_at_its_minute_text_without_the_model_prompt_with_it(
    tmp_path: Path,
) -> None:
    clock = WallClock("2026-06-01T08:58:00+02:00")
    events = Events()
    async with open_fake_model() as fake:
        fake.script(ok("Digest: all quiet."))
        cfg = parse_config(config(tmp_path, fake.base_url, MORNING), source="t", env={})
        async with running_gateway(cfg, schedule_clock=clock, events=events) as (app, url):
            await clock.move("2026-06-01T08:59:59+02:00")
            assert events.of(ScheduleFired) == []  # not a second early
            await clock.move("2026-06-01T09:00:00+02:00")
            (fired,) = await events.wait_for(ScheduleFired)
            await events.wait_for(AnswerCommitted)
            assert (fired.schedule, fired.due, fired.outcome) == (
                "morning",
                "2026-06-01T07:00:00Z",
                "fired",
            )
            assert fake.requests == []  # a text is sent as it is
            await clock.move("2026-06-01T09:30:00+02:00")
            await events.wait_for(TurnCompleted, 2)
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{url}/api/sessions/home/messages") as r,
            ):
                transcript = (await r.json())["messages"]
            rows = await app.parts.store.read(Transcript("peer:home"))
            records = {r.schedule.id: r for r in await app.parts.store.read(ScheduleRecords())}
    assert [(m["role"], m["content"], m.get("scheduled")) for m in transcript] == [
        ("user", "Good morning! Stand-up in 30 minutes.", "morning"),
        ("assistant", "Good morning! Stand-up in 30 minutes.", None),
        ("user", "Write today's digest in one line.", "digest"),
        ("assistant", "Digest: all quiet.", None),
    ]
    assert [r.platform_message_id for r in rows if r.role == "user"] == [
        "schedule:morning:2026-06-01T07:00:00Z",
        "schedule:digest:2026-06-01T07:30:00Z",
    ]
    (request,) = fake.requests  # the prompt, and only it, went to the model
    assert request.messages[-1]["content"] == "Write today's digest in one line."
    digest = records["digest"]
    assert digest.last_due == clock.now() and digest.delivery == "delivered"
    assert digest.delivered_id == f"http:{digest.last_row}"  # the peer's delivery
    assert records["morning"].delivery == "delivered"


async def test_a_restart_does_not_fire_a_due_time_twice_and_downtime_is_caught_up_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    every = """
[[schedules]]
name = "tick"
conversation = "peer:ops"
every = "1h"
text = "tick"

[[schedules]]
name = "quiet"
conversation = "peer:ops"
every = "1h"
catch_up = "skip"
text = "quiet tick"
"""
    clock = WallClock("2026-06-01T09:30:00+00:00")
    async with open_fake_model() as fake:
        cfg = parse_config(config(tmp_path, fake.base_url, every), source="t", env={})
        events = Events()
        async with running_gateway(cfg, schedule_clock=clock, events=events):
            await clock.move("2026-06-01T10:00:00+00:00")
            await events.wait_for(AnswerCommitted, 2)
        # Stopped across 11:00, 12:00 and 13:00; started at 13:00:30 ...
        await clock.advance_to("2026-06-01T13:00:30+00:00")
        caplog.set_level(logging.INFO, logger="gateway")
        events = Events()
        async with running_gateway(cfg, schedule_clock=clock, events=events) as (app, _):
            (caught_up,) = await events.wait_for(ScheduleCaughtUp)
            (missed,) = await events.wait_for(ScheduleMissed)
            await events.wait_for(AnswerCommitted)
            rows = await app.parts.store.read(Transcript("peer:ops"))
    # ... "latest" fired 13:00 once and says it missed two; "skip" fired none.
    assert (caught_up.schedule, caught_up.due, caught_up.missed) == (
        "tick",
        "2026-06-01T13:00:00Z",
        2,
    )
    assert (missed.schedule, missed.through, missed.missed) == ("quiet", "2026-06-01T13:00:00Z", 3)
    assert sorted(r.platform_message_id or "" for r in rows if r.role == "user") == [
        "schedule:quiet:2026-06-01T10:00:00Z",
        "schedule:tick:2026-06-01T10:00:00Z",
        "schedule:tick:2026-06-01T13:00:00Z",
    ]
    lines = [r for r in caplog.records if r.getMessage() == "schedule_caught_up"]
    assert [getattr(r, "missed", None) for r in lines] == [2]
    assert [r for r in caplog.records if r.getMessage() == "schedule_missed"]


async def test_the_same_due_time_fired_again_is_a_no_op(tmp_path: Path) -> None:
    """A second start at the same instant (a restart right after the firing) finds the due
    time fired: nothing admitted, nothing sent twice."""
    schedules = """
[[schedules]]
name = "once"
conversation = "peer:x"
at = "2026-06-01T10:00:00Z"
text = "once"
"""
    clock = WallClock("2026-06-01T10:00:00+00:00")
    async with open_fake_model() as fake:
        cfg = parse_config(config(tmp_path, fake.base_url, schedules), source="t", env={})
        for _ in range(2):
            events = Events()
            async with running_gateway(cfg, schedule_clock=clock, events=events) as (app, _):
                await clock.move("2026-06-01T10:00:01+00:00")
                rows = await app.parts.store.read(Transcript("peer:x"))
            if events.of(ScheduleFired):
                await events.wait_for(AnswerCommitted)
    assert [r.content for r in rows if r.role == "user"] == ["once"]


async def test_reload_adds_changes_and_removes_config_schedules(tmp_path: Path) -> None:
    clock = WallClock("2026-06-01T09:00:30+00:00")
    path = tmp_path / "botmux.toml"
    async with open_fake_model() as fake:
        first = config(tmp_path, fake.base_url, MORNING.replace("Europe/Berlin", "UTC"))
        path.write_text(first)
        cfg = parse_config(first, source=str(path), env={})
        events = Events()
        read = lambda: parse_config(path.read_text(), source=str(path), env={})  # noqa: E731
        gateway = running_gateway(cfg, schedule_clock=clock, events=events, read=read)
        async with gateway as (app, _):
            (synced,) = await events.wait_for(SchedulesSynced)
            assert synced.added == "morning,digest"
            changed = MORNING.replace("Europe/Berlin", "UTC").replace("30 9", "45 9")
            changed = changed.split("[[schedules]]")
            path.write_text(config(tmp_path, fake.base_url, "[[schedules]]" + changed[2]))
            await app.reloader.reload("test")
            (_, synced) = await events.wait_for(SchedulesSynced, 2)
            assert (synced.added, synced.changed, synced.removed) == ("", "digest", "morning")
            fake.script(ok("digest at 9:45"))
            await clock.move("2026-06-01T09:30:00+00:00")
            assert events.of(ScheduleFired) == []  # moved to 9:45
            await clock.move("2026-06-01T09:45:00+00:00")
            (fired,) = await events.wait_for(ScheduleFired)
    assert fired.schedule == "digest" and fired.due == "2026-06-01T09:45:00Z"


async def test_berlin_spring_fires_at_the_next_valid_minute_and_autumn_once(
    tmp_path: Path,
) -> None:
    schedules = """
[[schedules]]
name = "night"
conversation = "peer:night"
cron = "30 2 * * *"
timezone = "Europe/Berlin"
text = "02:30 in Berlin"
"""
    clock = WallClock("2026-03-29T00:50:00+00:00")  # 01:50 CET, the night of the jump
    async with open_fake_model() as fake:
        cfg = parse_config(config(tmp_path, fake.base_url, schedules), source="t", env={})
        events = Events()
        async with running_gateway(cfg, schedule_clock=clock, events=events) as (app, _):
            await clock.move("2026-03-29T00:59:59+00:00")
            assert events.of(ScheduleFired) == []
            await clock.move("2026-03-29T01:00:00+00:00")  # 03:00 CEST: 02:30 never came
            await events.wait_for(ScheduleFired, 1)
            await clock.move("2026-10-25T00:00:00+00:00")  # autumn; the days between missed
            await events.wait_for(ScheduleFired, 2)
            await clock.move("2026-10-25T00:30:00+00:00")  # 02:30 CEST
            await events.wait_for(ScheduleFired, 3)
            await clock.move("2026-10-25T01:30:00+00:00")  # 02:30 CET: the same time again
            await clock.move("2026-10-26T01:30:00+00:00")  # 02:30 CET, the next day
            fired = await events.wait_for(ScheduleFired, 4)
            await events.wait_for(AnswerCommitted, 4)
            rows = await app.parts.store.read(Transcript("peer:night"))
    assert [(f.due, f.outcome) for f in fired] == [
        ("2026-03-29T01:00:00Z", "fired"),
        ("2026-10-24T00:30:00Z", "fired"),  # the days between caught up: the latest once
        ("2026-10-25T00:30:00Z", "fired"),
        ("2026-10-26T01:30:00Z", "fired"),
    ]
    assert len([r for r in rows if r.role == "assistant"]) == 4


async def test_a_removed_schedules_pending_firing_is_still_answered(tmp_path: Path) -> None:
    two = """
[[schedules]]
name = "slow"
conversation = "peer:q"
cron = "0 10 * * *"
prompt = "Think hard."

[[schedules]]
name = "tea"
conversation = "peer:q"
cron = "5 10 * * *"
text = "Tea time."
"""
    clock = WallClock("2026-06-01T09:59:00+00:00")
    path = tmp_path / "botmux.toml"
    async with open_fake_model() as fake:
        fake.script(Hold(ok("Thought.")))
        text = config(tmp_path, fake.base_url, two)
        path.write_text(text)
        read = lambda: parse_config(path.read_text(), source=str(path), env={})  # noqa: E731
        events = Events()
        gateway = running_gateway(read(), schedule_clock=clock, events=events, read=read)
        async with gateway as (app, _):
            await clock.move("2026-06-01T10:00:00+00:00")
            await fake.wait_for_requests(1)  # the prompt's turn runs, held
            await clock.move("2026-06-01T10:05:00+00:00")
            await events.wait_for(ScheduleFired, 2)  # tea's row waits behind it
            path.write_text(text.split('[[schedules]]\nname = "tea"')[0])
            await app.reloader.reload("test")
            (synced,) = [e for e in await events.wait_for(SchedulesSynced, 2)][1:]
            fake.release()
            await events.wait_for(TurnCompleted, 2)
            rows = await app.parts.store.read(Transcript("peer:q"))
            left = [r.schedule.id for r in await app.parts.schedules.records()]
    assert synced.removed == "tea" and left == ["slow"]
    assert [(r.role, r.content, r.state) for r in rows] == [  # in id order
        ("user", "Think hard.", "answered"),
        ("user", "Tea time.", "answered"),  # admitted before its schedule went: answered
        ("assistant", "Thought.", "final"),
        ("assistant", "Tea time.", "final"),
    ]


async def test_a_new_text_for_an_at_that_fired_does_not_fire_it_again(tmp_path: Path) -> None:
    once = """
[[schedules]]
name = "launch"
conversation = "peer:l"
at = "2026-06-01T10:00:00Z"
text = "Launch!"
"""
    clock = WallClock("2026-06-01T10:00:00+00:00")
    path = tmp_path / "botmux.toml"
    async with open_fake_model() as fake:
        text = config(tmp_path, fake.base_url, once)
        path.write_text(text)
        read = lambda: parse_config(path.read_text(), source=str(path), env={})  # noqa: E731
        events = Events()
        gateway = running_gateway(read(), schedule_clock=clock, events=events, read=read)
        async with gateway as (app, _):
            await events.wait_for(AnswerCommitted)
            path.write_text(text.replace("Launch!", "Launched."))
            await app.reloader.reload("test")
            (_, synced) = await events.wait_for(SchedulesSynced, 2)
            await clock.move("2026-06-01T10:01:00+00:00")
            rows = await app.parts.store.read(Transcript("peer:l"))
    assert synced.changed == "launch"
    assert [r.content for r in rows if r.role == "user"] == ["Launch!"]  # not again
