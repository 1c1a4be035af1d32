"""A2A push notifications (SPEC 12): durable through the outbox, retried with backoff, sent
with the client's token, and only to ``[a2a] push_hosts``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, PushNotificationNotSupportedError

from tests.fakes.openai_server import Hold, open_fake_model
from tests.harness import free_port, make_config, running_gateway
from tests.support.a2a import A2A, a2a_client, message, push_request, push_to, receiver, send

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def outbox(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT platform, state FROM outbox ORDER BY id"))


async def test_a_notification_is_retried_until_the_receiver_takes_it(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    port = free_port()
    extra = push_to(port)
    async with (
        open_fake_model() as fake,
        receiver(failures=2, port=port) as hook,
        running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
        a2a_client(url) as client,
    ):
        task = await send(client, push_request("tell me later", "m-p", hook.url))
        configs = await client.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        with anyio.fail_after(20):
            await hook.delivered.wait()
    assert [c.url for c in configs.configs] == [hook.url]
    assert not configs.configs[0].token  # the token is the client's; never shown back
    assert len(hook.attempts) == 3  # two refusals, then delivered once
    headers, body = hook.attempts[-1]
    assert headers["X-A2A-Notification-Token"] == "client-token-1"
    assert body["task"]["id"] == task.id
    assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert body["task"]["artifacts"][0]["parts"] == [{"text": "echo: tell me later"}]
    assert outbox(db) == [("a2a", "delivered")]


async def test_push_is_refused_outside_push_hosts_and_when_off(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    extra = push_to(free_port())
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=extra)) as (_, url),
        a2a_client(url) as client,
    ):
        with pytest.raises(InvalidParamsError):
            await send(client, push_request("no", "m-x", "http://example.com/hook"))
    db_off = tmp_path / "off.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db_off, fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url) as client,
    ):
        with pytest.raises(PushNotificationNotSupportedError):
            await send(client, push_request("no", "m-y", "http://127.0.0.1:9/hook"))
        task = await send(client, message("plain", "m-z"))
        with pytest.raises(PushNotificationNotSupportedError):
            config = pb.TaskPushNotificationConfig(task_id=task.id, url="http://127.0.0.1:9/")
            await client.create_task_push_notification_config(config)
    assert fake.requests and len(fake.requests) == 1  # only the plain message ran
    with sqlite3.connect(db) as conn:
        assert list(conn.execute("SELECT COUNT(*) FROM messages")) == [(0,)]
        assert list(conn.execute("SELECT COUNT(*) FROM a2a_push_configs")) == [(0,)]


async def test_a_cancelled_task_is_notified_too(tmp_path: Path) -> None:
    port = free_port()
    extra = push_to(port)
    async with (
        open_fake_model() as fake,
        receiver(failures=1, port=port) as hook,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=extra)) as (_, url),
        a2a_client(url) as client,
    ):
        fake.script(Hold())
        request = push_request("never mind", "m-pc", hook.url)
        request.configuration.return_immediately = True
        task = await send(client, request)
        await fake.wait_for_requests(1)
        await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        with anyio.fail_after(20):
            await hook.delivered.wait()
        fake.release()
    assert len(hook.attempts) == 2  # refused once, then taken
    assert hook.attempts[-1][1]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
