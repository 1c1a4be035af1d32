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
from gateway.store.schedules import ScheduleRecords
from tests.fakes.clock import FakeClock
from tests.fakes.discord_server import open_fake_discord
from tests.fakes.openai_server import ok, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import Events, config_text, running_gateway

pytestmark = pytest.mark.anyio

GROUP, TOPIC = -1001234, 7
DISCORD_TOKEN, BOT_ID, GUILD_ID, CHANNEL_ID, ALICE = "dc-token", 900, 500, 501, 42


async def test_a_prompt_schedule_fires_into_a_telegram_topic(tmp_path: Path) -> None:
    clock = FakeClock("2026-06-01T06:59:00+00:00")
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
    clock = FakeClock("2026-06-01T11:59:30+00:00")
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
