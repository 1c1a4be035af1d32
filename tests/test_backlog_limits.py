"""Bounds on what waits (SPEC section 14): the pending caps and the message length, checked
before a message is stored; a redelivery is still recognised at the cap; the caps hold across
a restart. Against the real gateway (a real process for the flood), the fake model holding
every turn."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.messages import Inbound
from gateway.store import AdmitRow, open_sqlite_store
from tests.fakes.openai_server import Hold, ok, open_fake_model
from tests.harness import (
    botmux_process,
    make_config,
    running_gateway,
)

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def user_rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(
            conn.execute("SELECT conversation, state FROM messages WHERE role = 'user' ORDER BY id")
        )


@pytest.mark.process
@pytest.mark.timeout(180)
async def test_a_flood_of_one_conversation_stores_the_cap_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    db = tmp_path / "botmux.db"
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(
            ok(f"echo: {r.last_user}")
        )  # the slowest model: no turn ends during the flood
        keys = "[gateway]\nmax_pending_per_conversation = 32\ndrain_timeout_s = 0\n"
        gateway = botmux_process(tmp_path, fake.base_url, extra=keys)
        await gateway.start()
        refused: list[tuple[int, str | None, dict[str, object]]] = []
        all_refused = anyio.Event()
        try:
            connector = aiohttp.TCPConnector(limit=300)
            async with aiohttp.ClientSession(connector=connector) as http:

                async def one(i: int) -> None:
                    r = await http.post(
                        f"{gateway.url}/api/sessions/flood/chat", json={"message": f"m{i}"}
                    )
                    refused.append((r.status, r.headers.get("Retry-After"), await r.json()))
                    if len(refused) == 1000 - 32:
                        all_refused.set()

                async with anyio.create_task_group() as tg:
                    for i in range(1000):
                        tg.start_soon(one, i)
                    with anyio.fail_after(120):
                        await all_refused.wait()
                    rows = user_rows(db)
                    tg.cancel_scope.cancel()  # the 32 admitted requests still wait
        finally:
            await gateway.kill()
    assert rows == [("peer:flood", "pending")] * 32
    assert {(status, retry) for status, retry, _ in refused} == {(429, "5")}
    assert {body["error"]["code"] for _, _, body in refused} == {"conversation_busy"}  # type: ignore[index]
    assert len(fake.requests) == 1  # one turn at a time: the rest wait in the store


async def test_the_gateway_cap_counts_every_conversation_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    extra = "[gateway]\nmax_pending_total = 5\ndrain_timeout_s = 0\n"
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"echo: {r.last_user}"))
        statuses: list[tuple[int, str]] = []
        fifteen = anyio.Event()
        async with (
            running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
            aiohttp.ClientSession() as http,
        ):

            async def one(i: int) -> None:
                r = await http.post(f"{url}/api/sessions/s{i}/chat", json={"message": "hi"})
                if r.status != 200:
                    statuses.append((r.status, (await r.json())["error"]["code"]))
                    if len(statuses) == 15:
                        fifteen.set()

            async with anyio.create_task_group() as tg:
                # Five conversations fill the gateway (their turns wait on the model). They
                # go one after another: the gateway-wide count is an upper bound while
                # admissions are in flight (gateway/backlog.py), so a concurrent burst may be
                # refused a little early; past the cap it is refused exactly.
                for i in range(5):
                    tg.start_soon(one, i)
                    with anyio.fail_after(10):
                        await fake.wait_for_requests(i + 1)
                for i in range(5, 20):
                    tg.start_soon(one, i)
                with anyio.fail_after(30):
                    await fifteen.wait()
                tg.cancel_scope.cancel()
        assert statuses == [(429, "gateway_busy")] * 15
        assert len(user_rows(db)) == 5
        # After a restart the five still wait (the store counts them): a sixth is refused.
        async with (
            running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            r = await http.post(f"{url}/api/sessions/new/chat", json={"message": "hi"})
            assert r.status == 429
            assert r.headers["Retry-After"] == "30"
        assert len(user_rows(db)) == 5


async def test_a_redelivery_at_the_cap_is_a_duplicate_not_a_refusal(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    extra = "[gateway]\nmax_pending_per_conversation = 2\ndrain_timeout_s = 0\n"
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"echo: {r.last_user}"))
        async with (
            running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            replies: dict[str, tuple[int, object]] = {}

            async def send(name: str, key: str) -> None:
                r = await http.post(
                    f"{url}/api/sessions/s/chat",
                    json={"message": f"text of {key}"},
                    headers={"Idempotency-Key": key},
                )
                replies[name] = (r.status, (await r.json()))

            async with anyio.create_task_group() as tg:
                tg.start_soon(send, "a", "key-a")
                tg.start_soon(send, "b", "key-b")
                with anyio.fail_after(10):
                    while len(user_rows(db)) < 2:  # noqa: ASYNC110 - rows of another connection
                        await anyio.sleep(0.01)
                await send("c", "key-c")  # a third message: refused at once
                assert replies["c"][0] == 429
                tg.start_soon(send, "a again", "key-a")  # a retry of the first: waits with it
                duplicate = 'botmux_messages_duplicate_total{platform="peer"} 1.0'
                with anyio.fail_after(10):
                    while duplicate not in await (await http.get(f"{url}/metrics")).text():  # noqa: ASYNC110
                        await anyio.sleep(0.01)
                assert "a again" not in replies
                fake.release()
        assert replies["a"] == replies["a again"]
        assert replies["a"][0] == 200
        assert [c for c, _ in user_rows(db)] == ["peer:s", "peer:s"]


async def test_a_message_over_max_message_chars_is_413_and_not_stored(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    extra = "[gateway]\nmax_message_chars = 100\n"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        r = await http.post(f"{url}/api/sessions/s/chat", json={"message": "x" * 101})
        body = await r.json()
        assert (r.status, body["error"]["code"]) == (413, "message_too_long")
        assert user_rows(db) == []
        r = await http.post(f"{url}/api/sessions/s/chat", json={"message": "x" * 100})
        assert r.status == 200
        r = await http.post(
            f"{url}/v1/chat/completions",
            json={"model": "botmux", "messages": [{"role": "user", "content": "y" * 101}]},
        )
        assert r.status == 413
        metrics = await (await http.get(f"{url}/metrics")).text()
    assert user_rows(db) == [("peer:s", "answered")]
    assert (
        'botmux_messages_refused_total{platform="peer",reason="too_long",scope=""} 2.0' in metrics
    )


async def test_a_backlog_stored_before_start_runs_in_order_each_row_read_whole(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    texts = [f"message {i} " + "z" * 5_000 for i in range(40)]
    async with open_sqlite_store(str(db)) as store:
        for i, text in enumerate(texts):  # more than the cap: stored before it existed
            await store.submit(AdmitRow(Inbound("peer", "peer:backlog", f"m{i}", text)))
    async with open_fake_model() as fake:
        async with running_gateway(make_config(db, fake.base_url)):
            with anyio.fail_after(30):
                await fake.wait_for_completed(len(texts))
    assert [r.last_user for r in fake.requests] == texts
    assert {state for _, state in user_rows(db)} == {"answered"}
