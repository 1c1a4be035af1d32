"""A start with work left behind (SPEC section 5): the gateway is ready before that work is
done, resumes it beside the traffic with no more turns at a time than
``gateway.max_concurrent_turns``, and answers each pending row once, across a second crash
midway through."""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from tests.bench._seed import create, seed
from tests.fakes.openai_server import FakeModel, Hold, Ok, Request, open_fake_model
from tests.harness import GatewayProcess, botmux_process

pytestmark = [pytest.mark.anyio, pytest.mark.process]

PENDING = 240  # over 120 conversations: two rows each, behind one answered turn
UNDELIVERED = 60  # replies committed before the crash, their chunk not sent


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as model:
        yield model


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeModel) -> AsyncIterator[GatewayProcess]:
    db = tmp_path / "botmux.db"
    await create(db)
    seed(db, conversations=120, pairs=1, pending=PENDING, undelivered=UNDELIVERED)
    db.chmod(0o600)
    process = botmux_process(
        tmp_path, fake.base_url, db=db, extra="[gateway]\nmax_concurrent_turns = 4\n"
    )
    yield process
    await process.kill()


def counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        (pending,) = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE state = 'pending'"
        ).fetchone()
        (chunks,) = conn.execute("SELECT COUNT(*) FROM outbox WHERE state = 'pending'").fetchone()
        (replies,) = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE role = 'assistant'"
        ).fetchone()
        (doubled,) = conn.execute(
            "SELECT COUNT(*) FROM (SELECT user_row_id FROM messages WHERE role = 'assistant'"
            " GROUP BY user_row_id HAVING COUNT(*) > 1)"
        ).fetchone()
    return {
        "pending": pending,
        "undelivered": chunks,
        "replies": replies,
        "answered twice": doubled,
    }


async def until_done(db: Path) -> dict[str, int]:
    with anyio.fail_after(60):
        while True:
            now = counts(db)
            if now["pending"] == 0 and now["undelivered"] == 0:
                return now
            await anyio.sleep(0.05)


async def test_ready_before_the_backlog_is_done_and_each_row_answered_once(
    gateway: GatewayProcess, fake: FakeModel, tmp_path: Path
) -> None:
    db = tmp_path / "botmux.db"
    released = anyio.Event()

    def held_until_ready(r: Request) -> Ok | Hold:
        return Ok(f"echo: {r.last_user}") if released.is_set() else Hold()

    fake.default = held_until_ready
    await gateway.start()  # /readyz 200 while every resumed turn waits in the model
    assert counts(db)["pending"] == PENDING
    async with aiohttp.ClientSession() as http:
        r = await http.get(f"{gateway.url}/readyz")
        assert r.status == 200
        # A new conversation is served while the backlog waits.
        released.set()
        fake.release()
        r = await http.post(f"{gateway.url}/api/sessions/fresh/chat", json={"message": "hi"})
        assert r.status == 200
        assert (await r.json())["message"]["content"] == "echo: hi"
    done = await until_done(db)
    # 120 seeded replies, the 60 undelivered ones among them, one per pending row, the new one.
    assert done == {
        "pending": 0,
        "undelivered": 0,
        "replies": 120 + UNDELIVERED + PENDING + 1,
        "answered twice": 0,
    }
    assert fake.max_concurrency["all"] <= 4  # gateway.max_concurrent_turns
    # The model saw each pending row's turn once.
    assert len(fake.requests) == PENDING + 1


async def test_a_second_crash_midway_answers_the_rest_once(
    gateway: GatewayProcess, fake: FakeModel, tmp_path: Path
) -> None:
    db = tmp_path / "botmux.db"
    answered = 0

    def some_then_hold(r: Request) -> Ok | Hold:
        nonlocal answered
        answered += 1
        return Ok(f"echo: {r.last_user}") if answered <= 100 else Hold()

    fake.default = some_then_hold
    await gateway.start()
    await fake.wait_for_requests(104)  # 100 answered, 4 held in the model
    gateway.signal(signal.SIGKILL)
    assert await gateway.wait() == -signal.SIGKILL
    midway = counts(db)
    assert 0 < midway["pending"] < PENDING
    assert midway["answered twice"] == 0

    first = len(fake.requests)
    fake.default = lambda r: Ok(f"echo: {r.last_user}")
    await gateway.start()
    done = await until_done(db)
    assert done["answered twice"] == 0
    assert done["replies"] == 120 + UNDELIVERED + PENDING
    # The second run ran only what was still pending at the crash.
    assert len(fake.requests) - first == midway["pending"]
