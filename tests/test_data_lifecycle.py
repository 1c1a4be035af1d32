"""The data lifecycle (SPEC section 14) against the real gateway: ``DELETE
/api/sessions/{id}``, ``botmux sessions purge`` and ``delete``, and the retention sweep of a
running gateway process. What is asserted: HTTP statuses, exit codes, the rows in the store,
and what the fake model was sent."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.messages import STOPPED_REPLY
from tests.fakes.openai_server import Hold, ok, open_fake_model
from tests.harness import ROOT, GatewayProcess, config_text, free_port, make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

DAY = 86_400


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


async def botmux(config: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process(
        [sys.executable, "-m", "gateway", *args, "--config", str(config)], cwd=ROOT, check=False
    )


async def test_delete_route_removes_the_session_and_stops_its_turn(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        async with (
            running_gateway(make_config(db, fake.base_url)) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            r = await http.post(f"{url}/api/sessions/gone/chat", json={"message": "remember me"})
            assert r.status == 200
            fake.script(Hold(ok("never sent")))
            async with anyio.create_task_group() as tg:
                waiting: list[dict[str, object]] = []

                async def wait_reply() -> None:
                    r = await http.post(f"{url}/api/sessions/gone/chat", json={"message": "2nd"})
                    waiting.append(await r.json())

                tg.start_soon(wait_reply)
                with anyio.fail_after(10):
                    await fake.wait_for_requests(2)  # the second turn is running
                r = await http.delete(f"{url}/api/sessions/gone")
                assert r.status == 200
                assert await r.json() == {"session_id": "gone", "deleted": True, "messages": 3}
            # The running turn was stopped: its waiter hears so, nothing was stored after.
            assert waiting[0]["message"] == {"role": "assistant", "content": STOPPED_REPLY}
            r = await http.get(f"{url}/api/sessions/gone/messages")
            assert (await r.json())["messages"] == []
            r = await http.delete(f"{url}/api/sessions/gone")
            assert r.status == 404
            assert (await r.json())["error"]["code"] == "not_found"
            # The same id again is a new conversation: the model sees no earlier history.
            r = await http.post(f"{url}/api/sessions/gone/chat", json={"message": "fresh"})
            assert r.status == 200
    assert [m["role"] for m in fake.requests[-1].messages] == ["system", "user"]
    assert rows(db, "SELECT conversation, role FROM messages ORDER BY id") == [
        ("peer:gone", "user"),
        ("peer:gone", "assistant"),
    ]
    assert rows(db, "SELECT COUNT(*) FROM outbox WHERE conversation = 'peer:gone'") == [(1,)]


@pytest.mark.process
async def test_cli_purge_and_delete(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    config = tmp_path / "botmux.toml"
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok("late"))
        config.write_text(
            config_text(db, fake.base_url, listen=f"127.0.0.1:{free_port()}")
            + "\n[gateway]\ndrain_timeout_s = 0\n"
        )
        async with (
            running_gateway(
                make_config(db, fake.base_url, extra="[gateway]\ndrain_timeout_s = 0\n")
            ) as (_, url),
            aiohttp.ClientSession() as http,
            anyio.create_task_group() as tg,
        ):

            async def send(text: str) -> None:
                await http.post(f"{url}/api/sessions/busy/chat", json={"message": text})

            for i in range(3):
                tg.start_soon(send, str(i))
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
                while rows(db, "SELECT COUNT(*) FROM messages")[0] != (3,):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    # The gateway stopped with three turns pending: purge drops them.
    done = await botmux(config, "sessions", "purge", "peer:busy")
    assert done.returncode == 0, done.stderr
    assert b"purged 3 pending message(s) of peer:busy" in done.stdout
    assert b"pending turns purged" in done.stderr  # logged
    assert rows(db, "SELECT state FROM messages") == [("failed",)] * 3
    # The next start runs none of them.
    async with open_fake_model() as fake:
        async with running_gateway(make_config(db, fake.base_url)):
            pass
    assert fake.requests == []
    done = await botmux(config, "sessions", "delete", "peer:busy")
    assert done.returncode == 0, done.stderr
    assert b"deleted peer:busy: 3 message(s)" in done.stdout
    assert rows(db, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert rows(db, "SELECT COUNT(*) FROM conversations") == [(0,)]
    done = await botmux(config, "sessions", "delete", "peer:busy")
    assert done.returncode == 1
    assert b"no conversation peer:busy" in done.stderr


@pytest.mark.process
async def test_the_retention_sweep_of_a_running_gateway(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        async with (
            running_gateway(make_config(db, fake.base_url)) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            for session in ("old", "mid", "fresh"):
                r = await http.post(f"{url}/api/sessions/{session}/chat", json={"message": "hi"})
                assert r.status == 200
            for _ in range(2):  # two anonymous completions: two conversations
                r = await http.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "botmux", "messages": [{"role": "user", "content": "hi"}]},
                )
                assert r.status == 200
        anonymous = sorted(
            str(k)
            for (k,) in rows(db, "SELECT key FROM conversations WHERE key LIKE 'peer:anon-%'")
        )
        assert len(anonymous) == 2
        now = time.time()
        with sqlite3.connect(db) as conn:
            # retention_days = 5 and anonymous_retention_days = 1: idle for 6 days, "old" goes
            # and "mid" (2 days) stays; the anonymous one idle for 2 days goes, not the other.
            for key, days in (("peer:old", 6), ("peer:mid", 2), (anonymous[0], 2)):
                conn.execute(
                    "UPDATE conversations SET updated_at = ? WHERE key = ?", (now - days * DAY, key)
                )
            # An old conversation with a turn still pending is not idle.
            conn.execute(
                "INSERT INTO conversations (key, platform, created_at, updated_at)"
                " VALUES ('peer:waiting', 'peer', ?, ?)",
                (now - 9 * DAY, now - 9 * DAY),
            )
            conn.execute(
                "INSERT INTO messages (conversation, role, content, state, platform,"
                " platform_message_id, created_at) VALUES ('peer:waiting', 'user', 'q',"
                " 'pending', 'peer', 'w1', ?)",
                (now - 9 * DAY,),
            )
        fake.default = lambda r: Hold(ok("later"))  # the pending turn stays pending
        port = free_port()
        config = tmp_path / "botmux.toml"
        text = config_text(db, fake.base_url, listen=f"127.0.0.1:{port}")
        config.write_text(
            text.replace(
                "[store]\n", "[store]\nretention_days = 5\nanonymous_retention_days = 1\n", 1
            )
        )
        gateway = GatewayProcess(config, port, tmp_path / "botmux.log")
        try:
            await gateway.start()
            expected = [("peer:fresh",), ("peer:mid",), (anonymous[1],), ("peer:waiting",)]
            logged = "conversations deleted: past their retention  count=2"
            with anyio.fail_after(20):
                # The line is logged after the delete commits: wait for both.
                while (  # noqa: ASYNC110
                    sorted(rows(db, "SELECT key FROM conversations")) != sorted(expected)
                    or logged not in gateway.log()
                ):
                    await anyio.sleep(0.05)
        finally:
            await gateway.kill()
    assert sorted(rows(db, "SELECT key FROM conversations")) == sorted(expected)
    # Their rows and outbox went with them.
    assert sorted(rows(db, "SELECT DISTINCT conversation FROM messages")) == sorted(expected)
    assert sorted(rows(db, "SELECT DISTINCT conversation FROM outbox")) == sorted(
        [("peer:fresh",), ("peer:mid",), (anonymous[1],)]
    )
    assert logged in gateway.log()
