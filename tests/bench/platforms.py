"""Inbound chat-platform throughput: updates per second from the platform to a delivered reply.

The loopback Telegram, Discord and Slack fakes run in this (the load) process; the real
gateway process talks to them through python-telegram-bot, discord.py and slack_sdk; the model
is instant. Every message is from a different user in their own private chat (DMs on Discord
and Slack), so turns run concurrently across conversations, as they would with many users.
Slack runs over Socket Mode (its default) or the Events API (``events=True``); either way the
bot's own replies come back as events (as Slack sends them), which the gateway reads and
drops: part of its cost per message.

Run alone: ``python -m tests.bench.platforms slack`` (or ``slack-events``, ``telegram``,
``discord``), ``--messages N`` per user (default 10), ``--repeat R``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests.bench import _procs
from tests.fakes.discord_server import open_fake_discord
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, open_fake_slack
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import free_port

USERS = 50


async def telegram_updates_per_s(messages_each: int) -> dict[str, float]:
    async with open_fake_telegram() as tg, _procs.fake_model() as model:
        users = list(range(1000, 1000 + USERS))
        section = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\n'
            f"allow_users = {users}\npoll_timeout_s = 5\n"
        )
        with tempfile.TemporaryDirectory() as tmp:
            async with _procs.gateway(Path(tmp), model.url, sections=section) as gw:
                for user in users:  # warm up: one turn per chat
                    tg.inject_message(user, "warm up", user_id=user)
                await tg.wait_for_sent(USERS)
                cpu0 = _procs.cpu_seconds(gw.pid)
                started = time.perf_counter()
                for i in range(messages_each):
                    for user in users:
                        tg.inject_message(user, f"message {i}", user_id=user)
                await tg.wait_for_sent(USERS * (messages_each + 1))
                seconds = time.perf_counter() - started
                cpu = _procs.cpu_seconds(gw.pid) - cpu0
    calls = [c for c in tg.calls if c.method != "getUpdates"]  # long polls have their own
    updates = USERS * messages_each
    return {
        "updates_per_s": updates / seconds,
        "cpu_ms_per_update": 1000 * cpu / updates,
        **_connections([c.port for c in calls]),
    }


async def discord_messages_per_s(messages_each: int) -> dict[str, float]:
    token, bot_id = "bench.discord.token", 900_000
    async with (
        open_fake_discord(token=token, bot_user_id=bot_id) as dc,
        _procs.fake_model() as model,
    ):
        users = list(range(1000, 1000 + USERS))
        for user in users:
            dc.add_user(user, f"user{user}")
            dc.add_dm_channel(50_000 + user, user)
        section = (
            f'[discord]\ntoken = "{token}"\napi_base = "{dc.api_base}"\n'
            f'gateway_url = "{dc.gateway_url}"\nallow_users = {users}\n'
            "guild_ready_timeout_s = 0.05\nslash_commands = false\n"
        )

        def replies() -> int:
            return len(dc.sent_messages())

        with tempfile.TemporaryDirectory() as tmp:
            async with _procs.gateway(Path(tmp), model.url, sections=section) as gw:
                for user in users:
                    await dc.inject_message(50_000 + user, "warm up", author_id=user)
                await dc.wait_until(lambda: replies() >= USERS)
                cpu0 = _procs.cpu_seconds(gw.pid)
                started = time.perf_counter()
                for i in range(messages_each):
                    for user in users:
                        await dc.inject_message(50_000 + user, f"message {i}", author_id=user)
                await dc.wait_until(lambda: replies() >= USERS * (messages_each + 1))
                seconds = time.perf_counter() - started
                cpu = _procs.cpu_seconds(gw.pid) - cpu0
    messages = USERS * messages_each
    return {
        "messages_per_s": messages / seconds,
        "cpu_ms_per_message": 1000 * cpu / messages,
        **_connections([c.port for c in dc.rest_calls]),
    }


async def slack_messages_per_s(messages_each: int, *, events: bool = False) -> dict[str, float]:
    async with open_fake_slack() as slack, _procs.fake_model() as model:
        users = [f"U0BENCH{i:03d}" for i in range(USERS)]
        dms = {user: f"D0BENCH{i:03d}" for i, user in enumerate(users)}
        port = free_port()
        way = (
            f'signing_secret = "{SIGNING_SECRET}"\nlisten = "127.0.0.1:{port}"\n'
            if events
            else f'app_token = "{APP_TOKEN}"\n'
        )
        allowed = ", ".join(f'"{u}"' for u in users)
        section = (
            f'[slack]\nbot_token = "{BOT_TOKEN}"\napi_base = "{slack.api_base}"\n'
            f"allow_users = [{allowed}]\n{way}"
        )

        def replies() -> int:
            return sum(len(slack.bot_messages(dm)) for dm in dms.values())

        with tempfile.TemporaryDirectory() as tmp:
            async with _procs.gateway(Path(tmp), model.url, sections=section) as gw:
                if events:
                    slack.events_url = f"http://127.0.0.1:{port}/slack/events"
                for user in users:
                    await slack.send(dms[user], "warm up", user=user)
                await slack.wait_until(lambda: replies() >= USERS)
                cpu0 = _procs.cpu_seconds(gw.pid)
                started = time.perf_counter()
                for i in range(messages_each):
                    for user in users:
                        await slack.send(dms[user], f"message {i}", user=user)
                await slack.wait_until(lambda: replies() >= USERS * (messages_each + 1))
                seconds = time.perf_counter() - started
                cpu = _procs.cpu_seconds(gw.pid) - cpu0
    messages = USERS * messages_each
    return {
        "messages_per_s": messages / seconds,
        "cpu_ms_per_message": 1000 * cpu / messages,
        "api_calls": float(len(slack.calls)),
        "envelopes": float(len(slack.envelopes)),
    }


def _connections(ports: list[int]) -> dict[str, float]:
    """The platform's API calls over the whole run, and the connections they came on (each
    new one is a TLS handshake in production): kept-alive connections keep the second low."""
    return {"api_calls": len(ports), "connections": len(set(ports))}


async def _main() -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("platform", choices=["telegram", "discord", "slack", "slack-events"])
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.repeat):
        if args.platform == "telegram":
            figures = await telegram_updates_per_s(args.messages)
        elif args.platform == "discord":
            figures = await discord_messages_per_s(args.messages)
        else:
            figures = await slack_messages_per_s(args.messages, events=args.platform != "slack")
        print(json.dumps({k: round(v, 2) for k, v in figures.items()}))


if __name__ == "__main__":
    import anyio

    anyio.run(_main)
