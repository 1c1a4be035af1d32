"""The fault storm: hundreds of conversations on three platforms while everything fails a bit.

The fake model answers most calls but throws in rate limits, server errors, timeouts and
dropped connections at random; Telegram and Discord answer some sends with 429s and 5xx.
Afterwards, for every message: one user row, one answer, replies delivered once and in
order, and no two turns of one conversation ever overlapped in the model.
"""

from __future__ import annotations

import random
import sqlite3
from collections import defaultdict
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.openai_server import (
    Outcome,
    Request,
    Sleep,
    drop,
    ok,
    open_fake_model,
    rate_limited,
    server_error,
)
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.harness import config_text, running_gateway, telegram_section

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

PEER, TELEGRAM, DISCORD = 300, 100, 100  # conversations: 500 in all
MESSAGES = 10
BOT = 900_001


def marker(conversation: str, n: int) -> str:
    return f"{conversation}#m{n}"


# It takes about 52 s alone on 2 cores (as it did before the features of issues 15-18): the
# suite-wide 60 s guard fired on a loaded machine. The guard is for a hang, not a time.
@pytest.mark.timeout(180)
async def test_fault_storm_loses_nothing_and_answers_once_in_order(tmp_path: Path) -> None:
    rng = random.Random(20261130)

    def flaky(request: Request) -> Outcome:
        roll = rng.random()
        if roll < 0.04:
            return rate_limited(retry_after=0.05)
        if roll < 0.08:
            return server_error(rng.choice([500, 502, 503, 529]))
        if roll < 0.11:
            return Sleep(2.0)  # past the client's 0.5 s timeout
        if roll < 0.14:
            return drop()
        return ok(f"echo: {request.last_user}")

    tg_users = list(range(10_000, 10_000 + TELEGRAM))
    dc_users = list(range(20_000, 20_000 + DISCORD))
    async with (
        open_fake_model() as model,
        open_fake_telegram() as tg,
        open_fake_discord(token="storm.token", bot_user_id=BOT) as dc,
    ):
        model.default = flaky
        model.session_of = lambda r: r.last_user.split("#")[0]
        for user in dc_users:
            dc.add_user(user, f"u{user}")
            dc.add_dm_channel(user + 1_000_000, user)
        sections = (
            telegram_section(tg) + f"allow_users = {tg_users}\npoll_timeout_s = 1\n\n"
            f'[discord]\ntoken = "storm.token"\napi_base = "{dc.api_base}"\n'
            f'gateway_url = "{dc.gateway_url}"\nallow_users = {dc_users}\n'
            "guild_ready_timeout_s = 0.05\nslash_commands = false\n\n"
            "[gateway]\nmax_concurrent_turns = 256\n"
        )
        model_keys = "backoff_base_s = 0.01\nbackoff_cap_s = 0.05\nmax_retries = 3\n"
        text = config_text(
            tmp_path / "b.db", model.base_url, model_extra=model_keys, extra=sections
        )
        text = text.replace("timeout_s = 5", "timeout_s = 0.5")
        config = parse_config(text, source="storm", env={})

        async with running_gateway(config) as (_, url):

            async def peer_conversation(http: aiohttp.ClientSession, i: int) -> None:
                for n in range(MESSAGES):
                    r = await http.post(
                        f"{url}/api/sessions/p{i}/chat", json={"message": marker(f"p{i}", n)}
                    )
                    assert r.status == 200, await r.text()

            async def platform_faults() -> None:
                # Sprinkle 429s and 5xx over the platforms' sends while the storm runs.
                for _ in range(6):
                    tg.fail_next("sendMessage", status=429, retry_after=1)
                    tg.fail_next("sendMessage", status=502)
                    dc.fail_next(
                        "POST", "/channels/{channel_id}/messages", status=429, retry_after=0.2
                    )
                    dc.fail_next("POST", "/channels/{channel_id}/messages", status=503)
                    await anyio.sleep(1)

            with anyio.fail_after(150):
                async with anyio.create_task_group() as tg_group:
                    tg_group.start_soon(platform_faults)
                    for n in range(MESSAGES):  # each chat's messages arrive in order
                        for user in tg_users:
                            tg.inject_message(user, marker(f"t{user}", n), user_id=user)
                        for user in dc_users:
                            await dc.inject_message(
                                user + 1_000_000, marker(f"d{user}", n), author_id=user
                            )
                    connector = aiohttp.TCPConnector(limit=PEER)
                    async with aiohttp.ClientSession(connector=connector) as http:
                        async with anyio.create_task_group() as peers:
                            for i in range(PEER):
                                peers.start_soon(peer_conversation, http, i)
                    await tg.wait_until(lambda: replies_done(tg_sent(tg), TELEGRAM))
                    await dc.wait_until(lambda: replies_done(dc_sent(dc), DISCORD))

        telegram_replies, discord_replies = tg_sent(tg), dc_sent(dc)

    total = (PEER + TELEGRAM + DISCORD) * MESSAGES
    with sqlite3.connect(tmp_path / "b.db") as conn:
        users = list(
            conn.execute(
                "SELECT id, conversation, content, state FROM messages WHERE role = 'user' ORDER BY id"
            )
        )
        answers = dict(
            conn.execute(
                "SELECT user_row_id, COUNT(*) FROM messages WHERE role = 'assistant' GROUP BY user_row_id"
            )
        )
        answer_order = list(
            conn.execute(
                "SELECT m.conversation, u.content FROM messages m JOIN messages u ON u.id = m.user_row_id WHERE m.role = 'assistant' ORDER BY m.id"
            )
        )
        outbox = dict(conn.execute("SELECT state, COUNT(*) FROM outbox GROUP BY state"))
        failures = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE role = 'assistant' AND failure IS NOT NULL"
        ).fetchone()[0]

    # Nothing lost, nothing twice: one user row per message, each answered exactly once.
    assert len(users) == total
    assert len({content for _, _, content, _ in users}) == total
    assert all(state in ("answered", "failed") for *_, state in users)
    assert all(answers.get(row_id) == 1 for row_id, *_ in users)
    assert outbox == {"delivered": total}
    # Order: per conversation, answers follow admission order, and so did the model's calls.
    admitted: dict[str, list[str]] = defaultdict(list)
    for _, conversation, content, _ in users:
        admitted[conversation].append(content)
    answered: dict[str, list[str]] = defaultdict(list)
    for conversation, content in answer_order:
        answered[conversation].append(content)
    assert answered == admitted
    for contents in admitted.values():
        assert contents == sorted(contents, key=lambda c: int(c.rsplit("#m", 1)[1]))
    # Never two turns of one conversation in the model at once.
    assert set(model.max_concurrency.values()) == {1}
    assert len(model.max_concurrency) == PEER + TELEGRAM + DISCORD
    # The platforms got every reply once, in order (a failure reply carries no marker).
    for replies in (telegram_replies, discord_replies):
        for chat, texts in replies.items():
            assert len(texts) == MESSAGES, (chat, texts)
            numbers = [int(t.rsplit("#m", 1)[1]) for t in texts if "#m" in t]
            assert numbers == sorted(set(numbers)), (chat, texts)
    print(f"storm: {total} messages, {len(model.requests)} model calls, {failures} failure replies")


def tg_sent(tg: FakeTelegram) -> dict[str, list[str]]:
    """What each Telegram user saw, in order (failed sends left out)."""
    chats = {str(call.params["chat_id"]) for call in tg.calls_to("sendMessage")}
    return {chat: tg.sent_messages(int(chat)) for chat in chats}


def dc_sent(dc: FakeDiscord) -> dict[str, list[str]]:
    by_channel: dict[str, list[str]] = defaultdict(list)
    for message in dc.sent_messages():
        by_channel[str(message["channel_id"])].append(str(message["content"]))
    return dict(by_channel)


def replies_done(replies: dict[str, list[str]], chats: int) -> bool:
    return len(replies) == chats and all(len(texts) >= MESSAGES for texts in replies.values())
