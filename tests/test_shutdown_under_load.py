"""SIGTERM while 100 turns run: intake stops first, running turns finish or stay pending."""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model
from tests.harness import GatewayProcess, botmux_process

pytestmark = [pytest.mark.anyio, pytest.mark.process]
TURNS = 100


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"done: {r.last_user}"))
        yield fake


def gateway_for(tmp_path: Path, model: FakeModel, drain_s: float) -> GatewayProcess:
    keys = f"[gateway]\nmax_concurrent_turns = 128\ndrain_timeout_s = {drain_s}\n"
    return botmux_process(tmp_path, model.base_url, extra=keys)


def states(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        query = "SELECT state, COUNT(*) FROM messages WHERE role = 'user' GROUP BY state"
        return dict(conn.execute(query))


async def until_draining(url: str) -> None:
    # A session of its own: the turns' requests hold every connection of theirs.
    async with aiohttp.ClientSession() as probe:
        with anyio.fail_after(10):
            while (await probe.get(f"{url}/readyz")).status != 503:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.02)
            late = await probe.post(f"{url}/api/sessions/late/chat", json={"message": "x"})
            assert late.status == 503 and late.headers["Retry-After"]


async def test_running_turns_finish_within_the_drain(tmp_path: Path, model: FakeModel) -> None:
    gateway = gateway_for(tmp_path, model, drain_s=20)
    replies: list[int] = []
    try:
        await gateway.start()
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

            async def turn(i: int) -> None:
                r = await http.post(
                    f"{gateway.url}/api/sessions/s{i}/chat", json={"message": f"m{i}"}
                )
                assert r.status == 200
                assert (await r.json())["message"]["content"] == f"done: m{i}"
                replies.append(i)

            for i in range(TURNS):
                tg.start_soon(turn, i)
            with anyio.fail_after(20):
                await model.wait_for_requests(TURNS)  # all 100 turns are in the model
            gateway.signal(signal.SIGTERM)
            await until_draining(gateway.url)
            model.release()
        assert await gateway.wait() == 0
    finally:
        await gateway.kill()
    assert sorted(replies) == list(range(TURNS))
    assert states(tmp_path / "botmux.db") == {"answered": TURNS}
    assert len(model.requests) == TURNS


async def test_turns_past_the_drain_deadline_stay_pending_and_run_after_restart(
    tmp_path: Path, model: FakeModel
) -> None:
    gateway = gateway_for(tmp_path, model, drain_s=1)
    try:
        await gateway.start()
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

            async def turn(i: int) -> None:
                headers = {"Idempotency-Key": f"k{i}"}
                r = await http.post(
                    f"{gateway.url}/api/sessions/s{i}/chat",
                    json={"message": f"m{i}"},
                    headers=headers,
                )
                # At the drain's deadline the request is told so, to retry later (issue 37).
                assert r.status == 503, await r.text()
                assert (await r.json())["error"]["code"] == "draining"
                assert r.headers["Retry-After"] == "5"

            for i in range(TURNS):
                tg.start_soon(turn, i)
            with anyio.fail_after(20):
                await model.wait_for_requests(TURNS)
            gateway.signal(signal.SIGTERM)  # the model never answers: the deadline passes
            with anyio.fail_after(15):
                assert await gateway.wait() == 0
        assert states(tmp_path / "botmux.db") == {"pending": TURNS}

        model.default = lambda r: ok(f"done: {r.last_user}")
        await gateway.start()
        async with aiohttp.ClientSession() as http:
            # Clients retry with their Idempotency-Key and get the resumed turns' replies.
            for i in range(TURNS):
                with anyio.fail_after(20):
                    r = await http.post(
                        f"{gateway.url}/api/sessions/s{i}/chat",
                        json={"message": f"m{i}"},
                        headers={"Idempotency-Key": f"k{i}"},
                    )
                assert (await r.json())["message"]["content"] == f"done: m{i}"
    finally:
        await gateway.kill()
    assert states(tmp_path / "botmux.db") == {"answered": TURNS}
    with sqlite3.connect(tmp_path / "botmux.db") as conn:
        assert conn.execute(
            "SELECT COUNT(*) FROM messages WHERE role = 'assistant'"
        ).fetchone() == (TURNS,)
