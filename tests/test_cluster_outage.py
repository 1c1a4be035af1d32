"""A node cut off from PostgreSQL: it stops its own turns before its leases can expire, and
carries on once the database is back.

botmux runs in-process here, talking to PostgreSQL through a TCP proxy the test can cut.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import anyio
import asyncpg
import pytest

from tests.fakes.openai_server import Hold, open_fake_model
from tests.fakes.tcp_proxy import proxy_to
from tests.harness import make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.gateway]


async def test_a_node_cut_off_from_the_database_stops_its_turns_and_recovers(
    tmp_path: Path, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with open_fake_model() as model, proxy_to(postgres_url) as proxy:
        model.script(Hold())  # the first call waits until released
        via_proxy = postgres_url.replace(f":{urlsplit(postgres_url).port}/", f":{proxy.port}/")
        config = make_config(
            tmp_path / "unused.db",
            model.base_url,
            store_url=via_proxy,
            extra='[cluster]\nnode_id = "solo"\nlease_s = 1.0\nheartbeat_s = 0.25\n',
        )
        async with running_gateway(config) as (app, url), aiohttp.ClientSession() as http:
            reply: dict[str, object] = {}

            async def ask() -> None:
                async with http.post(
                    f"{url}/api/sessions/s/chat",
                    json={"message": "hello"},
                    headers={"Idempotency-Key": "k1"},
                ) as r:
                    reply.update(status=r.status, body=await r.json())

            # Stray notifications on the node's channel (not ours to send) change nothing.
            db = await asyncpg.connect(postgres_url)
            try:
                for payload in ("reply:not-a-number", "bogus", "pending:nowhere:x", "control:"):
                    await db.execute("SELECT pg_notify('botmux:solo', $1)", payload)
            finally:
                await db.close()
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                with anyio.fail_after(10):
                    await model.wait_for_requests(1)
                proxy.cut()
                # Within 0.8 x the lease the node gives up the turn: the model call is
                # abandoned (the fake sees it end) and nothing is written.
                with anyio.fail_after(10):
                    await model.wait_for_completed(1)
                assert app.cluster is not None
                assert app.cluster.statistics().self_fenced == 1
                assert "cannot renew leases" in caplog.text
                async with http.get(f"{url}/readyz") as r:  # a balancer routes around it
                    assert r.status == 503
                    assert (await r.json())["checks"]["cluster"] is False
                # New messages cannot be admitted meanwhile: a clear 503, nothing stored.
                async with http.post(
                    f"{url}/api/sessions/other/chat", json={"message": "while down"}
                ) as r:
                    assert r.status == 503 and r.headers["Retry-After"] == "2"
                    assert (await r.json())["error"]["code"] == "store_unavailable"
                proxy.restore()
                model.release()
                # Back online: the row is still pending; the node claims it again and runs
                # it; the waiting request gets the answer.
            async with http.get(f"{url}/readyz") as r:
                assert r.status == 200
            async with http.get(f"{url}/metrics") as r:
                metrics = await r.text()
            assert 'botmux_cluster_events_total{event="self_fenced"} 1.0' in metrics
            assert 'botmux_cluster_events_total{event="heartbeat_failed"}' in metrics
            assert "botmux_cluster_leases 1.0" in metrics
        db = await asyncpg.connect(postgres_url)
        try:
            rows = await db.fetch("SELECT role, content, state FROM messages ORDER BY id")
        finally:
            await db.close()
    assert reply["status"] == 200
    assert reply["body"]["message"]["content"] == "echo: hello"  # type: ignore[index]
    assert [(r["role"], r["content"], r["state"]) for r in rows] == [
        ("user", "hello", "answered"),
        ("assistant", "echo: hello", "final"),
    ]
    assert len(model.requests) == 2  # the abandoned call and the re-run
