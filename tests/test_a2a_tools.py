"""Tool calls on A2A (SPEC 15) as a peer agent sees them with the official a2a-sdk client:
a task whose call waits for a yes moves to ``input-required`` with a message asking about
the tool and its arguments; the task's next message, a yes or a no, decides it and the task
carries on to ``completed``; a streaming request sees each call as ``working`` status updates
naming the tool, and its stream ends at ``input-required``; push configs hear of the
question. A whole gateway with an in-process toolbox and the fake model calling tools."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest
from a2a.client.client import Client
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.fakes.push_receiver import push_receiver
from tests.fakes.toolbox import RecordingToolBox, tool
from tests.harness import make_config, running_gateway
from tests.support.a2a import a2a_client
from tests.support.a2a import message as a2a_message

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

A2A = '[a2a]\nname = "helper"\n\n[agent]\ntools = ["*"]\n'
QUESTION = 'May I call the tool git__push with the arguments {"text": "main"}? Answer yes or no.'


def box() -> RecordingToolBox:
    return RecordingToolBox().add(
        tool("docs__search", lambda a: f"found: {a['text']}"),
        tool("git__push", lambda a: f"pushed {a['text']}", approval=True),
    )


async def send(client: Client, request: pb.SendMessageRequest) -> pb.Task:
    events = [event async for event in client.send_message(request)]
    assert len(events) == 1 and events[0].HasField("task")
    return events[0].task


def answer(task: pb.Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


def asked(task: pb.Task) -> tuple[int, int, str]:
    message = task.status.message
    return task.status.state, message.role, "".join(p.text for p in message.parts)


def progress(events: list[pb.StreamResponse]) -> list[tuple[int, str]]:
    """(state, message) of each status update."""
    return [
        (
            e.status_update.status.state,
            "".join(p.text for p in e.status_update.status.message.parts),
        )
        for e in events
        if e.HasField("status_update")
    ]


def rows(db: Path) -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, state, decided_by FROM messages ORDER BY id"))


async def test_a_task_asks_for_input_and_its_next_message_answers_yes(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A), tools=tools) as (_, url),
        a2a_client(url) as client,
    ):
        fake.script(calls(("git__push", {"text": "main"})), ok("pushed main"))
        task = await send(client, a2a_message("push main", "m-1", "ctx-1"))
        assert asked(task) == (pb.TASK_STATE_INPUT_REQUIRED, pb.ROLE_AGENT, QUESTION)
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.status.state == pb.TASK_STATE_INPUT_REQUIRED
        listed = await client.list_tasks(pb.ListTasksRequest(context_id="ctx-1"))
        assert [asked(t) for t in listed.tasks] == [asked(task)]
        assert tools.executed == {}

        # Not a yes or a no: refused, nothing decided.
        with pytest.raises(InvalidParamsError):
            await send(client, a2a_message("yes, but not to main", "m-2", "ctx-1", task.id))
        assert tools.executed == {}
        done = await send(client, a2a_message("Yes.", "m-3", "ctx-1", task.id))
        # Sent again (no response reached the client): the same task, nothing decided twice.
        again = await send(client, a2a_message("Yes.", "m-3", "ctx-1", task.id))
        # A message to a task that asks nothing is refused, as before.
        with pytest.raises(UnsupportedOperationError):
            await send(client, a2a_message("yes", "m-4", "ctx-1", task.id))
    assert done.id == again.id == task.id
    assert done.status.state == pb.TASK_STATE_COMPLETED and answer(done) == "pushed main"
    assert again.status.state == pb.TASK_STATE_COMPLETED
    assert tools.executed == {"git__push": 1}
    assert len(fake.requests) == 2
    assert dict(fake.requests[1].tool_results) == {"call_1": "pushed main"}
    # The answer is no turn of its own: one user row, its step, the call (decided by the
    # task's owner), the answer.
    assert rows(db) == [
        ("user", "answered", None),
        ("assistant", "step", None),
        ("tool", "finished", "a2a"),
        ("assistant", "final", None),
    ]


async def test_a_no_is_told_to_the_model_and_the_tool_never_runs(tmp_path: Path) -> None:
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A), tools=tools) as (
            _,
            url,
        ),
        a2a_client(url, legacy=True) as client,  # the 0.3 methods and shapes
    ):
        fake.script(calls(("git__push", {"text": "main"})), ok("I left main alone"))
        task = await send(client, a2a_message("push main", "m-1", "ctx-2"))
        assert asked(task) == (pb.TASK_STATE_INPUT_REQUIRED, pb.ROLE_AGENT, QUESTION)
        done = await send(client, a2a_message("no", "m-2", "ctx-2", task.id))
    assert done.status.state == pb.TASK_STATE_COMPLETED and answer(done) == "I left main alone"
    assert tools.executed == {}
    told = dict(fake.requests[1].tool_results)["call_1"]
    assert told.startswith("denied: the person asked did not approve this call")


async def test_a_streamed_task_shows_each_tool_and_ends_at_input_required(
    tmp_path: Path,
) -> None:
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A), tools=tools) as (
            _,
            url,
        ),
        a2a_client(url, streaming=True) as client,
    ):
        fake.script(
            calls(("docs__search", {"text": "branch"})),
            calls(("git__push", {"text": "main"}), ids="push"),
            ok("searched and pushed"),
        )
        with anyio.fail_after(10):
            first = [e async for e in client.send_message(a2a_message("push", "m-1", "ctx-3"))]
            task_id = first[0].task.id
            second = [
                e async for e in client.send_message(a2a_message("y", "m-2", "ctx-3", task_id))
            ]
    working, needs = pb.TASK_STATE_WORKING, pb.TASK_STATE_INPUT_REQUIRED
    assert first[0].task.status.state in (pb.TASK_STATE_SUBMITTED, working)
    assert progress(first) == [
        (working, ""),
        (working, "Using the tool docs__search."),
        (working, "The tool docs__search finished."),
        (needs, QUESTION),
    ]
    assert second[0].task.id == task_id
    assert progress(second) == [
        (working, ""),
        (working, "Using the tool git__push."),
        (working, "The tool git__push finished."),
        (pb.TASK_STATE_COMPLETED, ""),
    ]
    text = "".join(
        p.text
        for e in second
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )
    assert text == "searched and pushed"
    assert tools.executed == {"docs__search": 1, "git__push": 1}


async def test_push_configs_hear_of_the_question_and_of_the_end(tmp_path: Path) -> None:
    async with open_fake_model() as fake, push_receiver() as hook:
        extra = A2A.replace("[agent]", f'push_hosts = ["127.0.0.1:{hook.port}"]\n\n[agent]')
        config = make_config(tmp_path / "b.db", fake.base_url, extra=extra)
        async with running_gateway(config, tools=box()) as (_, url), a2a_client(url) as client:
            fake.script(calls(("git__push", {"text": "main"})), ok("pushed"))
            request = a2a_message("push main", "m-1", "ctx-4")
            request.configuration.task_push_notification_config.url = hook.url
            request.configuration.return_immediately = True
            task = await send(client, request)
            with anyio.fail_after(10):
                await hook.wait_for(1)
            (question,) = [json.loads(r.body) for r in hook.received]
            assert question["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            assert question["task"]["status"]["message"]["parts"] == [{"text": QUESTION}]
            done = await send(client, a2a_message("yes", "m-2", "ctx-4", task.id))
            with anyio.fail_after(10):
                await hook.wait_for(2)
    notified = [json.loads(r.body) for r in hook.received]
    assert done.status.state == pb.TASK_STATE_COMPLETED
    assert notified[-1]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_task_that_asks_can_be_cancelled_and_then_takes_no_answer(
    tmp_path: Path,
) -> None:
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url, extra=A2A), tools=tools) as (
            _,
            url,
        ),
        a2a_client(url) as client,
    ):
        fake.script(calls(("git__push", {"text": "main"})), ok("never"))
        task = await send(client, a2a_message("push main", "m-1", "ctx-5"))
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        waiting = await client.list_tasks(
            pb.ListTasksRequest(context_id="ctx-5", status=pb.TASK_STATE_INPUT_REQUIRED)
        )
        assert [t.id for t in waiting.tasks] == [task.id]
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        with pytest.raises(UnsupportedOperationError):
            await send(client, a2a_message("yes", "m-2", "ctx-5", task.id))
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert canceled.status.state == got.status.state == pb.TASK_STATE_CANCELED
    assert tools.executed == {} and len(fake.requests) == 1
