"""A peer client that hangs up while it waits lets go of what its request held (SPEC section
14): the waiting request is gone from the adapter, the turn runs on, and its reply is stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import Hold, ok, open_fake_model
from tests.harness import make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


async def test_a_client_that_hangs_up_releases_its_waiting_request(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"echo: {r.last_user}"))
        async with running_gateway(make_config(db, fake.base_url)) as (app, _):
            assert app.peer is not None and app.peer.port is not None
            body = b'{"message": "' + b"x" * 30_000 + b'"}'
            stream = await anyio.connect_tcp("127.0.0.1", app.peer.port)
            await stream.send(
                b"POST /api/sessions/gone/chat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)  # admitted, its turn is running
            assert app.peer.statistics().waiting == 1
            await stream.aclose()  # the client hangs up
            with anyio.fail_after(10):
                while app.peer.statistics().waiting:  # noqa: ASYNC110 - the server notices
                    await anyio.sleep(0.01)
            fake.release()
            with anyio.fail_after(10):
                await fake.wait_for_completed(1)
    with sqlite3.connect(db) as conn:
        states = list(conn.execute("SELECT role, state FROM messages ORDER BY id"))
    assert states == [("user", "answered"), ("assistant", "final")]
