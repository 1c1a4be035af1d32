"""The tool loop (SPEC 15) on a real session actor, store and agent against the fake model:
the model's calls run, their results go back, one final answer; every step and call stored;
a re-run replays what is stored (the model not asked again, a finished call not run again, a
call cut off mid-run run again only when its tool is read-only or idempotent); approvals wait
for an answer, a denial or a timeout is told to the model; the loop's limits.

Crashes of a whole process at each step are tests/test_tool_crash.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from gateway.events_tools import ApprovalAsked, ApprovalDecided, ToolLoopStopped
from gateway.mailbox import StopTurn, TurnAdmitted
from gateway.messages import CallState, ToolCall
from gateway.store import DecideCall, FinishCall, OpenCall, RecordStep, Transcript, TurnSteps
from tests.actors import Platform, session
from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.fakes.toolbox import RecordingToolBox, tool
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio


async def test_a_tool_call_runs_and_its_result_goes_back_to_the_model(tmp_path: Path) -> None:
    box = RecordingToolBox().add(tool("docs__search", lambda a: f"found: {a['text']}"))
    async with open_fake_model() as fake:
        fake.script(calls(("docs__search", {"text": "anyio"})), ok("anyio is a library"))
        async with session(tmp_path, fake, toolbox=box) as world:
            await world.admit("what is anyio?")
            await world.delivered(1)
            rows = await world.store.read(Transcript("peer:s"))
    (outcome,) = world.platform.delivered
    assert outcome.reply == "anyio is a library"
    assert box.executed == {"docs__search": 1}
    first, second = fake.requests
    assert [t["function"]["name"] for t in first.tools or []] == ["docs__search"]
    assert second.tool_results == [("call_1", "found: anyio")]
    assistant = [m for m in second.messages if m.get("role") == "assistant"]
    assert assistant[0]["tool_calls"][0]["function"]["name"] == "docs__search"
    # The transcript keeps the step and the call; the answer is the final row.
    assert [(r.role, r.state) for r in rows] == [
        ("user", "answered"),
        ("assistant", "step"),
        ("tool", "finished"),
        ("assistant", "final"),
    ]
    assert rows[2].content == "found: anyio" and rows[2].call_id == "call_1"
    assert json.loads(rows[1].tool_calls or "[]")[0]["name"] == "docs__search"


async def test_calls_of_one_step_run_together_and_the_history_keeps_only_the_answer(
    tmp_path: Path,
) -> None:
    release = anyio.Event()
    slow = tool("kv__get")
    slow.hold = release
    box = RecordingToolBox().add(slow, tool("kv__put"))
    async with open_fake_model() as fake:
        fake.script(
            calls(("kv__get", {"text": "a"}), ("kv__put", {"text": "b"})),
            ok("done"),
            ok("second answer"),
        )
        async with session(tmp_path, fake, toolbox=box) as world:
            await world.admit("do both")
            with anyio.fail_after(10):
                while box.executed["kv__put"] < 1:  # put ran while get was held
                    await box.entered.wait()
                    box.entered = anyio.Event()
            assert box.executed["kv__get"] == 0
            release.set()
            await world.delivered(1)
            await world.admit("and now?")
            await world.delivered(2)
    # The next turn's history: the user messages and final answers only.
    history = [(m["role"], m.get("content")) for m in fake.requests[2].messages[1:]]
    assert history == [("user", "do both"), ("assistant", "done"), ("user", "and now?")]


async def test_a_rerun_replays_stored_steps_without_asking_the_model_or_running_them_again(
    tmp_path: Path,
) -> None:
    """What a crash leaves: a stored step whose first call finished, whose second was cut off
    while it ran (a non-idempotent tool: its outcome is unknown), and whose third is a
    read-only tool cut off the same way (it runs again). The turn's row is handed to the
    actor only once they are stored, as a restart resumes it."""
    box = RecordingToolBox().add(
        tool("mail__send"), tool("db__read", lambda a: "fresh read", read_only=True)
    )
    send = ToolCall("call_1", "mail__send", '{"text": "hi"}')
    twice = ToolCall("call_2", "mail__send", '{"text": "again"}')
    read = ToolCall("call_3", "db__read", '{"text": "x"}')
    async with open_fake_model() as fake:
        fake.script(ok("all done"))
        async with session(tmp_path, fake, toolbox=box) as world:
            store = world.store
            row = await world.admitter.stored("send it")
            await store.submit(RecordStep(row, "", (send, twice, read), "gpt"))
            first = await store.submit(OpenCall(row, send, CallState.STARTED))
            await store.submit(FinishCall(first, "sent", False))
            await store.submit(OpenCall(row, twice, CallState.STARTED))
            await store.submit(OpenCall(row, read, CallState.STARTED))
            await world.actor.send(TurnAdmitted(row))
            await world.delivered(1)
            (stored,) = await store.read(TurnSteps(row.id))
    assert world.platform.delivered[0].reply == "all done"
    assert len(fake.requests) == 1  # the stored step was not asked for again
    assert box.executed == {"db__read": 1}  # the finished call and the unknown one: not run
    results = dict(fake.requests[0].tool_results)
    assert results["call_1"] == "sent"
    assert results["call_2"].startswith("unknown: the gateway stopped while this call ran")
    assert results["call_3"] == "fresh read"
    assert {c.call_id: c.state for c in stored.stored} == dict.fromkeys(
        ("call_1", "call_2", "call_3"), "finished"
    )


async def test_a_rerun_waits_for_a_starting_server_and_replays_what_is_offered_to_nobody(
    tmp_path: Path,
) -> None:
    """What a restart meets: the turn's stored step holds a call approved before the crash,
    whose server is still on its first try, of a tool that needs a yes nobody can be asked
    for now (a resumed peer turn: no tool is offered to it). The turn waits for the server,
    replays its step and runs the call once; the model is asked only for the answer."""
    box = RecordingToolBox().add(tool("git__push", approval=True))
    box.starting = anyio.Event()
    push = ToolCall("call_1", "git__push", '{"text": "main"}')
    async with open_fake_model() as fake:
        fake.script(ok("pushed"))
        async with session(tmp_path, fake, toolbox=box) as world:  # the platform cannot ask
            store = world.store
            row = await world.admitter.stored("push main")
            await store.submit(RecordStep(row, "", (push,), "gpt"))
            opened = await store.submit(OpenCall(row, push, CallState.AWAITING))
            assert await store.submit(DecideCall(opened, True, "peer"))
            await world.actor.send(TurnAdmitted(row))
            with anyio.fail_after(10):
                await box.waited.wait()
            assert fake.requests == []
            box.starting.set()
            await world.delivered(1)
    assert world.platform.delivered[0].reply == "pushed"
    assert box.executed == {"git__push": 1}
    (request,) = fake.requests
    assert request.tools is None
    assert request.tool_results == [("call_1", "push({'text': 'main'})")]


async def test_an_approval_waits_for_a_yes_and_a_no_is_told_to_the_model(
    tmp_path: Path,
) -> None:
    box = RecordingToolBox().add(tool("git__push", approval=True), tool("git__status"))
    platform = Platform(asking=True)
    async with open_fake_model() as fake:
        fake.script(
            calls(("git__push", {"text": "main"})),
            ok("pushed"),
            calls(("git__push", {"text": "dev"}), ids="second"),
            ok("not pushed"),
        )
        async with session(tmp_path, fake, toolbox=box, platform=platform) as world:
            await world.admit("push main")
            with anyio.fail_after(10):
                await platform.was_asked.wait()
            (request,) = platform.asked
            assert (request.tool, json.loads(request.arguments)) == ("git__push", {"text": "main"})
            assert box.executed == {}  # nothing runs before the yes
            assert await world.decide(request, True) == "Approved."
            assert await world.decide(request, False) == "This was answered already."
            await world.delivered(1)
            platform.was_asked = anyio.Event()
            await world.admit("push dev")
            with anyio.fail_after(10):
                await platform.was_asked.wait()
            assert await world.decide(platform.asked[-1], False) == "Denied."
            await world.delivered(2)
    assert box.executed == {"git__push": 1}
    assert [o.reply for o in world.platform.delivered] == ["pushed", "not pushed"]
    denied = dict(fake.requests[3].tool_results)
    assert denied["second_1"].startswith("denied: the person asked did not approve")
    assert [type(e) for e in world.events if isinstance(e, ApprovalAsked | ApprovalDecided)] == [
        ApprovalAsked,
        ApprovalDecided,
        ApprovalAsked,
        ApprovalDecided,
    ]


async def test_a_stopped_turn_cannot_be_approved_into_a_run(tmp_path: Path) -> None:
    """/stop while a call waits for a yes: the turn ends, and a click that comes later is
    told the call was answered; the tool never runs (a stopped turn is not resumed)."""
    box = RecordingToolBox().add(tool("git__push", approval=True))
    platform = Platform(asking=True)
    async with open_fake_model() as fake:
        fake.script(calls(("git__push", {"text": "main"})), ok("never"))
        async with session(tmp_path, fake, toolbox=box, platform=platform) as world:
            row = await world.admit("push main")
            with anyio.fail_after(10):
                await platform.was_asked.wait()
            await world.actor.send(StopTurn())
            await world.delivered(1)
            (request,) = platform.asked
            assert await world.decide(request, True) == "This was answered already."
            (step,) = await world.store.read(TurnSteps(row.id))
    assert box.executed == {}
    (call,) = step.stored
    assert call.state == "finished" and call.is_error
    assert call.result.startswith("denied: the turn was stopped")
    assert len(fake.requests) == 1


async def test_an_unanswered_approval_times_out_as_a_denial(tmp_path: Path) -> None:
    clock = Clock()
    box = RecordingToolBox().add(tool("git__push", approval=True))
    platform = Platform(asking=True)
    async with open_fake_model() as fake:
        fake.script(calls(("git__push", {"text": "main"})), ok("nobody said yes"))
        async with session(
            tmp_path,
            fake,
            toolbox=box,
            platform=platform,
            approval_timeout_s=60,
            wall=clock,
        ) as world:
            await world.admit("push")
            with anyio.fail_after(10):
                await platform.was_asked.wait()
            clock.now += 61  # the waiting turn looks again within its poll interval
            await world.delivered(1)
    assert box.executed == {}
    (result,) = fake.requests[1].tool_results
    assert result[1] == "denied: nobody approved this call within 60 s; it did not run"
    decided = [e for e in world.events if isinstance(e, ApprovalDecided)]
    assert [e.decision for e in decided] == ["timeout"]


async def test_without_anyone_to_ask_tools_that_need_an_approval_are_not_offered(
    tmp_path: Path,
) -> None:
    box = RecordingToolBox().add(tool("git__push", approval=True), tool("git__status"))
    async with open_fake_model() as fake:
        async with session(tmp_path, fake, toolbox=box) as world:  # the platform cannot ask
            await world.admit("status?")
            await world.delivered(1)
    assert [t["function"]["name"] for t in fake.requests[0].tools or []] == ["git__status"]


async def test_a_profile_without_tools_offers_none(tmp_path: Path) -> None:
    box = RecordingToolBox().add(tool("git__status"))
    async with open_fake_model() as fake:
        async with session(tmp_path, fake, toolbox=box, tools=()) as world:
            await world.admit("hello")
            await world.delivered(1)
    assert fake.requests[0].tools is None


async def test_the_loop_stops_at_its_step_limit_and_says_what_was_done(tmp_path: Path) -> None:
    box = RecordingToolBox().add(tool("kv__get", read_only=True))
    async with open_fake_model() as fake:
        fake.script(*(calls(("kv__get", {"text": str(i)}), ids=f"s{i}") for i in range(3)))
        async with session(tmp_path, fake, toolbox=box, agent_extra="max_tool_steps = 3") as world:
            await world.admit("loop")
            await world.delivered(1)
    reply = world.platform.delivered[0].reply
    assert reply.startswith("I stopped before finishing: the limit of 3 tool steps was reached")
    assert reply.count("kv__get: ok") == 3
    assert len(fake.requests) == 3
    assert [e.reason for e in world.events if isinstance(e, ToolLoopStopped)] == ["steps"]


async def test_a_call_repeated_three_times_stops_the_loop(tmp_path: Path) -> None:
    box = RecordingToolBox().add(tool("kv__get", read_only=True))
    async with open_fake_model() as fake:
        fake.script(*(calls(("kv__get", {"text": "same"}), ids=f"s{i}") for i in range(5)))
        async with session(tmp_path, fake, toolbox=box) as world:
            await world.admit("loop")
            await world.delivered(1)
    assert "the same tool call was repeated" in world.platform.delivered[0].reply
    assert len(fake.requests) == 3


async def test_a_tool_error_or_an_unknown_tool_is_a_result_not_a_failed_turn(
    tmp_path: Path,
) -> None:
    box = RecordingToolBox().add(tool("db__query", lambda a: "syntax error", error=True))
    async with open_fake_model() as fake:
        fake.script(
            calls(("db__query", {"text": "SELEC"}), ("nope__tool", {"text": "x"})),
            ok("sorry, the query failed"),
        )
        async with session(tmp_path, fake, toolbox=box) as world:
            await world.admit("query")
            await world.delivered(1)
    outcome = world.platform.delivered[0]
    assert outcome.failure is None and outcome.reply == "sorry, the query failed"
    results = dict(fake.requests[1].tool_results)
    assert results == {
        "call_1": "syntax error",
        "call_2": "error: the tool nope__tool is not available now (its server is down or it"
        " was removed)",
    }
