"""The Discord adapter end to end: botmux (in-process, and as a real process for kill -9)
with real discord.py against the loopback fake Discord (tests/fakes/discord_server.py) and
the fake model. Assertions are on what users and operators see: the messages in Discord's
channels, the calls Discord and the model received, the rows in the store.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeModel, Hold, ok
from tests.harness import ROOT, botmux_process
from tests.support.discord_world import (
    ALICE,
    BOB,
    BOT_ID,
    CHANNEL_ID,
    DM_ID,
    OPEN_CHANNEL_ID,
    OTHER_BOT_ID,
    OTHER_CHANNEL_ID,
    STRANGER,
    STRANGER_DM_ID,
    THREAD_ID,
    discord_config_text,
    discord_toml,
    mention,
    open_world,
    running_botmux,
)

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

SEND_ROUTE = "/channels/{channel_id}/messages"
TYPING_ROUTE = "/channels/{channel_id}/typing"


def rows(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, content, state FROM messages ORDER BY id"))


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_world() as fake:
        yield fake


# -- round trips, gating, the loop guard ------------------------------------------------------


async def test_dm_round_trip_replies_to_the_message_with_typing(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            asked = await dc.inject_message(DM_ID, "hello there", author_id=ALICE)
            [reply] = await dc.wait_for_messages(DM_ID, 1)
    assert reply["content"] == "echo: hello there"
    assert reply["message_reference"]["message_id"] == asked["id"]
    assert [r.last_user for r in model.requests] == ["hello there"]
    [send] = dc.calls("POST", SEND_ROUTE)
    assert send.json["enforce_nonce"] is True and 0 < len(send.json["nonce"]) <= 25
    assert send.json["allowed_mentions"]["parse"] == []
    typing = dc.calls("POST", TYPING_ROUTE)
    assert typing and typing[0].path == f"/channels/{DM_ID}/typing"
    assert dc.rest_calls.index(typing[0]) < dc.rest_calls.index(send)
    assert rows(tmp_path / "botmux.db") == [
        ("user", "hello there", "answered"),
        ("assistant", "echo: hello there", "final"),
    ]


async def test_a_typing_call_under_way_is_let_finish_before_the_reply(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    """An instant answer outruns a slow typing call: the call is let finish (its kept-alive
    connection stays open) and the reply is sent after it, never under "typing..."."""
    dc.typing_latency_s = 0.3
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            await dc.inject_message(DM_ID, "quick question", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 1)
    [typing] = dc.calls("POST", TYPING_ROUTE)
    [send] = dc.calls("POST", SEND_ROUTE)
    assert typing.status == 204 and typing.at <= send.arrived


async def test_turns_share_kept_alive_connections_to_discord(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    """Twenty instant turns in a DM, each with its typing call and its reply, reuse the
    connections discord.py keeps alive: none is closed under a typing call the turn outran."""
    dc.typing_latency_s = 0.05  # a round trip the instant model outruns
    with anyio.fail_after(60):
        async with running_botmux(tmp_path, dc, model):
            for i in range(20):
                await dc.inject_message(DM_ID, f"message {i}", author_id=ALICE)
                await dc.wait_for_messages(DM_ID, i + 1)
    calls = dc.calls("POST", TYPING_ROUTE) + dc.calls("POST", SEND_ROUTE)
    assert len(calls) >= 40 and all(c.port for c in calls)
    assert len({c.port for c in calls}) <= 2, sorted({c.port for c in calls})


async def test_guild_mention_gating_and_the_bot_loop_guard(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            await dc.inject_message(CHANNEL_ID, "just chatting, no bot here", author_id=BOB)
            await dc.inject_message(CHANNEL_ID, mention("from a bot"), author_id=OTHER_BOT_ID)
            await dc.inject_message(OTHER_CHANNEL_ID, mention("other guild"), author_id=ALICE)
            asked = await dc.inject_message(CHANNEL_ID, mention("what is 2+2?"), author_id=BOB)
            [first] = await dc.wait_for_messages(CHANNEL_ID, 1)
            # A reply to the bot's message addresses it without a mention.
            await dc.inject_message(
                CHANNEL_ID, "and 3+3?", author_id=BOB, message_reference=int(first["id"])
            )
            await dc.wait_for_messages(CHANNEL_ID, 2)
            # Threads are conversations of their own; the mention may sit anywhere.
            await dc.inject_message(THREAD_ID, f"in a thread <@{BOT_ID}>", author_id=BOB)
            await dc.wait_for_messages(THREAD_ID, 1)
            # A channel on answer_all_channels needs no mention.
            await dc.inject_message(OPEN_CHANNEL_ID, "open question", author_id=BOB)
            await dc.wait_for_messages(OPEN_CHANNEL_ID, 1)
            # Another bot in an answer-all channel is still never a turn.
            await dc.inject_message(OPEN_CHANNEL_ID, "bot chatter", author_id=OTHER_BOT_ID)
            await dc.inject_message(OPEN_CHANNEL_ID, "last one", author_id=BOB)
            await dc.wait_for_messages(OPEN_CHANNEL_ID, 2)
    assert [r.last_user for r in model.requests] == [
        "what is 2+2?",
        "and 3+3?",
        "in a thread",
        "open question",
        "last one",
    ]
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == [
        "echo: what is 2+2?",
        "echo: and 3+3?",
    ]
    assert dc.sent_messages(CHANNEL_ID)[0]["message_reference"]["message_id"] == asked["id"]
    assert dc.sent_messages(OTHER_CHANNEL_ID) == []
    # Every reply was echoed back as a MESSAGE_CREATE (as Discord does); none became a turn.
    assert len(dc.sent_messages()) == 5 and len(model.requests) == 5


async def test_a_long_reply_with_code_arrives_in_order_under_2000_with_fences_intact(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    code = "\n".join(f"    print('line {n:03d} of the example program')" for n in range(120))
    prose = " ".join(f"Sentence {n} explains the program step by step." for n in range(40))
    answer = f"{prose}\n\n```python\n{code}\n```\n\n{prose}"
    assert len(answer) > 6000
    model.default = lambda r: ok(answer)
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            await dc.inject_message(DM_ID, "show me a long program", author_id=ALICE)
            await dc.wait_until(lambda: len(dc.sent_messages(DM_ID)) >= 4)
        # Leaving the block drains: every queued chunk was delivered before it returns.
    assert _undelivered(tmp_path / "botmux.db") == 0
    sent = [m["content"] for m in dc.sent_messages(DM_ID)]
    assert len(sent) >= 4 and all(len(m) <= 2000 for m in sent)
    for message in sent:
        assert message.count("```") % 2 == 0, message  # every piece opens what it closes
    # Only the pieces' own fence lines were added: the code lines arrive whole and in order.
    lines = [line for m in sent for line in m.splitlines() if line.startswith("    print")]
    assert lines == code.splitlines()
    assert (
        "".join(sent).replace("```python\n", "").replace("```", "").split()
        == answer.replace("```python\n", "").replace("```", "").split()
    )
    # The first piece replies to the question; the rest follow it.
    assert "message_reference" in dc.sent_messages(DM_ID)[0]
    assert all("message_reference" not in m for m in dc.sent_messages(DM_ID)[1:])


def _undelivered(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        [(count,)] = conn.execute("SELECT COUNT(*) FROM outbox WHERE state = 'pending'")
    return int(count)


# -- sends that fail, sockets that drop, events seen twice ------------------------------------


async def test_rate_limited_and_failed_sends_are_retried_and_arrive_once(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            # A 429 as Discord sends it: discord.py's bucket handling waits it out.
            dc.fail_next("POST", SEND_ROUTE, status=429, retry_after=0.2)
            await dc.inject_message(DM_ID, "first", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 1)
            # A 429 without the headers discord.py trusts, then a 503: discord.py gives up
            # at once and our courier retries (safe: the nonce makes a repeat harmless).
            dc.fail_next("POST", SEND_ROUTE, status=429, via=False)
            dc.fail_next("POST", SEND_ROUTE, status=503)
            await dc.inject_message(DM_ID, "second", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 2)
    assert [m["content"] for m in dc.sent_messages(DM_ID)] == ["echo: first", "echo: second"]
    sends = dc.calls("POST", SEND_ROUTE)
    assert [c.status for c in sends] == [429, 200, 429, 503, 200]
    assert sends[2].json["nonce"] == sends[3].json["nonce"] == sends[4].json["nonce"]
    assert sends[0].json["nonce"] != sends[2].json["nonce"]


async def test_websocket_dropped_mid_turn_resumes_and_the_reply_arrives_once(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    model.default = lambda r: Hold(ok(f"answer to {r.last_user}"))
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model) as app:
            await dc.inject_message(DM_ID, "slow question", author_id=ALICE)
            await model.wait_for_requests(1)
            with dc.connections_held():
                await dc.drop_websocket(resumable=True)
                await dc.wait_until(lambda: len(dc.connections) == 2)
                assert not app.readiness()["discord"]
                model.release()  # the turn ends while the gateway is away: REST still works
                await dc.wait_for_messages(DM_ID, 1)
            await dc.wait_for_dispatch("RESUMED")
            await dc.inject_message(DM_ID, "still there?", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 2)
            assert app.readiness()["discord"]
    assert [m["content"] for m in dc.sent_messages(DM_ID)] == [
        "answer to slow question",
        "answer to still there?",
    ]
    assert len(model.requests) == 2
    assert (len(dc.ops(2)), len(dc.ops(6))) == (1, 1)  # one IDENTIFY, one RESUME


async def test_a_replayed_message_create_gives_one_turn(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            asked = await dc.inject_message(CHANNEL_ID, mention("once only"), author_id=BOB)
            await dc.wait_for_messages(CHANNEL_ID, 1)
            await dc.redispatch(int(asked["id"]))
            await dc.redispatch(int(asked["id"]))
            # Events are handled in order: once this is answered, the replays were seen.
            await dc.inject_message(CHANNEL_ID, mention("next"), author_id=BOB)
            await dc.wait_for_messages(CHANNEL_ID, 2)
    assert [r.last_user for r in model.requests] == ["once only", "next"]
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["echo: once only", "echo: next"]
    assert [role for role, _, _ in rows(tmp_path / "botmux.db")] == ["user", "assistant"] * 2


async def test_messages_sent_while_the_session_was_lost_are_backfilled_and_answered_once(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            await dc.inject_message(CHANNEL_ID, mention("before"), author_id=BOB)
            await dc.inject_message(DM_ID, "dm before", author_id=ALICE)
            await dc.wait_for_messages(CHANNEL_ID, 1)
            await dc.wait_for_messages(DM_ID, 1)
            with dc.connections_held():
                await dc.drop_websocket(resumable=False)
                # Nobody is told of these: only channel history has them.
                await dc.inject_message(CHANNEL_ID, mention("while away 1"), author_id=BOB)
                await dc.inject_message(CHANNEL_ID, "chatter, not for the bot", author_id=BOB)
                await dc.inject_message(CHANNEL_ID, mention("while away 2"), author_id=ALICE)
                await dc.inject_message(DM_ID, "dm while away", author_id=ALICE)
                # Not a conversation the bot was active in: not backfilled.
                await dc.inject_message(THREAD_ID, mention("unseen thread"), author_id=BOB)
            await dc.wait_for_messages(CHANNEL_ID, 3)
            await dc.wait_for_messages(DM_ID, 2)
            await dc.inject_message(DM_ID, "after", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 3)
    assert dc.statistics()["sessions"] == 2  # a new session, not a resume
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == [
        "echo: before",
        "echo: while away 1",
        "echo: while away 2",
    ]
    assert [m["content"] for m in dc.sent_messages(DM_ID)] == [
        "echo: dm before",
        "echo: dm while away",
        "echo: after",
    ]
    assert sorted(r.last_user for r in model.requests) == sorted(
        ["before", "dm before", "while away 1", "while away 2", "dm while away", "after"]
    )
    history = dc.calls("GET", SEND_ROUTE)
    assert {c.path for c in history} == {
        f"/channels/{CHANNEL_ID}/messages",
        f"/channels/{DM_ID}/messages",
    }
    assert all(int(c.query["limit"]) <= 50 for c in history)


# -- access: allow lists and DM pairing --------------------------------------------------------


@pytest.mark.process
async def test_allow_lists_and_dm_pairing_approved_by_the_operator(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    config_file = tmp_path / "botmux.toml"
    config_file.write_text(discord_config_text(tmp_path, dc, model))
    with anyio.fail_after(40):
        async with running_botmux(tmp_path, dc, model):
            await dc.inject_message(STRANGER_DM_ID, "hi, who are you?", author_id=STRANGER)
            [pairing] = await dc.wait_for_messages(STRANGER_DM_ID, 1)
            code = pairing["content"].rsplit(" ", 1)[-1].strip("`")
            assert f"botmux pairing approve discord {code}" in pairing["content"]
            await dc.inject_message(STRANGER_DM_ID, "hello??", author_id=STRANGER)
            # Events are handled in order: once alice is answered, "hello??" was refused.
            await dc.inject_message(DM_ID, "am I in?", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 1)
            assert len(dc.sent_messages(STRANGER_DM_ID)) == 1  # the code is sent once

            cli = [sys.executable, "-m", "gateway", "--config", str(config_file)]
            approve = await anyio.run_process(
                [*cli, "pairing", "approve", "discord", code],
                cwd=ROOT,
                check=False,
            )
            assert approve.returncode == 0, approve.stderr
            assert f"approved discord user {STRANGER}" in approve.stdout.decode()
            await dc.inject_message(STRANGER_DM_ID, "now?", author_id=STRANGER)
            [_, answer] = await dc.wait_for_messages(STRANGER_DM_ID, 2)
    assert answer["content"] == "echo: now?"
    assert [r.last_user for r in model.requests] == ["am I in?", "now?"]
    stored = [content for role, content, _ in rows(tmp_path / "botmux.db") if role == "user"]
    assert stored == ["am I in?", "now?"]  # refused messages are never admitted


@pytest.mark.parametrize("access", ['guild_access = "allowed"\n', "# guild_access: default\n"])
async def test_guild_access_allowed_answers_only_allowed_and_paired_users(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel, access: str
) -> None:
    """``allowed`` is also the default: a guild member nobody let in is not served."""
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model, access):
            await dc.inject_message(CHANNEL_ID, mention("bob asks"), author_id=BOB)
            await dc.inject_message(CHANNEL_ID, mention("alice asks"), author_id=ALICE)
            await dc.wait_for_messages(CHANNEL_ID, 1)
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["echo: alice asks"]
    assert [r.last_user for r in model.requests] == ["alice asks"]


# -- commands ---------------------------------------------------------------------------------


async def test_commands_as_plain_text_and_as_registered_slash_commands(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            [put] = await dc.wait_for_calls("PUT", "/applications/{application_id}/commands")
            await dc.inject_message(DM_ID, "remember: blue", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 1)
            await dc.inject_message(DM_ID, "/new", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 2)
            await dc.inject_message(CHANNEL_ID, mention("/status"), author_id=BOB)
            await dc.wait_for_messages(CHANNEL_ID, 1)
            await dc.inject_message(CHANNEL_ID, "/help", author_id=BOB)  # not addressed
            await dc.inject_interaction(CHANNEL_ID, "help", user_id=BOB)
            await dc.inject_interaction(DM_ID, "stop", user_id=ALICE)
            await dc.inject_interaction(STRANGER_DM_ID, "status", user_id=STRANGER)
            await dc.wait_until(lambda: len(dc.interaction_responses) == 3)
            await dc.inject_message(DM_ID, "what colour?", author_id=ALICE)
            await dc.wait_for_messages(DM_ID, 3)
    # The one command table's order (Discord's client lists them alphabetically anyway).
    assert [c["name"] for c in put.json] == ["help", "new", "status", "stop"]
    assert [c["name"] for c in dc.commands()] == ["help", "new", "status", "stop"]
    dm = [m["content"] for m in dc.sent_messages(DM_ID)]
    assert dm[1].startswith("Started a fresh context")
    [status] = [m["content"] for m in dc.sent_messages(CHANNEL_ID)]
    assert status.startswith("Model: gpt-test")
    replies = {r["data"]["content"].split("\n", 1)[0]: r["data"] for r in dc.interaction_responses}
    assert set(replies) == {
        "I'm botmux, a gateway to an AI assistant. Send a message and I'll answer.",
        "Nothing is running.",
        "You're not on this bot's allow list.",
    }
    assert replies["Nothing is running."].get("flags", 0) & 64 == 0  # /stop: visible
    # Commands skip the model; /new means the last turn saw no earlier history.
    assert [r.last_user for r in model.requests] == ["remember: blue", "what colour?"]
    assert [m["role"] for m in model.requests[-1].messages] == ["system", "user"]


# -- restarts: a re-sent chunk, and kill -9 between admission and reply -------------------------


async def test_a_chunk_resent_after_a_restart_is_deduplicated_by_its_nonce(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    db = tmp_path / "botmux.db"
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, dc, model):
            await dc.inject_message(DM_ID, "answer me once", author_id=ALICE)
            [sent] = await dc.wait_for_messages(DM_ID, 1)
        # A crash between Discord's answer and the store's record of it looks like this:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE outbox SET state = 'pending', platform_message_id = NULL")
        async with running_botmux(tmp_path, dc, model):
            await dc.wait_for_calls("POST", SEND_ROUTE, 2)
    sends = dc.calls("POST", SEND_ROUTE)
    assert sends[0].json["nonce"] == sends[1].json["nonce"]
    assert [m["id"] for m in dc.sent_messages(DM_ID)] == [sent["id"]]
    with sqlite3.connect(db) as conn:
        assert list(conn.execute("SELECT state, platform_message_id FROM outbox")) == [
            ("delivered", sent["id"])
        ]
    assert len(model.requests) == 1


@pytest.mark.process
async def test_kill_9_between_admission_and_reply_gives_one_reply_after_restart(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    gateway = botmux_process(tmp_path, model.base_url, extra=discord_toml(dc))
    model.default = lambda r: Hold()
    try:
        await gateway.start()
        with anyio.fail_after(20):
            await dc.inject_message(CHANNEL_ID, mention("survive this"), author_id=BOB)
            await model.wait_for_requests(1)  # admitted, and the turn is in the model
        gateway.signal(signal.SIGKILL)
        assert await gateway.wait() == -signal.SIGKILL
        assert rows(tmp_path / "botmux.db") == [("user", "survive this", "pending")]
        assert dc.sent_messages(CHANNEL_ID) == []

        model.default = lambda r: ok("made it")
        await gateway.start()
        with anyio.fail_after(20):
            [reply] = await dc.wait_for_messages(CHANNEL_ID, 1)
            await dc.inject_message(CHANNEL_ID, mention("and now?"), author_id=BOB)
            await dc.wait_for_messages(CHANNEL_ID, 2)
        gateway.signal(signal.SIGTERM)
        assert await gateway.wait() == 0
    finally:
        await gateway.kill()
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["made it", "made it"]
    assert reply["message_reference"]["message_id"] is not None
    assert rows(tmp_path / "botmux.db") == [
        ("user", "survive this", "answered"),
        ("assistant", "made it", "final"),
        ("user", "and now?", "answered"),
        ("assistant", "made it", "final"),
    ]
    assert [r.last_user for r in model.requests] == ["survive this", "survive this", "and now?"]
    assert dc.statistics()["sessions"] == 2
