"""The Telegram adapter end to end: a real gateway (in process), real python-telegram-bot, the
loopback Bot API server and the fake model. Assertions are on what Telegram received (what a
user saw), the rows in the store and the calls the model got.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from platforms._chunking import utf16_len
from platforms._refusals import BUSY_TEXT, too_long_text
from platforms._typing import SETTLE_S
from platforms.telegram import render
from platforms.telegram._webhook import WEBHOOK_MAX_CONNECTIONS
from platforms.telegram.convert import TEXT_ONLY
from tests.fakes.openai_server import FakeModel, Hold, ok
from tests.fakes.telegram_server import (
    FakeTelegram,
    sticker_extra,
)
from tests.harness import ROOT
from tests.support.telegram_world import ALICE, BOT, GROUP, setup

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def sent_params(tg: FakeTelegram) -> list[dict[str, Any]]:
    return [c.params for c in tg.calls_to("sendMessage")]


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_private_chat_round_trip(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel, mode: str
) -> None:
    s = setup(tmp_path, tg, model, mode)
    model.default = lambda r: ok(f"Hello, **{r.last_user}** & <friends>!")
    async with s.gateway():
        update = tg.inject_message(ALICE, "Alice here")
        await s.push()
        with anyio.fail_after(10):
            assert await tg.wait_for_sent(1, ALICE) == ["Hello, Alice here & <friends>!"]
            if mode == "polling":
                await tg.wait_for_confirmed(update["update_id"])
    (params,) = sent_params(tg)
    assert params["parse_mode"] == "HTML"
    assert params["text"] == "Hello, <b>Alice here</b> &amp; &lt;friends&gt;!"
    assert tg.bot_messages(ALICE)[0]["entities"] == [{"type": "bold", "offset": 7, "length": 10}]
    assert s.rows() == [
        ("telegram:42", "user", "Alice here", "answered"),
        ("telegram:42", "assistant", "Hello, **Alice here** & <friends>!", "final"),
    ]
    assert s.chunks()[0][0] == "delivered"
    assert [c["command"] for c in tg.commands()] == ["start", "help", "new", "status", "stop"]
    if mode == "webhook":
        assert tg.webhook_url == s.webhook_url and tg.webhook_secret == "s3cret-Token_1"
        assert not tg.calls_to("getUpdates")


async def test_webhook_refuses_a_wrong_secret(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model, "webhook")
    async with s.gateway():
        update = tg.inject_message(ALICE, "forged")
        assert await tg.post_webhook(s.webhook_url, update, secret_token="wrong") == 403
        assert await tg.post_webhook(s.webhook_url, update) == 403  # no secret at all
        tg.inject_message(ALICE, "genuine")
        assert await tg.deliver_webhook() == [200, 200]  # the real delivery of both
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == ["echo: forged", "echo: genuine"]
    assert len(model.requests) == 2


async def test_long_reply_arrives_as_ordered_chunks_with_code_intact(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    code = "\n".join(f"    total += values[{i}]  # step {i} < limit & ok" for i in range(150))
    prose = " ".join(f"Sentence {i} explains *one* more thing about **it**." for i in range(60))
    reply = f"{prose}\n\n```python\ndef add(values):\n    total = 0\n{code}\n    return total\n```\n\n{prose}"
    assert len(reply) > 10_000
    model.default = lambda r: ok(reply)
    expected = render.render(reply)
    assert len(expected) >= 3
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "long please")
        with anyio.fail_after(15):
            await tg.wait_for_sent(len(expected), ALICE)
    texts = [p["text"] for p in sent_params(tg)]
    assert texts == expected  # in order, each sent once
    assert all(utf16_len(t) <= 4096 for t in texts)
    messages = tg.bot_messages(ALICE)
    with_code = [m for m in messages if any(e["type"] == "pre" for e in m.get("entities", []))]
    assert len(with_code) >= 2, "the code block spans chunks, each rendered as code"
    code_lines = [line for m in with_code for line in m["text"].split("\n") if "total +=" in line]
    assert len(code_lines) == 150  # no line lost or doubled at the cuts
    assert [c[0] for c in s.chunks()] == ["delivered"] * len(expected)


async def test_entity_rejection_falls_back_to_plain_text(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    model.default = lambda r: ok("A **bold** claim: 1 < 2")
    tg.fail_next(
        "sendMessage",
        status=400,
        description="Bad Request: can't parse entities: Unsupported start tag at byte offset 2",
    )
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "format this")
        with anyio.fail_after(10):
            assert await tg.wait_for_sent(1, ALICE) == ["A bold claim: 1 < 2"]
    first, second = sent_params(tg)
    assert first["parse_mode"] == "HTML" and first["text"] == "A <b>bold</b> claim: 1 &lt; 2"
    assert "parse_mode" not in second and second["text"] == "A bold claim: 1 < 2"
    assert s.chunks()[0][0] == "delivered"


async def test_a_redelivered_update_gives_one_reply_after_a_restart(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        update_id = tg.inject_message(ALICE, "only once")["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)
            await tg.wait_for_confirmed(update_id)
    # As if the first process had crashed before its offset advanced: Telegram sends it again.
    tg.redeliver(update_id)
    async with s.gateway():
        tg.inject_message(ALICE, "and then this")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
            await tg.wait_for_confirmed(update_id)
    assert tg.sent_messages(ALICE) == ["echo: only once", "echo: and then this"]
    assert [r.last_user for r in model.requests] == ["only once", "and then this"]
    assert [row[2] for row in s.rows() if row[1] == "user"] == ["only once", "and then this"]


async def test_a_redelivered_webhook_update_gives_one_reply(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model, "webhook")
    async with s.gateway():
        update_id = tg.inject_message(ALICE, "webhook once")["update_id"]
        assert await tg.deliver_webhook() == [200]
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)
        tg.redeliver(update_id)
        assert await tg.deliver_webhook() == [200]  # acknowledged: it is stored already
        tg.inject_message(ALICE, "next")
        assert await tg.deliver_webhook() == [200]
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == ["echo: webhook once", "echo: next"]
    assert len(model.requests) == 2


async def test_a_429_on_send_is_waited_out_and_the_reply_arrives_once(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    tg.fail_next("sendMessage", status=429, retry_after=1)
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "busy?")
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)
    assert tg.sent_messages(ALICE) == ["echo: busy?"]
    refused, accepted = tg.calls_to("sendMessage")
    assert accepted.at - refused.at >= 1.0  # Telegram's retry_after was honoured
    assert refused.params["text"] == accepted.params["text"]


async def test_server_errors_are_retried_but_an_ambiguous_send_is_not(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.fail_next("sendMessage", status=502)  # a Bot API error answer: nothing was sent
        tg.inject_message(ALICE, "one")
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)
        # The connection drops after the request went out: it may have been delivered, so
        # repeating it could duplicate it. It is not repeated (and is recorded as failed).
        tg.drop_next("sendMessage")
        tg.inject_message(ALICE, "two")
        tg.inject_message(ALICE, "three")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == ["echo: one", "echo: three"]
    assert [p["text"] for p in sent_params(tg)] == [
        "echo: one",
        "echo: one",
        "echo: two",
        "echo: three",
    ]
    assert [c[0] for c in s.chunks()] == ["delivered", "failed", "delivered"]


async def test_typing_starts_and_stops_with_the_turn(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    model.default = lambda r: Hold(ok("done thinking"))
    s = setup(tmp_path, tg, model, keys=f"allow_users = [{ALICE}]\ntyping_interval_s = 0.05\n")
    async with s.gateway():
        tg.inject_message(ALICE, "think hard")
        with anyio.fail_after(10):
            await tg.wait_until(lambda: len(tg.chat_actions(ALICE)) >= 3)  # refreshed
            model.release()
            await tg.wait_for_sent(1, ALICE)
        typing_calls = tg.calls_to("sendChatAction")
        reply_call = tg.calls_to("sendMessage")[0]
        assert typing_calls[-1].at < reply_call.at  # stopped before the reply went out
        assert {c.params["action"] for c in typing_calls} == {"typing"}
        # Nothing refreshes typing after the turn: a further message shows the count moved
        # only for its own turn.
        before = len(tg.chat_actions(ALICE))
        model.default = lambda r: ok("quick")
        tg.inject_message(ALICE, "quick one")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
        after_second = tg.calls_to("sendChatAction")[before:]
        assert after_second and all(c.at < tg.calls_to("sendMessage")[1].at for c in after_second)


async def test_a_typing_call_under_way_is_let_finish_before_the_reply(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """An instant answer ends the turn while its typing call is still on its way to a slow
    Telegram: the call is let finish (its connection stays open for the next call) and the
    reply goes out after it, so "typing..." cannot show up under the reply."""
    answered: list[float] = []

    async def slow_typing(params: dict[str, Any]) -> bool:
        await anyio.sleep(0.3)  # the platform's latency, not a wait for something
        answered.append(time.monotonic())
        return True

    tg.register("sendChatAction", slow_typing)
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "quick question")
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)
    [typing] = tg.calls_to("sendChatAction")
    [reply] = tg.calls_to("sendMessage")
    assert len(answered) == 1 and typing.at < answered[0] <= reply.at


async def test_a_hung_typing_call_does_not_hold_the_reply(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """A typing call Telegram never answers is waited for only ``SETTLE_S``, then cut: the
    reply still goes out, and the turn's row is answered."""
    tg.hang_next("sendChatAction")
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "are you there?")
        with anyio.fail_after(10):
            assert await tg.wait_for_sent(1, ALICE) == ["echo: are you there?"]
    [typing] = tg.calls_to("sendChatAction")
    [reply] = tg.calls_to("sendMessage")
    assert reply.at - typing.at >= SETTLE_S * 0.9  # it was given its chance to finish
    assert [r[3] for r in s.rows()] == ["answered", "final"]


async def test_turns_share_kept_alive_connections_to_telegram(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """Twenty instant turns, each with its typing call and its reply, come on the few
    connections the bot keeps alive: none is closed under a typing call the turn outran."""
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        for i in range(20):
            tg.inject_message(ALICE, f"message {i}")
            with anyio.fail_after(10):
                await tg.wait_for_sent(i + 1, ALICE)
    calls = [c for c in tg.calls if c.method != "getUpdates"]  # long polls have their own
    assert len(tg.calls_to("sendMessage")) == 20 and len(calls) >= 40
    assert all(c.port for c in calls)
    assert len({c.port for c in calls}) <= 2, sorted({c.port for c in calls})


async def test_typing_has_a_hard_deadline(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    model.default = lambda r: Hold(ok("late"))
    keys = f"allow_users = [{ALICE}]\ntyping_interval_s = 0.05\ntyping_deadline_s = 0.3\n"
    s = setup(tmp_path, tg, model, keys=keys)
    async with s.gateway():
        tg.inject_message(ALICE, "never ending")
        with anyio.fail_after(10):
            await model.wait_for_requests(1)
        # Proving an absence needs time to pass: well past the deadline, typing has stopped.
        await anyio.sleep(0.9)
        count = len(tg.chat_actions(ALICE))
        assert 1 <= count <= 8
        await anyio.sleep(0.3)
        assert len(tg.chat_actions(ALICE)) == count
        model.release()
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)


async def test_group_messages_need_a_mention_a_reply_or_a_command(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model, keys=f"allow_chats = [{GROUP}]\n")
    mention = [{"type": "mention", "offset": 0, "length": len(BOT) + 1}]
    async with s.gateway():
        tg.inject_message(GROUP, "just chatting among humans")
        first = tg.inject_message(GROUP, f"@{BOT} what is 2+2?", entities=mention)
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, GROUP)
        bot_message_id = tg.bot_messages(GROUP)[0]["message_id"]
        tg.inject_message(GROUP, "still humans talking")
        tg.inject_message(GROUP, "/status@some_other_bot")
        tg.inject_message(GROUP, "/help@" + BOT)
        tg.inject_message(GROUP, "and times 3?", reply_to_message=bot_message_id)
        tg.inject_message(GROUP, "/ask what about 5?")
        with anyio.fail_after(10):
            await tg.wait_for_sent(4, GROUP)
    assert [r.last_user for r in model.requests] == [
        "what is 2+2?",
        "and times 3?",
        "what about 5?",
    ]
    sent = tg.sent_messages(GROUP)
    assert sent[0] == "echo: what is 2+2?"
    assert sent[1].startswith("I'm botmux")  # /help: answered directly, not a turn
    assert sent[2:] == ["echo: and times 3?", "echo: what about 5?"]
    # In a group the reply quotes the message it answers.
    assert sent_params(tg)[0]["reply_parameters"]["message_id"] == first["message"]["message_id"]


async def test_forum_topics_are_conversations_of_their_own(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model, keys=f'allow_chats = [{GROUP}]\ngroup_mode = "all"\n')
    async with s.gateway():
        tg.inject_message(GROUP, "in topic 7", message_thread_id=7, is_topic_message=True)
        tg.inject_message(GROUP, "in the main chat")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, GROUP)
    by_text = {p["text"]: p for p in sent_params(tg)}
    assert by_text["echo: in topic 7"]["message_thread_id"] == 7
    assert "message_thread_id" not in by_text["echo: in the main chat"]
    assert {row[0] for row in s.rows()} == {f"telegram:{GROUP}:topic:7", f"telegram:{GROUP}"}


@pytest.mark.process
async def test_allow_users_and_pairing(tmp_path: Path, tg: FakeTelegram, model: FakeModel) -> None:
    stranger, other = 777, 888
    s = setup(tmp_path, tg, model, keys=f"allow_users = [{ALICE}]\n")
    async with s.gateway():
        tg.inject_message(stranger, "hi, who are you?")
        with anyio.fail_after(10):
            (pairing,) = await tg.wait_for_sent(1, stranger)
        code = pairing.split("approve telegram ")[1].split()[0]
        assert len(code) == 8
        tg.inject_message(stranger, "hello?? anyone?")  # the code is sent once, not again
        tg.inject_message(GROUP, "@" + BOT + " let me in", user_id=other)  # not allowed anywhere
        tg.inject_message(ALICE, "I am allowed")
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, ALICE)
        assert tg.sent_messages(stranger) == [pairing]
        assert [r.last_user for r in model.requests] == ["I am allowed"]

        result = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "gateway",
                "pairing",
                "approve",
                "telegram",
                code.lower(),
                "--config",
                str(s.path),
            ],
            cwd=ROOT,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()
        assert f"approved telegram user {stranger}" in result.stdout.decode()

        tg.inject_message(stranger, "thanks, I'm in")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, stranger)
    assert tg.sent_messages(stranger)[1] == "echo: thanks, I'm in"
    assert tg.sent_messages(GROUP) == []
    # Strangers' messages before approval were never turns.
    assert [r[2] for r in s.rows() if r[1] == "user"] == ["I am allowed", "thanks, I'm in"]


async def test_new_resets_the_history_the_model_sees(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "my name is Alice")
        tg.inject_message(ALICE, "what is my name?")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
        tg.inject_message(ALICE, "/new")
        with anyio.fail_after(10):
            await tg.wait_for_sent(3, ALICE)
        tg.inject_message(ALICE, "do you know me?")
        with anyio.fail_after(10):
            await tg.wait_for_sent(4, ALICE)
    assert tg.sent_messages(ALICE)[2].startswith("Started a fresh context")
    seen = [[m["content"] for m in r.messages if m["role"] != "system"] for r in model.requests]
    assert seen[1] == ["my name is Alice", "echo: my name is Alice", "what is my name?"]
    assert seen[2] == ["do you know me?"]
    assert len(s.rows()) == 6  # earlier rows stay stored


async def test_stop_cancels_the_running_turn(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    model.default = lambda r: Hold(ok("too late"))
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, "write a novel")
        with anyio.fail_after(10):
            await model.wait_for_requests(1)
        tg.inject_message(ALICE, "/stop")  # skips the queue while the turn runs
        with anyio.fail_after(10):
            assert await tg.wait_for_sent(1, ALICE) == ["Stopping the current reply."]
        model.default = lambda r: ok("short answer")
        tg.inject_message(ALICE, "something short")  # runs after the cancelled turn
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == ["Stopping the current reply.", "short answer"]
    assert [(r[1], r[2], r[3]) for r in s.rows()] == [
        ("user", "write a novel", "cancelled"),
        ("user", "something short", "answered"),
        ("assistant", "short answer", "final"),
    ]


async def test_messages_botmux_cannot_read_get_a_polite_answer_and_no_turn(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """Photos, documents, voice and audio are turns (tests/test_attachment_refs.py); a
    sticker or a location is not, and says what is read."""
    s = setup(tmp_path, tg, model)
    async with s.gateway():
        tg.inject_message(ALICE, extra=sticker_extra())
        tg.inject_message(ALICE, extra={"location": {"latitude": 1.5, "longitude": 2.5}})
        tg.inject_message(ALICE, "and this is text")
        with anyio.fail_after(10):
            await tg.wait_for_sent(3, ALICE)
    sent = tg.sent_messages(ALICE)
    assert sent[0] == sent[1] == TEXT_ONLY
    assert sent[2] == "echo: and this is text"
    assert [r.last_user for r in model.requests] == ["and this is text"]


async def test_a_webhook_flooded_with_slow_sockets_still_takes_telegrams_update(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """The webhook's listener is guarded like the peer API's (platforms._guarded): sockets
    that never finish their request head cannot fill it; at the cap the oldest of them makes
    room, so Telegram's own delivery is taken."""
    s = setup(tmp_path, tg, model, "webhook")
    host, port = s.webhook_url.split("//")[1].split("/")[0].split(":")
    async with s.gateway():
        slow = []
        try:
            for _ in range(WEBHOOK_MAX_CONNECTIONS + 50):
                stream = await anyio.connect_tcp(host, int(port))
                await stream.send(b"POST /telegram/hook HTTP/1.1\r\nHost: x\r\n")  # never ends
                slow.append(stream)
            tg.inject_message(ALICE, "through the crowd")
            with anyio.fail_after(10):
                assert await tg.deliver_webhook() == [200]
                assert await tg.wait_for_sent(1, ALICE) == ["echo: through the crowd"]
            # The oldest slow sockets were closed to make room (they read end-of-stream).
            closed = 0
            for stream in slow[:50]:
                with anyio.move_on_after(1):
                    try:
                        if await stream.receive() == b"":
                            closed += 1
                    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                        closed += 1
            assert closed >= 40
        finally:
            for stream in slow:
                await stream.aclose()


async def test_messages_past_the_limits_are_refused_with_a_notice_and_not_stored(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """SPEC 14 through the real intake: a message over max_message_chars gets a notice, one
    past max_pending_per_conversation a "busy" notice; both are acknowledged and nothing of
    them is stored; the turn that was waiting is answered as usual."""
    keys = (
        f"allow_users = [{ALICE}]\n\n[gateway]\nmax_message_chars = 20\n"
        "max_pending_per_conversation = 1\n"
    )
    s = setup(tmp_path, tg, model, keys=keys)
    model.default = lambda r: Hold(ok(f"echo: {r.last_user}"))
    async with s.gateway():
        tg.inject_message(ALICE, "first")
        with anyio.fail_after(10):
            await model.wait_for_requests(1)  # its turn runs: one pending row, the cap
        busy = tg.inject_message(ALICE, "second")["update_id"]
        long = tg.inject_message(ALICE, "x" * 21)["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(long)
            await tg.wait_for_sent(2, ALICE)
            model.release()
            await tg.wait_for_sent(3, ALICE)
    assert tg.is_confirmed(busy)
    assert tg.sent_messages(ALICE) == [BUSY_TEXT, too_long_text(20), "echo: first"]
    assert [r[2] for r in s.rows()] == ["first", "echo: first"]
    assert len(model.requests) == 1
