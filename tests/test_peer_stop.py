"""The peer listener's requests in flight when the gateway stops (issue 37): past the drain, a
request still waiting for its turn is answered ``503 draining`` with ``Retry-After`` at once
(not when the store closes under it, seconds later), a stream whose headers went out ends
with an ``error`` event saying so, and the turn stays pending in the store for the next
start.

A gateway in the test's loop (``running_gateway``), the fake model holding its answers, the
client aiohttp; the stop is the one SIGTERM sets (``GatewayApp.stop``).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import aiohttp
import anyio
import pytest

from tests.fakes.openai_server import Hold, ok, open_fake_model, streamed
from tests.harness import make_config, running_gateway
from tests.support.sse import sse_events

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

DRAIN_S = 0.2
DRAIN = f"[gateway]\ndrain_timeout_s = {DRAIN_S}\n"
#: The drain, then everything else of the stop (gateway.app.STOP_MARGIN_S) and some slack for
#: a loaded machine; the old code took 12 s here (the listener waited for its requests).
STOPPED_WITHIN_S = DRAIN_S + 2.5


def states(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT content, state FROM messages WHERE role = 'user'").fetchall()


async def test_requests_waiting_past_the_drain_get_503_and_their_turns_stay_pending(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok("never"))
        answers: dict[str, tuple[int, dict[str, object], str | None]] = {}
        with anyio.fail_after(20):
            async with (
                running_gateway(make_config(db, fake.base_url, extra=DRAIN)) as (app, url),
                aiohttp.ClientSession() as http,
            ):

                async def ask(session: str) -> None:
                    async with http.post(
                        f"{url}/api/sessions/{session}/chat",
                        json={"message": f"to {session}"},
                        headers={"Idempotency-Key": "k1"},
                    ) as r:
                        answers[session] = (r.status, await r.json(), r.headers.get("Retry-After"))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask, "a")
                    tg.start_soon(ask, "b")
                    await fake.wait_for_requests(2)  # both admitted, their turns in the model
                    app.stop.set()
                    stopped = time.monotonic()
                answered_s = time.monotonic() - stopped
    assert answered_s < STOPPED_WITHIN_S, answered_s
    for session in ("a", "b"):
        status, body, retry_after = answers[session]
        assert status == 503, body
        assert body["error"]["code"] == "draining", body  # type: ignore[index]
        assert retry_after == "5"
    assert sorted(states(db)) == [("to a", "pending"), ("to b", "pending")]


async def test_a_stream_under_way_at_the_stop_ends_where_it_was(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        fake.default = lambda r: streamed("half ", "of it", hold_after=1)
        seen: list[tuple[str, object]] = []
        with anyio.fail_after(20):
            async with (
                running_gateway(make_config(db, fake.base_url, extra=DRAIN)) as (app, url),
                aiohttp.ClientSession() as http,
                http.post(
                    f"{url}/api/sessions/s/chat", json={"message": "tell me", "stream": True}
                ) as r,
            ):
                events = sse_events(r)
                seen.append(await anext(events))  # the first piece: the headers went out
                app.stop.set()
                seen.extend([event async for event in events])  # then why it ended
                assert r.status == 200
    draining = {
        "error": {
            "message": "botmux is shutting down; retry shortly",
            "type": "draining",
            "code": "draining",
            "status": 503,
        }
    }
    assert seen == [("delta", {"content": "half "}), ("error", draining)]
    assert states(db) == [("tell me", "pending")]
