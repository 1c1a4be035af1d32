"""Queue modes end to end (SPEC 10): a real gateway in process, real python-telegram-bot and
aiohttp clients, the loopback Bot API server and the fake model. Assertions are on what the
users saw, the rows stored and the calls the model got.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.app import GatewayApp
from gateway.config import parse_config
from tests.fakes.openai_server import FakeModel, ok, streamed
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import config_text, running_gateway, telegram_section
from tests.support.discord_world import ALICE, DM_ID, open_world, running_botmux

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

GROUP = -1001234
BURST = ("hi", "quick question", "about my order", "it has not arrived", "what now?")


@asynccontextmanager
async def gateway(db: Path, model: FakeModel, extra: str) -> AsyncIterator[tuple[GatewayApp, str]]:
    config = parse_config(config_text(db, model.base_url, extra=extra), source="t", env={})
    async with running_gateway(config) as running:
        yield running


def telegram(tg: FakeTelegram, keys: str) -> str:
    return telegram_section(
        tg, f'poll_timeout_s = 1\nallow_chats = [{GROUP}]\ngroup_mode = "all"\n{keys}'
    )


def rows(db: Path) -> list[tuple[int, str, str, str, int | None, int | None]]:
    with sqlite3.connect(db) as conn:
        query = "SELECT id, role, content, state, user_row_id, answered_by FROM messages"
        return list(conn.execute(query + " ORDER BY id"))


async def test_collect_five_telegram_messages_200_ms_apart_get_one_answer(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    model.default = lambda r: ok("One answer for all of that.")
    db = tmp_path / "botmux.db"
    async with gateway(db, model, telegram(tg, 'queue_mode = "collect"\n')):
        sent = []
        for text in BURST:
            sent.append(tg.inject_message(GROUP, text))
            await anyio.sleep(0.2)  # the user's typing pace: the scenario, not a wait
        with anyio.fail_after(15):
            assert await tg.wait_for_sent(1, GROUP) == ["One answer for all of that."]
    assert [r.last_user for r in model.requests] == ["\n\n".join(BURST)]
    stored = rows(db)
    users, (reply,) = stored[:-1], stored[-1:]
    assert [(role, text, state) for _, role, text, state, _, _ in users] == [
        ("user", text, "answered") for text in BURST
    ]
    assert {answered_by for *_, answered_by in users} == {reply[0]}
    assert reply[1:5] == ("assistant", "One answer for all of that.", "final", users[-1][0])
    (params,) = [c.params for c in tg.calls_to("sendMessage")]
    assert params["reply_parameters"]["message_id"] == sent[-1]["message"]["message_id"]


async def test_interrupt_on_telegram_stops_the_slow_turn_and_answers_both(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    # The slow answer streams a preview, then stalls; the second message interrupts it.
    slow = streamed("The first answer, " * 4, "which is slow", hold_after=1)
    model.script(slow, ok("One answer covering both."))
    db = tmp_path / "botmux.db"
    keys = 'queue_mode = "interrupt"\nstreaming = "edit"\nstream_min_chars = 1\n'
    async with gateway(db, model, telegram(tg, keys)):
        tg.inject_message(GROUP, "a slow question")
        with anyio.fail_after(15):
            await model.wait_for_chunks(1)
            await tg.wait_for_sent(1, GROUP)  # the preview message
        tg.inject_message(GROUP, "and one more thing")
        with anyio.fail_after(15):
            await model.wait_for_closed(1)
            await model.wait_for_requests(2)
            await tg.wait_until(lambda: "One answer covering both." in tg.visible_messages(GROUP))
        model.release_streams()
    assert model.closed == [0]
    assert model.requests[1].last_user == "a slow question\n\nand one more thing"
    assert tg.visible_messages(GROUP) == ["One answer covering both."]  # the preview is gone
    assert all("which is slow" not in text for text in tg.sent_messages(GROUP))
    assert [(role, state) for _, role, _, state, _, _ in rows(db)] == [
        ("user", "answered"),
        ("user", "answered"),
        ("assistant", "final"),
    ]


async def test_two_concurrent_peer_requests_in_collect_mode_both_get_the_merged_answer(
    tmp_path: Path, model: FakeModel
) -> None:
    model.default = lambda r: ok(f"merged: {r.last_user!r}")
    db = tmp_path / "botmux.db"
    keys = '[gateway]\nqueue_mode = "collect"\ndebounce_s = 0.5\n'
    answers: dict[str, tuple[int, str]] = {}
    async with gateway(db, model, keys) as (_, url), aiohttp.ClientSession() as http:

        async def ask(text: str) -> None:
            async with http.post(f"{url}/api/sessions/s/chat", json={"message": text}) as r:
                answers[text] = (r.status, (await r.json())["message"]["content"])

        with anyio.fail_after(15):
            async with anyio.create_task_group() as group:
                group.start_soon(ask, "first")
                group.start_soon(ask, "second")
        async with http.post(f"{url}/api/sessions/s/chat", json={"message": "/status"}) as r:
            status = (await r.json())["message"]["content"]
    assert answers["first"] == answers["second"]
    assert answers["first"] in (
        (200, "merged: 'first\\n\\nsecond'"),
        (200, "merged: 'second\\n\\nfirst'"),
    )
    assert len(model.requests) == 1
    assert "Queue mode: collect" in status
    assert [state for _, _, _, state, _, _ in rows(db)] == ["answered", "answered", "final"]


async def test_collect_on_discord_replies_once_to_the_last_message_of_the_burst(
    tmp_path: Path, model: FakeModel
) -> None:
    model.default = lambda r: ok("one answer")
    async with open_world() as dc:
        extra = 'queue_mode = "collect"\nstreaming = "off"\n'
        with anyio.fail_after(30):
            async with running_botmux(tmp_path, dc, model, extra):
                asked = [
                    await dc.inject_message(DM_ID, text, author_id=ALICE) for text in BURST[:3]
                ]
                [reply] = await dc.wait_for_messages(DM_ID, 1)
        sent = dc.sent_messages(DM_ID)
    assert reply["content"] == "one answer" and len(sent) == 1
    assert reply["message_reference"]["message_id"] == asked[-1]["id"]
    assert [r.last_user for r in model.requests] == ["\n\n".join(BURST[:3])]
