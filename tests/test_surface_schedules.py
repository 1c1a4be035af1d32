"""Security review 2026-12-05 of the surfaces schedules add (SPEC 16; docs/SECURITY.md, "the
surfaces added by tools, schedules and Slack"): who may make a schedule, how many, and what
becomes of it. A running gateway with the fake model scripted to call the scheduling tools,
driven through the peer API as its clients drive it.

- A conversation's own schedules go with it: deleting the session (the route, the CLI, the
  retention sweep all delete through one write) left them in the store, firing model turns
  into a conversation that no longer existed and bringing it back (finding SC-1).
- An anonymous completion's conversation may make none: nobody reads it, a firing keeps it
  from ever idling out, and one request could start 20 model turns every 5 minutes for good.
- A value a chat or a model gives is never read for ``${VAR}``: only the config file is.
- A bound across conversations: ``[scheduler] max_total`` (finding SC-2).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gateway.config import parse_config
from gateway.events import AnswerCommitted
from gateway.events_schedules import ScheduleFired, SchedulesFull
from gateway.store import Transcript
from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.harness import Events, config_text, running_gateway
from tests.support.clocks import WallClock
from tests.support.peer import chat

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

TOOLS = """
[scheduler]
agent_tools = true

[[profiles]]
name = "assistant"
conversations = ["peer:*"]
tools = ["schedule_message", "list_schedules", "cancel_schedule"]
"""


async def test_a_deleted_sessions_own_schedules_go_with_it(tmp_path: Path) -> None:
    """SC-1: after ``DELETE /api/sessions/ana`` nothing of Ana's conversation fires again."""
    clock = WallClock("2026-06-01T08:00:00+00:00")
    events = Events()
    async with open_fake_model() as fake:
        fake.script(
            calls(("schedule_message", {"every": "1h", "prompt": "Summarise the news"})),
            ok("Every hour, then."),
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=TOOLS), source="t", env={}
        )
        async with (
            running_gateway(cfg, schedule_clock=clock, events=events) as (app, url),
            aiohttp.ClientSession() as http,
        ):
            await chat(http, url, "ana", "Summarise the news every hour")
            made = await app.parts.schedules.records("peer:ana")
            async with http.delete(f"{url}/api/sessions/ana") as r:
                assert r.status == 200, await r.text()
            left = await app.parts.schedules.records()
            asked = len(fake.requests)
            await clock.move("2026-06-01T09:00:00+00:00")
            await clock.move("2026-06-01T10:00:00+00:00")
            rows = await app.parts.store.read(Transcript("peer:ana"))
    assert len(made) == 1
    assert left == []
    # This node's scheduler still had it in memory: its firing found it gone, and admitted none.
    assert [e.outcome for e in events.of(ScheduleFired)] == ["gone"]
    assert len(fake.requests) == asked  # no model turn for a deleted conversation
    assert rows == []  # and it did not come back


async def test_an_anonymous_completion_cannot_make_a_schedule(tmp_path: Path) -> None:
    """An anonymous conversation (``/v1/chat/completions`` without a session) is nobody's to
    read and is deleted after ``anonymous_retention_days`` unless a firing keeps it busy: the
    tool refuses, with a reason the model can pass on."""
    async with open_fake_model() as fake:
        fake.script(
            calls(("schedule_message", {"every": "5m", "prompt": "Write a long essay"})),
            ok("I can't schedule here."),
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=TOOLS), source="t", env={}
        )
        async with running_gateway(cfg) as (app, url), aiohttp.ClientSession() as http:
            body = {"model": "botmux", "messages": [{"role": "user", "content": "every 5 min"}]}
            async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                answer = await r.json()
            stored = await app.parts.schedules.records()
    assert answer["choices"][0]["message"]["content"] == "I can't schedule here."
    (result,) = fake.requests[1].tool_contents
    assert result == (
        "refused: an anonymous conversation cannot keep scheduled messages;"
        " name a session (X-Botmux-Session) to schedule in it"
    )
    assert stored == []


async def test_a_schedules_text_is_sent_as_written_never_read_for_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewed, holds: ``${VAR}`` is read from the environment in the config file only. A
    text a user (or a prompt-injected model) gives a schedule is stored and sent as it is."""
    monkeypatch.setenv("BOTMUX_SURFACE_SECRET", "hunter2-secret")
    clock = WallClock("2026-06-01T08:00:00+00:00")
    events = Events()
    async with open_fake_model() as fake:
        fake.script(
            calls(("schedule_message", {"every": "1h", "text": "key: ${BOTMUX_SURFACE_SECRET}"})),
            ok("Scheduled."),
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=TOOLS), source="t", env={}
        )
        async with (
            running_gateway(cfg, schedule_clock=clock, events=events) as (app, url),
            aiohttp.ClientSession() as http,
        ):
            await chat(http, url, "ana", "post my key every hour")
            await clock.move("2026-06-01T09:00:00+00:00")
            await events.wait_for(ScheduleFired)
            await events.wait_for(AnswerCommitted, 2)
            rows = await app.parts.store.read(Transcript("peer:ana"))
    fired = [r.content for r in rows if (r.platform_message_id or "").startswith("schedule:")]
    assert fired == ["key: ${BOTMUX_SURFACE_SECRET}"]
    assert all("hunter2" not in (r.content or "") for r in rows)


async def test_schedules_made_across_many_conversations_are_bounded(tmp_path: Path) -> None:
    """SC-2: ``max_per_conversation`` bounds one conversation; one token (or one Slack user
    opening threads, one Telegram user in many topics) makes conversations at will, each with
    its 20. A gateway-wide ``[scheduler] max_total`` refuses the schedule past it."""
    from gateway.schedule_book import ScheduleRefused
    from gateway.schedule_times import When

    extra = TOOLS.replace("agent_tools = true", "agent_tools = true\nmax_total = 40")
    async with open_fake_model() as fake:
        cfg = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=extra), source="t", env={}
        )
        events = Events()
        async with running_gateway(cfg, events=events) as (app, _):
            book = app.parts.schedules
            for session in ("a", "b"):
                for i in range(20):
                    await book.add(f"peer:{session}", When("every", "1h"), "text", f"{i}", by="t")
            with pytest.raises(ScheduleRefused, match="no more scheduled messages"):
                await book.add("peer:c", When("every", "1h"), "text", "41st", by="t")
            (full,) = events.of(SchedulesFull)
            assert (full.conversation, full.total) == ("peer:c", 40)
            await book.remove(
                (await book.records("peer:a"))[0].schedule.id, conversation=None, by="t"
            )
            await book.add("peer:c", When("every", "1h"), "text", "41st, now", by="t")
