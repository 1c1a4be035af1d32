"""Live reconfiguration end to end (SPEC 13): a real gateway, the fake model and the fake
Telegram; the config file is edited and re-read while turns run.

In process: "reload under load" (twenty conversations streaming while the model key rotates
and a Telegram allowlist grows), a refused ``[peer] listen`` change, a bad file, peer tokens
and limits, a Discord guild allowed. As a real process: SIGHUP and ``botmux reload`` with
their exit codes, and ``botmux check``'s preview.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from gateway.app import GatewayApp
from gateway.config import parse_config
from tests.fakes.openai_server import FakeModel, streamed_text
from tests.fakes.slack_server import open_fake_slack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import ROOT, GatewayProcess, config_text, free_port, telegram_section
from tests.support import slack_world
from tests.support.discord_world import ALICE as DC_ALICE
from tests.support.discord_world import (
    DM_ID,
    GUILD_ID,
    OTHER_CHANNEL_ID,
    OTHER_GUILD_ID,
    discord_toml,
    mention,
    open_world,
)
from tests.support.sse import sse_events

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

OLD_KEY, NEW_KEY, NEXT_KEY = "sk-old-key-0000001", "sk-new-key-0000002", "sk-next-key-000003"
ALICE, BOB = 42, 77  # Alice is allowed from the start; Bob only after the reload
CONVERSATIONS = 20


class ConfigFile:
    """The gateway's config file, edited as an operator would."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        path.write_text(text)

    def edit(self, old: str, new: str) -> None:
        text = self.path.read_text()
        assert old in text, old
        self.path.write_text(text.replace(old, new))

    def read(self) -> Any:
        return parse_config(self.path.read_text(), source=str(self.path), env={})


async def sse_reply(http: aiohttp.ClientSession, url: str, session: str, text: str) -> str:
    """One streamed peer turn: the final message's content (deltas are checked to add up)."""
    body = {"message": text, "stream": True}
    deltas: list[str] = []
    final: str | None = None
    async with http.post(f"{url}/api/sessions/{session}/chat", json=body) as r:
        assert r.status == 200, await r.text()
        async for name, event in sse_events(r):
            if name == "delta":
                deltas.append(event["content"])
            elif name == "message":
                assert final is None  # one answer per turn
                final = event["message"]["content"]
    assert final is not None and "".join(deltas) == final
    return final


def rows(db: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(db) as conn:
        query = "SELECT conversation, role, content, state FROM messages ORDER BY id"
        return list(conn.execute(query))


async def queued_turns(app: GatewayApp) -> int:
    assert app.router is not None
    return sum(s.queued for s in app.router.actors().values())


async def test_reload_under_load_drops_nothing_and_the_next_turns_use_the_new_config(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram
) -> None:
    db = tmp_path / "botmux.db"
    text = config_text(
        db, model.base_url, keys=(OLD_KEY,), extra=telegram_section(tg, "allow_users = [42]\n")
    )
    file = ConfigFile(tmp_path / "botmux.toml", text)
    # Every answer streams, and holds after its first piece until the test lets it go.
    model.default = lambda r: streamed_text(f"echo: {r.last_user}", 3, hold_after=1)
    app = GatewayApp(file.read(), read=file.read)
    replies: dict[str, list[str]] = {}
    async with anyio.create_task_group() as tg_run, aiohttp.ClientSession() as http:
        await tg_run.start(app.run)
        assert app.peer is not None and app.reloader is not None
        url = f"http://127.0.0.1:{app.peer.port}"

        async def conversation(n: int) -> None:
            session = f"c{n}"
            async with anyio.create_task_group() as turns:

                async def turn(text: str) -> None:
                    replies.setdefault(session, []).append(
                        await sse_reply(http, url, session, text)
                    )

                turns.start_soon(turn, f"{session} first")
                await model.wait_for_requests(n + 1)  # the first is at the model
                turns.start_soon(turn, f"{session} second")  # queued behind the running one

        async with anyio.create_task_group() as load:
            with anyio.fail_after(30):
                for n in range(CONVERSATIONS):
                    load.start_soon(conversation, n)
                    await model.wait_for_requests(n + 1)  # each first turn is at the model
                while await queued_turns(app) < 2 * CONVERSATIONS:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # across HTTP: the second turns are admitted
                # Bob is a stranger still: a pairing code, no answer.
                tg.inject_message(BOB, "hi, am I in?", first_name="Bob")
                (pairing,) = await tg.wait_for_sent(1, BOB)
                assert "approve telegram" in pairing

                # The reload, while 20 turns stream and 20 more wait.
                file.edit(OLD_KEY, NEW_KEY)
                file.edit("allow_users = [42]", f"allow_users = [{ALICE}, {BOB}]")
                result = await app.reloader.reload("test")
                assert result.outcome == "applied", result
                assert result.plan.live == ("model.api_keys", "telegram.allow_users")
                assert app.live.version == 1
                model.release_streams()
            # (the load group ends when every turn has answered)

        with anyio.fail_after(20):
            tg.inject_message(BOB, "and now?", first_name="Bob")
            assert await tg.wait_for_sent(2, BOB) == [pairing, "echo: and now?"]

        # A reload that moves the listener is refused whole: the key rotation beside it too.
        file.edit('listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{free_port()}"')
        file.edit(NEW_KEY, NEXT_KEY)
        refused = await app.reloader.reload("test")
        assert (refused.outcome, refused.plan.restart) == ("refused", ("peer.listen",))
        assert "peer.listen" in refused.reason
        assert app.live.version == 1
        with anyio.fail_after(20):
            assert await sse_reply(http, url, "after", "still old?") == "echo: still old?"
        app.stop.set()

    # No turn dropped or duplicated: every message answered once, in order.
    peer_rows = [r for r in rows(db) if r[0].startswith("peer:")]
    assert Counter(r[3] for r in peer_rows if r[1] == "user") == {"answered": 41}
    assert len([r for r in peer_rows if r[1] == "assistant"]) == 41
    for n in range(CONVERSATIONS):
        assert replies[f"c{n}"] == [f"echo: c{n} first", f"echo: c{n} second"]
    # The running turns finished on the key they started with; every later one used the new.
    calls = [(r.api_key, r.last_user) for r in model.requests]
    assert len(calls) == 2 * CONVERSATIONS + 2  # no turn called twice
    assert {k for k, text in calls if text.endswith(" first")} == {OLD_KEY}
    assert {k for k, text in calls if text.endswith(" second")} == {NEW_KEY}
    assert (NEW_KEY, "and now?") in calls
    assert (NEW_KEY, "still old?") in calls and NEXT_KEY not in dict(calls)
    assert app.metrics.config_reloads.labels("applied")._value.get() == 1
    assert app.metrics.config_reloads.labels("refused")._value.get() == 1


async def test_a_bad_file_leaves_the_running_config_working(
    tmp_path: Path, model: FakeModel
) -> None:
    db = tmp_path / "botmux.db"
    file = ConfigFile(tmp_path / "botmux.toml", config_text(db, model.base_url, keys=(OLD_KEY,)))
    app = GatewayApp(file.read(), read=file.read)
    async with anyio.create_task_group() as run, aiohttp.ClientSession() as http:
        await run.start(app.run)
        assert app.peer is not None and app.reloader is not None
        url = f"http://127.0.0.1:{app.peer.port}"
        file.edit("timeout_s = 5", "timeout_s = -5")
        bad = await app.reloader.reload("test")
        assert bad.outcome == "invalid" and bad.errors[0][0] == "model.timeout_s"
        file.path.write_text("[model\nbroken")
        assert (await app.reloader.reload("test")).outcome == "invalid"
        with anyio.fail_after(20):
            assert await sse_reply(http, url, "s", "ok?") == "echo: ok?"
        app.stop.set()
    assert model.calls() == [("gpt-test", OLD_KEY)] and app.live.version == 0


# -- a real process: SIGHUP and the command line ---------------------------------------------


def botmux(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def metric(url: str, result: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(f'botmux_config_reloads_total{{result="{result}"}}'):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def wait_for_reloads(url: str, result: str, count: int) -> None:
    """Across processes there is no event: read the counter until it has moved."""
    with anyio.fail_after(20):
        while await metric(url, result) < count:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def chat(url: str, text: str) -> str:
    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{url}/api/sessions/p/chat", json={"message": text})
        assert r.status == 200, await r.text()
        return str((await r.json())["message"]["content"])


@pytest.mark.process
async def test_sighup_and_botmux_reload_in_a_real_process(tmp_path: Path, model: FakeModel) -> None:
    port = free_port()
    env = {"BOTMUX_RUN_DIR": str(tmp_path / "run")}
    text = config_text(
        tmp_path / "b.db", model.base_url, keys=(OLD_KEY,), listen=f"127.0.0.1:{port}"
    )
    file = ConfigFile(tmp_path / "botmux.toml", text + '\n[agent]\nsystem_prompt = "v1"\n')
    proc = GatewayProcess(file.path, port, tmp_path / "botmux.log")
    await proc.start(env)
    try:
        url = proc.url
        assert await chat(url, "one") == "echo: one"

        # botmux reload: applied (exit 0), the plan printed; the next turn has the new key.
        file.edit(OLD_KEY, NEW_KEY)
        done = await anyio.to_thread.run_sync(
            lambda: botmux("reload", "--config", str(file.path), env=env)
        )
        assert done.returncode == 0, done.stderr
        assert "applied" in done.stdout and "model.api_keys" in done.stdout
        assert NEW_KEY not in done.stdout + done.stderr
        assert await chat(url, "two") == "echo: two"

        # botmux check on the edited file says what a reload would change; nothing changes.
        file.edit('"v1"', '"v2"')
        file.edit(f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}")
        check = await anyio.to_thread.run_sync(
            lambda: botmux("check", "--config", str(file.path), env=env)
        )
        assert check.returncode == 0, check.stderr
        assert "a reload applies live: agent.system_prompt" in check.stdout
        assert "needs a restart: peer.listen" in check.stdout

        # ... and botmux reload refuses it (exit 2), naming the key; nothing of it applies.
        refused = await anyio.to_thread.run_sync(
            lambda: botmux("reload", "--config", str(file.path), env=env)
        )
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "peer.listen" in refused.stderr
        assert await chat(url, "three") == "echo: three"

        # SIGHUP with a bad file: refused, says why in the log, the old config serves on.
        file.path.write_text(
            text.replace(OLD_KEY, NEXT_KEY).replace("timeout_s = 5", "timeout_s = 0")
        )
        proc.signal(signal.SIGHUP)
        await wait_for_reloads(url, "invalid", 1)
        assert "model.timeout_s" in proc.log() and NEXT_KEY not in proc.log()
        assert await chat(url, "four") == "echo: four"

        # SIGHUP with the file fixed: applied.
        file.path.write_text(text.replace(OLD_KEY, NEXT_KEY))
        proc.signal(signal.SIGHUP)
        await wait_for_reloads(url, "applied", 2)
        assert await chat(url, "five") == "echo: five"
        assert [k for _, k in model.calls()] == [OLD_KEY, NEW_KEY, NEW_KEY, NEW_KEY, NEXT_KEY]
        system = [r.messages[0]["content"] for r in model.requests]
        assert system == ["v1", "v1", "v1", "v1", "You are a helpful assistant."]
        assert "config_reloaded" in proc.log()
    finally:
        proc.signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await proc.wait() == 0, proc.log_tail()

    # Nothing runs any more: exit 1.
    gone = await anyio.to_thread.run_sync(
        lambda: botmux("reload", "--config", str(file.path), env=env)
    )
    assert gone.returncode == 1 and "no gateway answers" in gone.stderr
    nobody = f"127.0.0.1:{free_port()}"
    check = await anyio.to_thread.run_sync(
        lambda: botmux("check", "--config", str(file.path), "--against", nobody, env=env)
    )
    assert check.returncode == 1 and f"none answered at {nobody}" in check.stdout
    assert not list((tmp_path / "run").glob("*.json"))  # the run file went with the process


@pytest.mark.process
async def test_check_exits_with_the_files_status_whatever_the_running_gateway_thinks(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    """A file valid where ``botmux check`` runs but not in the running gateway's environment
    (a variable only the shell has): exit 0, the gateway's opinion beside it, and the
    gateway logs that preview at info level (nothing was to change)."""
    caplog.set_level(logging.INFO, logger="gateway")
    port = free_port()
    text = config_text(tmp_path / "b.db", model.base_url, listen=f"127.0.0.1:{port}")
    file = ConfigFile(tmp_path / "botmux.toml", text)
    app = GatewayApp(file.read(), read=file.read)
    env = {"ONLY_IN_THE_SHELL": "v2", "BOTMUX_RUN_DIR": str(tmp_path / "run")}
    async with anyio.create_task_group() as run:
        await run.start(app.run)
        try:
            file.path.write_text(text + '\n[agent]\nsystem_prompt = "${ONLY_IN_THE_SHELL}"\n')
            check = await anyio.to_thread.run_sync(
                lambda: botmux("check", "--config", str(file.path), env=env)
            )
        finally:
            app.stop.set()
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"config: {file.path}: valid" in check.stdout
    gateway = f"running gateway at http://127.0.0.1:{port}"
    assert f"{gateway}: HTTP 422:" in check.stdout
    assert f"{gateway}: agent.system_prompt: environment variable ONLY_IN_THE_SHELL" in check.stdout
    logged = [r for r in caplog.records if r.getMessage() == "config_reloaded"]
    assert [(r.levelno, r.result, r.dry_run) for r in logged] == [(logging.INFO, "invalid", True)]


async def test_peer_tokens_and_limits_change_live_and_the_route_names_who_asked(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = "peer-token-old-0000000001", "peer-token-new-0000000002"
    tokens = f'tokens = [{{ token = "{old}", name = "ops" }}]\n'
    text = config_text(tmp_path / "b.db", model.base_url).replace("[peer]\n", "[peer]\n" + tokens)
    file = ConfigFile(tmp_path / "botmux.toml", text)
    app = GatewayApp(file.read(), read=file.read)
    auth_old, auth_new = {"Authorization": f"Bearer {old}"}, {"Authorization": f"Bearer {new}"}
    async with anyio.create_task_group() as run, aiohttp.ClientSession() as http:
        await run.start(app.run)
        assert app.peer is not None
        url = f"http://127.0.0.1:{app.peer.port}"
        chat_url = f"{url}/api/sessions/t/chat"
        # The admin route is behind the tokens like every route.
        assert (await http.post(f"{url}/api/admin/reload", json={})).status == 401
        wrong = {"Authorization": "Bearer not-a-token-of-this-gateway"}
        assert (await http.post(f"{url}/api/admin/reload", json={}, headers=wrong)).status == 401

        file.edit(old, new)  # the token replaced, its name kept
        file.path.write_text(file.path.read_text() + "\n[gateway]\nmax_message_chars = 10\n")
        r = await http.post(f"{url}/api/admin/reload", json={}, headers=auth_old)
        body = await r.json()
        assert r.status == 200 and body["outcome"] == "applied", body
        assert body["live"] == ["peer.tokens", "gateway.max_message_chars"]
        assert new not in json.dumps(body) and old not in json.dumps(body)

        # The next request: the old token is gone, the new one works, the new limit holds.
        assert (await http.post(chat_url, json={"message": "hi"}, headers=auth_old)).status == 401
        r = await http.post(chat_url, json={"message": "hi"}, headers=auth_new)
        assert r.status == 200 and (await r.json())["message"]["content"] == "echo: hi"
        long = await http.post(chat_url, json={"message": "x" * 11}, headers=auth_new)
        assert long.status == 413

        # A refused reload answers 409 as an error, with the key named.
        file.edit('listen = "127.0.0.1:0"', 'listen = "127.0.0.1:1"')
        r = await http.post(f"{url}/api/admin/reload", json={}, headers=auth_new)
        body = await r.json()
        assert r.status == 409 and body["restart"] == ["peer.listen"], body
        assert (
            body["error"]["code"] == "reload_refused" and "peer.listen" in body["error"]["message"]
        )
        app.stop.set()
    reloads = [r for r in caplog.records if r.getMessage() == "config_reloaded"]
    assert [(r.result, r.by) for r in reloads] == [("applied", "ops"), ("refused", "ops")]  # type: ignore[attr-defined]
    assert all(old not in r.__dict__.values() and new not in r.__dict__.values() for r in reloads)


async def test_a_discord_guild_allowed_by_a_reload_is_answered(
    tmp_path: Path, model: FakeModel
) -> None:
    async with open_world() as dc:
        text = config_text(tmp_path / "b.db", model.base_url, extra=discord_toml(dc))
        file = ConfigFile(tmp_path / "botmux.toml", text)
        app = GatewayApp(file.read(), read=file.read)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as run:
                await run.start(app.run)
                assert app.reloader is not None
                await dc.inject_message(OTHER_CHANNEL_ID, mention("before"), author_id=DC_ALICE)
                await dc.inject_message(DM_ID, "a DM after it", author_id=DC_ALICE)
                await dc.wait_for_messages(DM_ID, 1)  # events go in order: "before" was seen
                assert dc.sent_messages(OTHER_CHANNEL_ID) == []

                file.edit(
                    f"allow_guilds = [{GUILD_ID}]", f"allow_guilds = [{GUILD_ID}, {OTHER_GUILD_ID}]"
                )
                result = await app.reloader.reload("test")
                assert (result.outcome, result.plan.live) == ("applied", ("discord.allow_guilds",))
                await dc.inject_message(OTHER_CHANNEL_ID, mention("after"), author_id=DC_ALICE)
                [reply] = await dc.wait_for_messages(OTHER_CHANNEL_ID, 1)
                assert reply["content"] == "echo: after"
                app.stop.set()
    assert [r.last_user for r in model.requests] == ["a DM after it", "after"]


async def test_a_slack_channel_opened_by_a_reload_is_answered(
    tmp_path: Path, model: FakeModel
) -> None:
    """SPEC 17: the allow lists apply live; Bob in a channel not on allow_channels is
    ignored, then answered once a reload lists it."""
    sw = slack_world
    async with open_fake_slack() as slack:
        text = config_text(tmp_path / "b.db", model.base_url, extra=sw.slack_toml(slack))
        file = ConfigFile(tmp_path / "botmux.toml", text)
        app = GatewayApp(file.read(), read=file.read)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as run:
                await run.start(app.run)
                assert app.reloader is not None
                await slack.send(sw.CLOSED, sw.mention("before"), user=sw.BOB)
                await slack.send(sw.ALICE_DM, "a DM after it", user=sw.ALICE)
                await slack.wait_for_bot_messages(sw.ALICE_DM, 1)  # in order: "before" was seen
                assert slack.bot_messages(sw.CLOSED) == []

                file.edit(
                    f'allow_channels = ["{sw.CHANNEL}"]',
                    f'allow_channels = ["{sw.CHANNEL}", "{sw.CLOSED}"]',
                )
                result = await app.reloader.reload("test")
                assert (result.outcome, result.plan.live) == ("applied", ("slack.allow_channels",))
                await slack.send(sw.CLOSED, sw.mention("after"), user=sw.BOB)
                [reply] = await slack.wait_for_bot_messages(sw.CLOSED, 1)
                assert reply["text"] == "echo: after"
                app.stop.set()
    assert [r.last_user for r in model.requests] == ["a DM after it", "after"]
