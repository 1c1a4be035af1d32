"""A2A push notifications and messages that once stopped or misled the gateway (security
review 2026-12-05: H-2, M-1, L-3, L-5): a push config with CR/LF is refused when set, one
stored before that check fails its chunk without stopping the gateway (now or at the next
start), a receiver's redirect is never followed, ``push_hosts`` names ports, a task holds at
most 10 configs, and a lone surrogate is a clear error. Driven by the official a2a-sdk
client (raw JSON-RPC over aiohttp where the SDK cannot say it), the real gateway and store.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import aiohttp
import anyio
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError

from gateway.app import GatewayApp
from gateway.config import Config
from tests.fakes.openai_server import Hold, open_fake_model
from tests.fakes.push_receiver import push_receiver
from tests.harness import GatewayProcess, config_text, free_port, make_config, running_gateway
from tests.support.a2a import A2A, a2a_client
from tests.support.a2a import message as a2a_message
from tests.support.a2a import send as a2a_send

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

POISON = "t\r\nX-Injected: 1"


def with_push(*hosts: str) -> str:
    entries = ", ".join(f'"{h}"' for h in hosts)
    return A2A.replace("[[a2a.skills]]", f"push_hosts = [{entries}]\n[[a2a.skills]]")


def push_request(
    text: str, message_id: str, url: str, token: str = "tok-1"
) -> pb.SendMessageRequest:
    request = a2a_message(text, message_id, "ctx-push")
    config = request.configuration.task_push_notification_config
    config.url = url
    config.token = token
    return request


def query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def poison_configs(db: Path) -> None:
    """A CR/LF in every stored config's token, as a config set before the check was."""
    with sqlite3.connect(db) as conn:
        for row_id, config_id, text in list(
            conn.execute("SELECT user_row_id, config_id, config FROM a2a_push_configs")
        ):
            config = json.loads(text) | {"token": POISON}
            conn.execute(
                "UPDATE a2a_push_configs SET config = ? WHERE user_row_id = ? AND config_id = ?",
                (json.dumps(config), row_id, config_id),
            )


async def chunk_failed(app: GatewayApp, chunk: int) -> None:
    """Until the outbox says ``chunk`` failed: looked at whenever the A2A courier is idle,
    woken by each change the console would show (a failed send is one)."""
    a2a = next(a for a in app.adapters if a.platform == "a2a")
    seen = app.timeline.version
    with anyio.fail_after(10):
        while True:
            await a2a.wait_delivered()
            if query(db_of(app), f"SELECT state FROM outbox WHERE id = {chunk}") == [("failed",)]:
                return
            seen = await app.timeline.wait_changed(seen)


def db_of(app: GatewayApp) -> Path:
    return Path(app.config.store.path)


async def parked(url: str) -> float:
    """How many chunks /metrics says were parked (poisoned) on the a2a platform."""
    line = 'botmux_delivery_attempts_total{outcome="failed",platform="a2a",reason="poisoned"}'
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        text = await r.text()
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))


async def still_serving(url: str, message_id: str) -> None:
    """The gateway answers another A2A task and a peer chat."""
    async with a2a_client(url) as client:
        task = await a2a_send(client, a2a_message("still there?", message_id, "ctx-other"))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/api/sessions/s1/chat", json={"message": "hi"}) as r:
            assert r.status == 200 and (await r.json())["message"]["content"] == "echo: hi"


async def test_a_push_config_with_control_characters_is_refused_when_set(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        push_receiver() as hook,
        running_gateway(
            make_config(db, fake.base_url, extra=with_push(f"127.0.0.1:{hook.port}"))
        ) as (_, url),
        a2a_client(url) as client,
    ):
        with pytest.raises(InvalidParamsError, match="token"):
            await a2a_send(client, push_request("hello", "m-crlf", hook.url, token=POISON))
        task = await a2a_send(client, a2a_message("plain", "m-plain"))
        bad = (
            (
                "authentication.credentials",
                pb.AuthenticationInfo(scheme="Bearer", credentials="a\nb"),
            ),
            ("authentication.scheme", pb.AuthenticationInfo(scheme="Bea rer", credentials="c")),
        )
        for field, auth in bad:
            with pytest.raises(InvalidParamsError, match=field):
                await client.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(
                        task_id=task.id, url=hook.url, authentication=auth
                    )
                )
    assert query(db, "SELECT COUNT(*) FROM a2a_push_configs") == [(0,)]
    assert query(db, "SELECT content FROM messages WHERE role = 'user'") == [("plain",)]
    assert len(fake.requests) == 1 and hook.received == []


async def test_a_poisoned_push_config_fails_its_chunk_and_the_gateway_serves_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        push_receiver() as hook,
        running_gateway(
            make_config(db, fake.base_url, extra=with_push(f"127.0.0.1:{hook.port}"))
        ) as (app, url),
        a2a_client(url) as client,
    ):
        fake.script(Hold())
        request = push_request("poison me", "m-poison", hook.url)
        request.configuration.return_immediately = True
        task = await a2a_send(client, request)
        await fake.wait_for_requests(1)
        poison_configs(db)  # stored before set-time checks existed
        fake.release()
        await chunk_failed(app, 1)
        assert await parked(url) == 1
        await still_serving(url, "m-after")
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert got.status.state == pb.TASK_STATE_COMPLETED  # the answer is there to read
    assert hook.received == []  # nothing with the injected header ever left


@pytest.mark.process
async def test_a_poisoned_chunk_left_in_the_outbox_does_not_stop_the_next_start(
    tmp_path: Path,
) -> None:
    """The reply's chunk is still undelivered when the gateway dies, and its config is
    poisoned meanwhile: the next start hands it to the courier at once. Before, that start
    stopped again within a second, at every restart."""
    db = tmp_path / "b.db"
    async with open_fake_model() as fake, push_receiver(default=503) as hook:
        port = free_port()
        extra = with_push(f"127.0.0.1:{hook.port}")
        config_path = tmp_path / "botmux.toml"
        config_path.write_text(
            config_text(db, fake.base_url, listen=f"127.0.0.1:{port}", extra=extra)
        )
        gw = GatewayProcess(config_path, port, tmp_path / "gw.log")
        await gw.start()
        try:
            async with a2a_client(gw.url) as client:
                await a2a_send(client, push_request("while down", "m-down", hook.url))
            with anyio.fail_after(20):
                await hook.wait_for(1)  # refused: the chunk waits for its retry...
        finally:
            await gw.kill()  # ...and the gateway dies first
        assert query(db, "SELECT state FROM outbox") == [("pending",)]
        poison_configs(db)
        config: Config = make_config(db, fake.base_url, extra=extra)
        for start in ("m-start-1", "m-start-2"):
            async with running_gateway(config) as (app, url):
                await chunk_failed(app, 1)
                assert await parked(url) == (1 if start == "m-start-1" else 0)
                await still_serving(url, start)
    assert len(hook.received) == 1  # only the first, valid attempt reached the receiver


async def test_a_redirect_is_not_followed_and_push_hosts_name_ports(tmp_path: Path) -> None:
    """An allowed receiver answers 307 to a second loopback host that is not allowed: that
    host gets nothing, and the allowed one is retried until it takes the notification."""
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        push_receiver("127.0.0.2") as elsewhere,
        push_receiver(answers=[307, 307], redirect="") as hook,
    ):
        hook.redirect = f"{elsewhere.url}/internal/admin/delete-everything"
        extra = with_push(f"127.0.0.1:{hook.port}", "hooks.example.com")
        async with (
            running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
            a2a_client(url) as client,
        ):
            task = await a2a_send(client, push_request("tell me", "m-r", hook.url))
            with anyio.fail_after(20):
                await hook.wait_for(3)  # two redirects refused, then taken
            refused = (
                elsewhere.url,  # a host not in push_hosts
                f"http://127.0.0.1:{elsewhere.port}/hook",  # an allowed host, another port
                "http://hooks.example.com/hook",  # not loopback: https only
                "https://hooks.example.com:8443/hook",  # no port named: 443 only
            )
            for where in refused:
                with pytest.raises(InvalidParamsError, match=r"push_hosts|https"):
                    await client.create_task_push_notification_config(
                        pb.TaskPushNotificationConfig(task_id=task.id, url=where)
                    )
            allowed = await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, url="https://hooks.example.com/h")
            )
    assert allowed.url == "https://hooks.example.com/h"
    assert elsewhere.received == []
    assert [r.headers["X-A2A-Notification-Token"] for r in hook.received] == ["tok-1"] * 3
    assert query(db, "SELECT state FROM outbox") == [("delivered",)]


async def test_a_task_takes_at_most_ten_push_configs(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        push_receiver() as hook,
        running_gateway(
            make_config(db, fake.base_url, extra=with_push(f"127.0.0.1:{hook.port}"))
        ) as (_, url),
        a2a_client(url) as client,
    ):
        task = await a2a_send(client, a2a_message("configure me", "m-c"))
        for n in range(10):
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, id=f"c{n}", url=hook.url)
            )
        with pytest.raises(InvalidParamsError, match="at most 10"):
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, id="c10", url=hook.url)
            )
        # Replacing one by its id is no new config.
        await client.create_task_push_notification_config(
            pb.TaskPushNotificationConfig(task_id=task.id, id="c3", url=f"{hook.url}?v=2")
        )
    assert query(db, "SELECT COUNT(*) FROM a2a_push_configs") == [(10,)]


async def test_a_lone_surrogate_or_nul_is_a_clear_error_not_a_store_failure(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A)) as (_, url),
        aiohttp.ClientSession(headers={"A2A-Version": "1.0"}) as http,
    ):
        answers = []
        for n, text in enumerate(('"x\\ud800y"', '"x\\u0000y"')):
            raw = (
                '{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
                f'{{"role": "ROLE_USER", "messageId": "m-{n}", "parts": [{{"text": {text}}}]}}}}}}'
            )
            async with http.post(
                f"{url}/a2a", data=raw, headers={"Content-Type": "application/json"}
            ) as r:
                answers.append((r.status, (await r.json())["error"]))
    assert [(status, e["code"]) for status, e in answers] == [(200, -32602), (200, -32602)]
    assert "lone surrogate" in answers[0][1]["message"]
    assert "NUL" in answers[1][1]["message"]
    assert query(db, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert fake.requests == []
