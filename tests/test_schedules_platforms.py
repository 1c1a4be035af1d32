"""Scheduled messages on the chat platforms (SPEC 16): a cron schedule fires at its minute into a
Telegram chat (a forum topic) and a Discord channel, sent by the real client libraries to the
loopback fakes, as a new message (not a reply: nobody wrote one), through the outbox, with
the platform's message id recorded as the firing's delivery.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.events import ChunkRecorded
from gateway.events_schedules import ScheduleFired
from gateway.schedule_times import When
from gateway.store.schedules import ScheduleRecords
from tests.fakes.discord_server import open_fake_discord
from tests.fakes.openai_server import ok, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import Events, config_text, running_gateway
from tests.support.clocks import WallClock

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

GROUP, TOPIC = -1001234, 7
DISCORD_TOKEN, BOT_ID, GUILD_ID, CHANNEL_ID, ALICE = "dc-token", 900, 500, 501, 42


async def test_a_prompt_schedule_fires_into_a_telegram_topic(tmp_path: Path) -> None:
    clock = WallClock("2026-06-01T06:59:00+00:00")
    events = Events()
    async with open_fake_telegram() as tg, open_fake_model() as model:
        model.script(ok("Good morning, team: three deploys today."))
        extra = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\n'
            "allow_users = [42]\n\n"
            "[[schedules]]\n"
            'name = "standup"\n'
            f'conversation = "telegram:{GROUP}:topic:{TOPIC}"\n'
            'cron = "0 9 * * 1-5"\n'
            'timezone = "Europe/Berlin"\n'
            'prompt = "Write the stand-up reminder."\n'
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", model.base_url, extra=extra), source="t", env={}
        )
        async with running_gateway(cfg, schedule_clock=clock, events=events) as (app, _):
            await clock.move("2026-06-01T07:00:00+00:00")  # Monday, 09:00 in Berlin
            (fired,) = await events.wait_for(ScheduleFired)
            sent = await tg.wait_for_sent(1, GROUP)
            await events.wait_for(ChunkRecorded)
            (record,) = await app.parts.store.read(ScheduleRecords())
            (message,) = tg.bot_messages(GROUP)
    assert fired.platform == "telegram" and fired.due == "2026-06-01T07:00:00Z"
    assert sent == ["Good morning, team: three deploys today."]
    assert message.get("message_thread_id") == TOPIC  # in its topic
    assert "reply_to_message" not in message  # a new message, not a reply
    assert model.requests[0].messages[-1]["content"] == "Write the stand-up reminder."
    assert record.delivery == "delivered"
    assert record.delivered_id == f"{GROUP}:{message['message_id']}"


async def test_a_text_schedule_fires_into_a_discord_channel(tmp_path: Path) -> None:
    clock = WallClock("2026-06-01T11:59:30+00:00")
    events = Events()
    async with (
        open_fake_discord(token=DISCORD_TOKEN, bot_user_id=BOT_ID) as dc,
        open_fake_model() as model,
    ):
        dc.add_user(ALICE, "alice")
        dc.add_guild(GUILD_ID, "guild", member_ids=[ALICE])
        dc.add_text_channel(GUILD_ID, CHANNEL_ID, "general")
        extra = (
            f'[discord]\ntoken = "{DISCORD_TOKEN}"\napi_base = "{dc.api_base}"\n'
            f'gateway_url = "{dc.gateway_url}"\nallow_users = [{ALICE}]\n'
            f'allow_guilds = [{GUILD_ID}]\nguild_access = "everyone"\n'
            "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\nconnect_timeout_s = 10\n\n"
            "[[schedules]]\n"
            'name = "lunch"\n'
            f'conversation = "discord:{CHANNEL_ID}"\n'
            'cron = "0 12 * * *"\n'
            'text = "Lunch **now**."\n'
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", model.base_url, extra=extra), source="t", env={}
        )
        async with running_gateway(cfg, schedule_clock=clock, events=events) as (app, _):
            await clock.move("2026-06-01T12:00:00+00:00")
            (fired,) = await events.wait_for(ScheduleFired)
            (message,) = await dc.wait_for_messages(CHANNEL_ID, 1)
            await events.wait_for(ChunkRecorded)
            (record,) = await app.parts.store.read(ScheduleRecords())
    assert fired.platform == "discord" and fired.due == "2026-06-01T12:00:00Z"
    assert message["content"] == "Lunch **now**."
    assert message.get("message_reference") is None  # not a reply
    assert model.requests == []  # a text: no model call
    assert record.delivery == "delivered" and record.delivered_id == str(message["id"])


async def test_schedules_and_unschedule_on_telegram_and_discord(tmp_path: Path) -> None:
    dm = 777
    async with (
        open_fake_telegram() as tg,
        open_fake_discord(token=DISCORD_TOKEN, bot_user_id=BOT_ID) as dc,
        open_fake_model() as model,
    ):
        dc.add_user(ALICE, "alice")
        dc.add_dm_channel(dm, ALICE)
        extra = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\nallow_users = [42]\n\n'
            f'[discord]\ntoken = "{DISCORD_TOKEN}"\napi_base = "{dc.api_base}"\n'
            f'gateway_url = "{dc.gateway_url}"\nallow_users = [{ALICE}]\n'
            "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\nconnect_timeout_s = 10\n"
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", model.base_url, extra=extra), source="t", env={}
        )
        async with running_gateway(cfg, schedule_clock=WallClock("2026-06-01T08:00:00Z")) as (
            app,
            _,
        ):
            book = app.parts.schedules
            daily = When("cron", "0 9 * * *")
            on_telegram = await book.add("telegram:42", daily, "text", "tea", by="t")
            on_discord = await book.add(f"discord:{dm}", daily, "text", "tea", by="t")
            again = await book.add(f"discord:{dm}", daily, "text", "more tea", by="t")

            tg.inject_message(42, "/schedules")
            tg.inject_message(42, f"/unschedule {on_telegram.id}")
            telegram = await tg.wait_for_sent(2, 42)

            await dc.inject_message(dm, f"/unschedule {on_discord.id}", author_id=ALICE)
            (by_text,) = await dc.wait_for_messages(dm, 1)
            await dc.inject_interaction(
                dm,
                "unschedule",
                user_id=ALICE,
                options=[{"type": 3, "name": "id", "value": again.id}],
            )
            await dc.wait_until(lambda: len(dc.interaction_responses) == 1)
            left = await app.parts.schedules.records()
    assert telegram[0].startswith(f"{on_telegram.id}: cron 0 9 * * *, text 'tea'")
    assert telegram[1] == f"Removed schedule {on_telegram.id}."
    assert by_text["content"] == f"Removed schedule {on_discord.id}."
    assert dc.interaction_responses[0]["data"]["content"] == f"Removed schedule {again.id}."
    assert left == []
