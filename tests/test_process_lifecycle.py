"""botmux as a real process: restarts, SIGKILL mid-turn, SIGTERM drain, exit codes."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.store import RequestPairing
from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model
from tests.harness import GatewayProcess, botmux_process, config_text, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.process]


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as model:
        yield model


@pytest.fixture
def gateway(tmp_path: Path, fake: FakeModel) -> GatewayProcess:
    return botmux_process(tmp_path, fake.base_url, extra="[gateway]\ndrain_timeout_s = 20\n")


@pytest.fixture(autouse=True)
async def _reap(gateway: GatewayProcess) -> AsyncIterator[None]:
    yield
    await gateway.kill()


def stored(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, content, state FROM messages ORDER BY id"))


async def chat(http: aiohttp.ClientSession, url: str, session: str, text: str) -> dict[str, object]:
    r = await http.post(f"{url}/api/sessions/{session}/chat", json={"message": text})
    assert r.status == 200, await r.text()
    body: dict[str, object] = await r.json()
    return body


async def test_restart_keeps_the_transcript(
    gateway: GatewayProcess, fake: FakeModel, tmp_path: Path
) -> None:
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        await chat(http, gateway.url, "keep", "remember me")
    gateway.signal(signal.SIGTERM)
    assert await gateway.wait() == 0
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        r = await http.get(f"{gateway.url}/api/sessions/keep/messages")
        assert [m["content"] for m in (await r.json())["messages"]] == [
            "remember me",
            "echo: remember me",
        ]
        await chat(http, gateway.url, "keep", "still there?")
    # The turn after the restart saw the history from before it.
    assert [m["content"] for m in fake.requests[-1].messages[1:]] == [
        "remember me",
        "echo: remember me",
        "still there?",
    ]


async def test_sigkill_mid_turn_is_answered_after_restart_with_one_user_row(
    gateway: GatewayProcess, fake: FakeModel, tmp_path: Path
) -> None:
    fake.default = lambda r: Hold()
    await gateway.start()
    async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

        async def doomed() -> None:
            with pytest.raises(aiohttp.ClientError):
                await chat(http, gateway.url, "crash", "survive this")

        tg.start_soon(doomed)
        await fake.wait_for_requests(1)  # admitted and in the model: the row is pending
        gateway.signal(signal.SIGKILL)
        assert await gateway.wait() == -signal.SIGKILL
    assert stored(tmp_path / "botmux.db") == [("user", "survive this", "pending")]

    fake.default = lambda r: ok("made it")
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        with anyio.fail_after(10):
            while True:  # the resumed turn runs on its own: poll the transcript for it
                r = await http.get(f"{gateway.url}/api/sessions/crash/messages")
                messages = (await r.json())["messages"]
                if len(messages) == 2:
                    break
                await anyio.sleep(0.02)
    assert [(m["role"], m["content"], m["state"]) for m in messages] == [
        ("user", "survive this", "answered"),
        ("assistant", "made it", "final"),
    ]
    # The resumed turn adopted the stored row: the model saw the message once.
    resumed = fake.requests[-1].messages
    assert [m["content"] for m in resumed if m["role"] == "user"] == ["survive this"]


async def test_sigterm_drains_the_running_turn(gateway: GatewayProcess, fake: FakeModel) -> None:
    fake.default = lambda r: Hold(ok("finished while draining"))
    await gateway.start()
    replies: list[dict[str, object]] = []
    async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

        async def running() -> None:
            replies.append(await chat(http, gateway.url, "drain", "take your time"))

        tg.start_soon(running)
        await fake.wait_for_requests(1)
        gateway.signal(signal.SIGTERM)
        # Draining: intake is closed (readyz 503, new chats 503), the running turn goes on.
        with anyio.fail_after(10):
            while True:
                r = await http.get(f"{gateway.url}/readyz")
                if r.status == 503:
                    break
                await anyio.sleep(0.02)
        r = await http.post(f"{gateway.url}/api/sessions/other/chat", json={"message": "late"})
        assert r.status == 503
        assert r.headers["Retry-After"]
        fake.release()
    assert replies[0]["message"] == {"role": "assistant", "content": "finished while draining"}
    assert await gateway.wait() == 0
    assert len(fake.requests) == 1


async def test_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    for text, key in (
        ('[model]\nmodel = "m"\ntimeout_s = "soon"\n', "model.timeout_s"),
        ('[peer]\nlisten = "127.0.0.1:1"\nbogus = 1\n', "peer.bogus"),
        ('[store]\npath = "${NOT_SET_ANYWHERE_XYZ}"\n', "store.path"),
    ):
        config.write_text(text)
        for command in ("check", "run"):
            result = await anyio.run_process(
                [sys.executable, "-m", "gateway", command, "--config", str(config)], check=False
            )
            assert result.returncode == 2, (command, text)
            assert key in result.stderr.decode(), result.stderr


async def test_check_accepts_a_good_config_and_says_what_would_start(tmp_path: Path) -> None:
    config = tmp_path / "good.toml"
    config.write_text(config_text(tmp_path / "x.db", "http://127.0.0.1:9/v1"))
    result = await anyio.run_process(
        [sys.executable, "-m", "gateway", "--config", str(config), "check"]
    )
    out = result.stdout.decode()
    assert "valid" in out and "gpt-test" in out and "sk-test-key-0001" not in out


async def test_pairing_cli_lists_approves_and_revokes(tmp_path: Path) -> None:
    from gateway.store import open_sqlite_store

    db = tmp_path / "p.db"
    async with open_sqlite_store(str(db)) as store:
        code, _ = await store.submit(
            RequestPairing("telegram", "4242", "@ann", ttl_s=3600, max_pending=3)
        )
    assert code is not None
    config = tmp_path / "p.toml"
    config.write_text(f'[store]\npath = "{db}"\n')

    async def botmux(*args: str) -> tuple[int, str]:
        result = await anyio.run_process(
            [sys.executable, "-m", "gateway", *args, "--config", str(config)], check=False
        )
        return result.returncode, (result.stdout + result.stderr).decode()

    rc, out = await botmux("pairing", "list")
    assert rc == 0 and code in out and "4242" in out
    assert (await botmux("pairing", "approve", "telegram", "WRONG123"))[0] == 1
    rc, out = await botmux("pairing", "approve", "telegram", code)
    assert rc == 0 and "4242" in out
    rc, out = await botmux("pairing", "list")
    assert "approved users:" in out and "4242" in out
    assert (await botmux("pairing", "revoke", "telegram", "4242"))[0] == 0
    assert (await botmux("pairing", "revoke", "telegram", "4242"))[0] == 1
    assert (await botmux("pairing", "approve", "myspace", code))[0] == 2


async def test_status_shows_a_pending_turn_and_a_benched_key(
    tmp_path: Path, fake: FakeModel
) -> None:
    from tests.fakes.openai_server import rate_limited

    port = free_port()
    config = tmp_path / "s.toml"
    config.write_text(
        config_text(
            tmp_path / "s.db",
            fake.base_url,
            listen=f"127.0.0.1:{port}",
            keys=("sk-first-key-aaaa1111", "sk-second-key-bbbb2222"),
        )
    )
    gateway = GatewayProcess(config, port, tmp_path / "s.log")
    fake.script(rate_limited(retry_after=300), Hold())
    await gateway.start()
    try:
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

            async def waiting() -> None:
                with pytest.raises(aiohttp.ClientError):
                    await chat(http, gateway.url, "stuck", "are you there?")

            tg.start_soon(waiting)
            await fake.wait_for_requests(2)  # key 1 benched, key 2 holding: the turn is pending
            result = await anyio.run_process(
                [sys.executable, "-m", "gateway", "status", "--config", str(config)]
            )
            out = result.stdout.decode()
            await gateway.kill()
    finally:
        await gateway.kill()
    assert "gateway: running" in out
    assert "peer:stuck" in out and "1 pending" in out
    assert "gpt-test key key1 (rate_limit)" in out and "key2" not in out
    assert "1111" not in out
    assert "sk-first-key" not in out


async def test_a_busy_port_or_an_unreachable_database_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = tmp_path / "busy.toml"
        config.write_text(
            f'[store]\npath = "{tmp_path}/b.db"\n[peer]\nlisten = "127.0.0.1:{port}"\n'
        )
        result = await anyio.run_process(
            [sys.executable, "-m", "gateway", "run", "--config", str(config)], check=False
        )
    assert result.returncode == 1
    err = result.stderr.decode()
    assert (
        f"botmux: error: [Errno 98] error while attempting to bind on address ('127.0.0.1', {port})"
        in err
    )
    assert "Traceback" not in err
    config.write_text(
        '[store]\nurl = "postgresql://botmux:hunter2-secret@127.0.0.1:1/botmux"\n'
        f'[peer]\nlisten = "127.0.0.1:{free_port()}"\n'
    )
    result = await anyio.run_process(
        [sys.executable, "-m", "gateway", "run", "--config", str(config)], check=False
    )
    err = result.stderr.decode()
    assert result.returncode == 1
    assert (
        "botmux: error: cannot open the store at postgresql://botmux:***@127.0.0.1:1/botmux" in err
    )
    assert "hunter2-secret" not in err and "Traceback" not in err


def _loop_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "event loop" in line]


async def test_runs_on_uvloop_unless_the_environment_says_asyncio(
    gateway: GatewayProcess, fake: FakeModel
) -> None:
    """uvloop where it is installed (a dependency on Linux); ``BOTMUX_EVENT_LOOP=asyncio``
    runs asyncio's own loop: both serve a turn and stop cleanly on SIGTERM."""
    for env, loop in (({}, "uvloop"), ({"BOTMUX_EVENT_LOOP": "asyncio"}, "asyncio")):
        await gateway.start(env)
        async with aiohttp.ClientSession() as http:
            body = await chat(http, gateway.url, f"on-{loop}", "hello")
        assert body["message"] == {"role": "assistant", "content": "echo: hello"}
        gateway.signal(signal.SIGTERM)
        assert await gateway.wait() == 0
        lines = _loop_lines(gateway.log())
        assert loop in lines[-1], lines


async def test_an_unknown_event_loop_exits_2_naming_the_variable(tmp_path: Path) -> None:
    config = tmp_path / "botmux.toml"
    config.write_text(config_text(tmp_path / "x.db", "http://127.0.0.1:9/v1"))
    result = await anyio.run_process(
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        check=False,
        env={**os.environ, "BOTMUX_EVENT_LOOP": "trio"},
    )
    assert result.returncode == 2
    assert "BOTMUX_EVENT_LOOP" in result.stderr.decode(), result.stderr
