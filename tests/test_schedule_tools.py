"""The agent's own scheduling tools and the commands (SPEC 16), on a running gateway with the
fake model scripted to call them: a user asks for a reminder, the model calls
``schedule_message``, the reminder fires at its time, ``/schedules`` lists it with its delivery,
``/unschedule`` removes it; the per-conversation limits refuse the 21st schedule and a 1-minute
interval with an answer the model can pass on; the tools act on their own conversation only.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gateway.config import parse_config
from gateway.events import AnswerCommitted
from gateway.events_schedules import ScheduleFired
from gateway.schedule_times import When
from gateway.store import Transcript
from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.harness import Events, config_text, running_gateway
from tests.support.clocks import WallClock
from tests.support.peer import chat

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

TOOLS = """
[scheduler]
agent_tools = true
timezone = "Europe/Berlin"

[[profiles]]
name = "assistant"
conversations = ["peer:*"]
tools = ["schedule_message", "list_schedules", "cancel_schedule"]
"""


async def test_a_reminder_asked_of_the_agent_fires_is_listed_and_removed(tmp_path: Path) -> None:
    clock = WallClock("2026-06-01T08:00:00+02:00")
    events = Events()
    async with open_fake_model() as fake:
        fake.script(
            calls(("schedule_message", {"cron": "0 9 * * *", "text": "Drink some water!"})),
            ok("Done: every day at 9:00 I will remind you."),
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=TOOLS), source="t", env={}
        )
        gateway = running_gateway(cfg, schedule_clock=clock, events=events)
        async with gateway as (app, url), aiohttp.ClientSession() as http:
            answer = await chat(http, url, "ana", "Remind me to drink water every day at 9")
            assert answer == "Done: every day at 9:00 I will remind you."
            (result,) = fake.requests[1].tool_contents
            assert result.startswith("Scheduled ") and "next 2026-06-01 07:00 UTC" in result
            schedule_id = result.split()[1].rstrip(":")
            offered = [t["function"]["name"] for t in fake.requests[0].tools or []]
            assert offered == ["schedule_message", "list_schedules", "cancel_schedule"]

            await clock.move("2026-06-01T09:00:00+02:00")
            (fired,) = await events.wait_for(ScheduleFired)
            await events.wait_for(AnswerCommitted, 2)
            listed = await chat(http, url, "ana", "/schedules")
            elsewhere = await chat(http, url, "bob", "/schedules")
            not_here = await chat(http, url, "bob", f"/unschedule {schedule_id}")
            removed = await chat(http, url, "ana", f"/unschedule {schedule_id}")
            after = await chat(http, url, "ana", "/schedules")
            await clock.move("2026-06-02T09:00:00+02:00")
            rows = await app.parts.store.read(Transcript("peer:ana"))
    assert fired.schedule == schedule_id and fired.due == "2026-06-01T07:00:00Z"
    assert listed.startswith(f"{schedule_id}: cron 0 9 * * * (Europe/Berlin), text ")
    assert "next: 2026-06-02 07:00 UTC" in listed
    assert "last fired: 2026-06-01 07:00 UTC" in listed and ": delivered" in listed
    assert elsewhere == "No schedules here."  # another conversation's are not its own
    assert not_here.startswith(f"There is no schedule {schedule_id} here")
    assert removed == f"Removed schedule {schedule_id}."
    assert after == "No schedules here."
    # The firing (and only the one before the removal) is in the transcript, as sent.
    fired_rows = [r for r in rows if (r.platform_message_id or "").startswith("schedule:")]
    assert [r.content for r in fired_rows] == ["Drink some water!"]


async def test_the_limits_refuse_the_21st_schedule_and_a_one_minute_interval(
    tmp_path: Path,
) -> None:
    clock = WallClock("2026-06-01T08:00:00+00:00")
    async with open_fake_model() as fake:
        cfg = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=TOOLS), source="t", env={}
        )
        async with running_gateway(cfg, schedule_clock=clock) as (app, url):
            book = app.parts.schedules
            for i in range(20):
                await book.add("peer:ana", When("every", "1h"), "text", f"n{i}", by="test")
            fake.script(
                calls(("schedule_message", {"every": "1d", "text": "one more"})),
                ok("I can't: you have 20 already."),
                calls(("schedule_message", {"every": "1m", "prompt": "ping"}), ids="b"),
                ok("Too often for me."),
                calls(("schedule_message", {"cron": "* * * * *", "text": "x"}), ids="c"),
                ok("Still too often."),
            )
            async with aiohttp.ClientSession() as http:
                await chat(http, url, "ana", "one more please")
                await chat(http, url, "zoe", "ping me every minute")
                await chat(http, url, "zoe", "then by cron")
            zoe = await book.records("peer:zoe")
    twenty_first, every_minute, by_cron = (fake.requests[i].tool_contents[-1] for i in (1, 3, 5))
    assert twenty_first == (
        "refused: this conversation has 20 schedules already, the most it may have"
        " (remove one with /unschedule ID first)"
    )
    assert every_minute == "refused: every 1m is more often than every 5 min"
    assert by_cron == (
        "refused: cron * * * * * (Europe/Berlin) fires every 1 min; schedules made here may"
        " fire at most every 5 min"
    )
    assert zoe == []
