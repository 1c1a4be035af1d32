"""A2A tasks are rows (SPEC 12): they outlive the process, and any node of a cluster serves
them. Real processes (``python -m gateway run``), the official a2a-sdk client."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest
from a2a.types import a2a_pb2 as pb

from tests.fakes.openai_server import Hold, ok, open_fake_model
from tests.harness import GatewayProcess, cluster_node, config_text, free_port, pg_fetch
from tests.support.a2a import (
    A2A,
    a2a_client,
    answer,
    message,
    push_request,
    push_to,
    receiver,
    send,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.process]


async def stop(*nodes: GatewayProcess) -> None:
    for gw in nodes:
        gw.signal(signal.SIGTERM)
    for gw in nodes:
        with anyio.fail_after(20):
            assert await gw.wait() == 0, gw.log_tail()


async def test_get_task_after_a_restart(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        port = free_port()
        config = tmp_path / "botmux.toml"
        listen = f"127.0.0.1:{port}"
        config.write_text(config_text(tmp_path / "b.db", fake.base_url, listen=listen, extra=A2A))
        gw = GatewayProcess(config, port, tmp_path / "gw.log")
        await gw.start()
        try:
            async with a2a_client(gw.url) as client:
                task = await send(client, message("remember me", "m-r", "ctx-r"))
        finally:
            await stop(gw)
        await gw.start()  # a new process: nothing of the task is in memory
        try:
            async with a2a_client(gw.url) as client:
                got = await client.get_task(pb.GetTaskRequest(id=task.id))
                listed = await client.list_tasks(pb.ListTasksRequest(context_id="ctx-r"))
        finally:
            await stop(gw)
    assert got.status.state == pb.TASK_STATE_COMPLETED
    assert answer(got) == "echo: remember me"
    assert [t.id for t in listed.tasks] == [task.id]
    assert len(fake.requests) == 1


async def test_a_task_sent_to_one_node_is_read_and_cancelled_through_another(
    tmp_path: Path, postgres_url: str
) -> None:
    async with open_fake_model() as fake:
        a, b = (
            cluster_node(
                tmp_path, postgres_url, fake.base_url, name, lease_s=2.0, heartbeat_s=0.4, extra=A2A
            )
            for name in ("a", "b")
        )
        await a.start()
        await b.start()
        try:
            fake.script(Hold(ok("too late")))
            async with a2a_client(a.url) as to_a, a2a_client(b.url) as to_b:
                request = message("a slow one", "m-n", "ctx-n")
                request.configuration.return_immediately = True
                task = await send(to_a, request)
                with anyio.fail_after(10):
                    await fake.wait_for_requests(1)  # running on a
                seen = await to_b.get_task(pb.GetTaskRequest(id=task.id))
                canceled = await to_b.cancel_task(pb.CancelTaskRequest(id=task.id))
                after = await to_a.get_task(pb.GetTaskRequest(id=task.id))
                fake.release()
                done = await send(to_b, message("next", "m-n2", "ctx-n"))
        finally:
            await stop(a, b)
    assert seen.id == task.id and seen.context_id == "ctx-n"
    assert seen.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert after.status.state == pb.TASK_STATE_CANCELED
    assert answer(done) == "echo: next"
    rows = await pg_fetch(postgres_url, "SELECT content, state FROM messages WHERE role = 'user'")
    assert [(r["content"], r["state"]) for r in rows] == [
        ("a slow one", "cancelled"),
        ("next", "answered"),
    ]


async def test_a_push_notification_survives_a_crash(tmp_path: Path) -> None:
    hook_port = free_port()
    async with open_fake_model() as fake, receiver(failures=10**6, port=hook_port) as hook:
        port = free_port()
        config = tmp_path / "botmux.toml"
        extra = push_to(hook_port)
        listen = f"127.0.0.1:{port}"
        config.write_text(config_text(tmp_path / "b.db", fake.base_url, listen=listen, extra=extra))
        gw = GatewayProcess(config, port, tmp_path / "gw.log")
        await gw.start()
        try:
            async with a2a_client(gw.url) as client:
                task = await send(client, push_request("while down", "m-crash", hook.url))
            with anyio.fail_after(20):
                await hook.tried.wait()  # the receiver refuses the first try...
        finally:
            await gw.kill()  # ...and botmux dies before it retries
        hook.failures = 0
        await gw.start()  # the undelivered notification is handed back at start
        try:
            with anyio.fail_after(30):
                await hook.delivered.wait()
        finally:
            await stop(gw)
    headers, body = hook.attempts[-1]
    assert headers["X-A2A-Notification-Token"] == "client-token-1"
    assert body["task"]["id"] == task.id
    assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(fake.requests) == 1  # the turn did not run again
