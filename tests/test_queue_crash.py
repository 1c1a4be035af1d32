"""The crash matrix of the queue modes (SPEC 10): kill -9 at each step of a merged turn.

botmux runs as a real process with ``BOTMUX_FAILPOINT=<point>:kill@<n>``; a Telegram user
sends a burst (collect) or interrupts a slow turn (interrupt); the process kills itself at
that step (after part of the burst was admitted, as the merged turn starts, after its model
call, after its answer commit, while its reply is delivered) and is restarted without the
failpoint. Afterwards every message has one user row, answered by exactly one reply, and
every reply reached the user once (or, where Telegram took a chunk just before the crash, the
one resend ``unrecorded_sends = "resend"`` allows).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.harness import telegram_section
from tests.support.crashes import LONG, crash_at, make_gateway, settle
from tests.support.telegram_world import ALICE

pytestmark = [pytest.mark.anyio, pytest.mark.process]

BURST = ("hello", "one more thing", "and a last one")
# (failpoint, the pass it fires at): each a step of the merged turn.
COLLECT_POINTS = [
    ("after_admission", 2),  # part of the burst admitted
    ("before_model_call", 1),
    ("after_model_call", 1),
    ("after_answer_commit", 1),
    ("after_send_before_record", 1),
    ("between_chunks", 1),
]
# The first turn's call is held and interrupted (no "ok" model call), so the first of each
# later step is the merged turn's.
INTERRUPT_POINTS = [
    ("after_admission", 2),  # the interrupting message admitted
    ("before_model_call", 2),
    ("after_model_call", 1),
    ("after_answer_commit", 1),
    ("after_send_before_record", 1),
    ("between_chunks", 1),
]


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok(LONG)
        yield fake


def section(tg: FakeTelegram, mode: str) -> str:
    return (
        telegram_section(tg)
        + f"allow_users = [{ALICE}]\npoll_timeout_s = 1\nrequest_timeout_s = 3\n"
        f'streaming = "off"\nqueue_mode = "{mode}"\n'
    )


def assert_each_answered_once(db: Path, messages: int) -> tuple[int, int]:
    """Every user row answered by one stored reply, every reply's chunks delivered: how many
    replies there are, and how many chunks were delivered."""
    with sqlite3.connect(db) as conn:
        users = list(
            conn.execute(
                "SELECT content, state, answered_by FROM messages WHERE role = 'user' ORDER BY id"
            )
        )
        replies = {r for (r,) in conn.execute("SELECT id FROM messages WHERE role = 'assistant'")}
        chunks = list(conn.execute("SELECT message_id, state FROM outbox"))
    assert len(users) == messages, users
    assert all(state == "answered" and by in replies for _, state, by in users), users
    assert {by for _, _, by in users} == replies  # no reply answers nothing
    assert {m for m, _ in chunks} == replies and {s for _, s in chunks} == {"delivered"}
    return len(replies), len(chunks)


async def run_matrix(
    tmp_path: Path, model: FakeModel, mode: str, point: str, nth: int, texts: tuple[str, ...]
) -> None:
    async with open_fake_telegram() as tg:
        gateway = make_gateway(tmp_path, model, section(tg, mode), "debounce_s = 0.3\n")
        try:
            await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill@{nth}"})
            if mode == "interrupt":
                model.script(Hold())  # the slow turn, interrupted by the second message
                tg.inject_message(ALICE, texts[0])
                with anyio.fail_after(20):
                    await model.wait_for_requests(1)
                tg.inject_message(ALICE, texts[1])
            else:
                for text in texts:
                    tg.inject_message(ALICE, text)
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            with anyio.fail_after(20):
                await tg.wait_until(lambda: _all_delivered(tmp_path / "botmux.db", len(texts)))
                await settle(gateway)
        finally:
            await gateway.kill()
        sent = tg.sent_messages(ALICE)
    replies, delivered = assert_each_answered_once(tmp_path / "botmux.db", len(texts))
    if mode == "collect" and point == "after_admission":
        assert replies in (1, 2)  # the rest of the burst came after the restart: maybe apart
    else:  # one merged turn, re-run whole after the crash if it had not committed
        assert replies == 1
        assert model.requests[-1].last_user == "\n\n".join(texts)
    resent = 1 if point == "after_send_before_record" else 0  # Telegram cannot deduplicate
    assert len(sent) == delivered + resent, sent
    assert all("Lorem" in text or "The end." in text for text in sent)


def _all_delivered(db: Path, messages: int) -> bool:
    with sqlite3.connect(db) as conn:
        ((answered,),) = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE role = 'user' AND state = 'answered'"
        )
        ((waiting,),) = conn.execute("SELECT COUNT(*) FROM outbox WHERE state != 'delivered'")
    return bool(answered == messages and waiting == 0)


@pytest.mark.parametrize(("point", "nth"), COLLECT_POINTS)
async def test_collect(tmp_path: Path, model: FakeModel, point: str, nth: int) -> None:
    await run_matrix(tmp_path, model, "collect", point, nth, BURST)


@pytest.mark.parametrize(("point", "nth"), INTERRUPT_POINTS)
async def test_interrupt(tmp_path: Path, model: FakeModel, point: str, nth: int) -> None:
    await run_matrix(tmp_path, model, "interrupt", point, nth, BURST[:2])
