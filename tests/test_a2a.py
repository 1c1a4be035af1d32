"""A2A end to end (SPEC 12): the official a2a-sdk client against a real gateway, its store
and the fake model. What a peer agent sees: the card, tasks and their states, streamed
updates; what an operator sees: the rows, and the model calls made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError

from tests.fakes.openai_server import Hold, model_not_found, ok, open_fake_model, streamed
from tests.harness import make_config, running_gateway
from tests.support.a2a import A2A, a2a_client, answer, message, send

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def rows(db: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(
            conn.execute("SELECT conversation, role, content, state FROM messages ORDER BY id")
        )


async def test_card_discovery_names_the_skills_and_the_a2a_url(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A)) as (_, url),
        httpx.AsyncClient() as http,
    ):
        card = await A2ACardResolver(http, url).get_agent_card()
        legacy = (await http.get(f"{url}/.well-known/agent.json")).json()
    assert card.name == "helper" and card.description == "answers"
    assert [(s.id, s.name, s.description) for s in card.skills] == [("chat", "Chat", "talks")]
    assert {(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces} == {
        (f"{url}/a2a", "JSONRPC", "1.0"),
        (f"{url}/a2a", "JSONRPC", "0.3"),
    }
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert not card.security_schemes  # no tokens: no scheme
    assert legacy["name"] == "helper" and legacy["url"] == f"{url}/a2a"


async def test_send_message_1_0_is_answered_and_stored_as_one_turn(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url) as client,
    ):
        task = await send(client, message("hello there", "m-1", "ctx-1"))
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert task.context_id == "ctx-1"
    assert answer(task) == "echo: hello there"
    assert [(m.role, m.parts[0].text) for m in task.history] == [
        (pb.ROLE_USER, "hello there"),
        (pb.ROLE_AGENT, "echo: hello there"),
    ]
    assert got.id == task.id and got.status.state == pb.TASK_STATE_COMPLETED
    assert rows(db) == [
        ("a2a:ctx-1", "user", "hello there", "answered"),
        ("a2a:ctx-1", "assistant", "echo: hello there", "final"),
    ]
    assert len(fake.requests) == 1


async def test_tasks_are_never_merged_when_the_gateway_collects(tmp_path: Path) -> None:
    """``[gateway] queue_mode = "collect"`` merges chat bursts (SPEC 10), but an A2A task is
    one turn (SPEC 12): two tasks sent at once to one context are two answers."""
    db = tmp_path / "b.db"
    collect = '[gateway]\nqueue_mode = "collect"\ndebounce_s = 0.5\n\n' + A2A
    tasks: dict[str, pb.Task] = {}
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=collect)) as (_, url),
        a2a_client(url) as client,
    ):

        async def one(text: str, message_id: str) -> None:
            tasks[text] = await send(client, message(text, message_id, "ctx-burst"))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(one, "first", "m-b1")
                group.start_soon(one, "second", "m-b2")
    assert {text: answer(task) for text, task in tasks.items()} == {
        "first": "echo: first",
        "second": "echo: second",
    }
    assert len(fake.requests) == 2


async def test_message_send_0_3_is_answered(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url, legacy=True) as client,
    ):
        task = await send(client, message("old protocol", "m-03"))
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert answer(task) == "echo: old protocol"
    assert task.context_id  # a new context, named by the server
    assert got.status.state == pb.TASK_STATE_COMPLETED and answer(got) == "echo: old protocol"


async def test_a_repeated_message_id_returns_the_task_and_runs_no_second_turn(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url) as client,
    ):
        first = await send(client, message("only once", "same-id", "ctx-9"))
        again = await send(client, message("only once", "same-id", "ctx-9"))
        without_context = await send(client, message("only once", "same-id"))
    assert first.id == again.id == without_context.id
    assert without_context.context_id == "ctx-9"
    assert answer(again) == "echo: only once"
    assert len(fake.requests) == 1
    assert len(rows(db)) == 2


async def test_send_streaming_message_yields_status_and_text_before_completion(
    tmp_path: Path,
) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url, streaming=True) as client,
    ):
        fake.script(streamed("one ", "two ", "three", hold_after=2))
        seen: list[pb.StreamResponse] = []
        stream = aiter(client.send_message(message("count", "m-s", "ctx-s")))
        while len([e for e in seen if e.HasField("artifact_update")]) < 2:
            seen.append(await anext(stream))
        # Two pieces arrived while the model still holds its stream open.
        assert fake.streams_done == []
        fake.release_streams()
        seen.extend([event async for event in stream])
    kinds = [e.WhichOneof("payload") for e in seen]
    assert kinds[0] == "task" and kinds[1] == "status_update"
    assert seen[1].status_update.status.state == pb.TASK_STATE_WORKING
    text = "".join(
        p.text
        for e in seen
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )
    assert text == "one two three"
    assert kinds[-1] == "status_update"
    assert seen[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_cancel_task_stops_a_slow_turn(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url) as client,
    ):
        fake.script(Hold(ok("too late")))
        request = message("take your time", "m-c", "ctx-c")
        request.configuration.return_immediately = True
        task = await send(client, request)
        assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
        await fake.wait_for_requests(1)
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        fake.release()
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert got.status.state == pb.TASK_STATE_CANCELED
    assert rows(db)[0][3] == "cancelled"


async def test_subscribe_to_task_joins_a_running_stream(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url, streaming=True) as first,
        a2a_client(url, streaming=True) as second,
    ):
        fake.script(streamed("alpha ", "beta ", "gamma", hold_after=1))
        stream = aiter(first.send_message(message("greek", "m-sub", "ctx-sub")))
        head = [await anext(stream) for _ in range(3)]  # task, working, the first piece
        task_id = head[0].task.id
        joined = aiter(second.subscribe(pb.SubscribeToTaskRequest(id=task_id)))
        snapshot = await anext(joined)
        assert snapshot.task.id == task_id
        assert snapshot.task.status.state == pb.TASK_STATE_WORKING
        assert (await anext(joined)).status_update.status.state == pb.TASK_STATE_WORKING
        fake.release_streams()
        rest = [event async for event in joined]
        [event async for event in stream]
    text = "".join(
        p.text
        for e in rest
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )
    assert text == "beta gamma"  # what the model wrote after the subscriber joined
    assert rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_message_stream_0_3_and_list_tasks_paged(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url, streaming=True, legacy=True) as legacy,
        a2a_client(url) as client,
    ):
        fake.script(streamed("old ", "style"))
        events = [e async for e in legacy.send_message(message("legacy", "m-l1", "ctx-l"))]
        for n in (2, 3):
            await send(client, message(f"task {n}", f"m-l{n}", "ctx-l"))
        page = await client.list_tasks(pb.ListTasksRequest(context_id="ctx-l", page_size=2))
        rest = await client.list_tasks(
            pb.ListTasksRequest(context_id="ctx-l", page_size=2, page_token=page.next_page_token)
        )
    text = "".join(
        p.text
        for e in events
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )
    assert text == "old style"
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert [t.history[0].parts[0].text for t in page.tasks] == ["task 3", "task 2"]  # newest first
    assert page.total_size == 3 and page.next_page_token
    assert [t.history[0].parts[0].text for t in rest.tasks] == ["legacy"]
    assert not rest.next_page_token


async def test_a_failed_turn_is_a_failed_task_with_the_reason(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url, streaming=True) as streaming,
        a2a_client(url) as client,
    ):
        fake.script(model_not_found(), model_not_found())
        task = await send(client, message("doomed", "m-f1"))
        events = [e async for e in streaming.send_message(message("doomed too", "m-f2"))]
    assert task.status.state == pb.TASK_STATE_FAILED
    assert task.status.message.role == pb.ROLE_AGENT and task.status.message.parts[0].text
    assert not task.artifacts
    assert events[-1].status_update.status.state == pb.TASK_STATE_FAILED


async def test_push_config_methods_of_the_sdk(tmp_path: Path) -> None:
    extra = A2A.replace("[[a2a.skills]]", 'push_hosts = ["127.0.0.1:9"]\n[[a2a.skills]]')
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=extra)) as (_, url),
        a2a_client(url) as client,
    ):
        task = await send(client, message("configure me", "m-pc"))
        made = await client.create_task_push_notification_config(
            pb.TaskPushNotificationConfig(task_id=task.id, id="hook-1", url="http://127.0.0.1:9/h")
        )
        got = await client.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
        )
        await client.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
        )
        left = await client.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
    assert (made.id, made.task_id, made.url) == ("hook-1", task.id, "http://127.0.0.1:9/h")
    assert got == made
    assert list(left.configs) == []


async def test_a_task_queued_behind_another_is_not_cancelled_in_its_place(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A)) as (_, url),
        a2a_client(url) as client,
    ):
        fake.script(Hold())
        tasks = []
        for n in (1, 2):
            request = message(f"task {n}", f"m-q{n}", "ctx-q")
            request.configuration.return_immediately = True
            tasks.append(await send(client, request))
        await fake.wait_for_requests(1)
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(pb.CancelTaskRequest(id=tasks[1].id))
        first = await client.cancel_task(pb.CancelTaskRequest(id=tasks[0].id))
        fake.release()
        second = await send(client, message("task 2", "m-q2", "ctx-q"))  # waits for its end
    assert first.status.state == pb.TASK_STATE_CANCELED
    assert second.id == tasks[1].id and answer(second) == "echo: task 2"
    assert [r[3] for r in rows(db) if r[1] == "user"] == ["cancelled", "answered"]
