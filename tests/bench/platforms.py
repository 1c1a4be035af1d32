"""Inbound chat-platform throughput: updates per second from the platform to a delivered reply.

The loopback Telegram and Discord fakes run in this (the load) process; the real gateway
process talks to them through python-telegram-bot and discord.py; the model is instant.
Every message is from a different user in their own private chat (DMs on Discord), so
turns run concurrently across conversations, as they would with many users.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests.bench import _procs
from tests.fakes.discord_server import open_fake_discord
from tests.fakes.telegram_server import open_fake_telegram

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


def _connections(ports: list[int]) -> dict[str, float]:
    """The platform's API calls over the whole run, and the connections they came on (each
    new one is a TLS handshake in production): kept-alive connections keep the second low."""
    return {"api_calls": len(ports), "connections": len(set(ports))}
