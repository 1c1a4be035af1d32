"""Exactly-once for tool side effects (SPEC 15): kill -9 at every failpoint of the tool loop,
and a takeover mid-loop on two nodes.

botmux runs as a real process with a real MCP server over stdio (tests/fakes/mcp_ledger.py,
built with the SDK), whose tools write each run into a file outside the gateway: the count of
runs survives the gateway's death. The process kills itself at a failpoint (or the tool kills
it mid-call); it is restarted without the failpoint (or another node takes over); the peer
client asks again with its Idempotency-Key, and answers an approval through the approvals
route. Asserted: the one answer the client gets, the runs the server saw, the requests the
fake provider received, and the stored rows. ``send`` acts and may not run twice; ``lookup``
is read-only and may run again, once. docs/RELIABILITY.md has the table.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from agent.tool_loop import DENIED, UNKNOWN
from gateway import events_tools
from gateway.failpoints import EVENTS
from tests.fakes.mcp_ledger import runs, stdio_server
from tests.fakes.openai_server import FakeModel, Outcome, Request, calls, ok
from tests.harness import GatewayProcess, botmux_process, cluster_nodes, pg_fetch
from tests.support.crashes import crash_at, settle
from tests.support.sse import sse_events

pytestmark = pytest.mark.anyio

URL = "/api/sessions/crash/chat"
KEY = {"Idempotency-Key": "crash-1"}
UP = 'botmux_tool_servers_up{server="ledger"} 1.0'


def answering(tool: str, **arguments: Any) -> Callable[[Request], Outcome]:
    """The model: offered tools and holding no result, it calls ``ledger__<tool>`` on "hello";
    holding a result, it answers with it; offered none, it says so (as a real model would)."""

    def answer(request: Request) -> Outcome:
        results = [m["content"] for m in request.messages if m.get("role") == "tool"]
        if results:
            return ok(f"done: {results[-1]}")
        if request.tools:
            return calls((f"ledger__{tool}", {"text": "hello", **arguments}))
        return ok("I was offered no tools")

    return answer


def steps_asked(model: FakeModel) -> int:
    """Requests for the turn's first step (no tool result yet): one per time it was chosen."""
    return sum(not any(m.get("role") == "tool" for m in r.messages) for r in model.requests)


def stored(db: Path) -> list[tuple[str, str, int | None, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, state, is_error, content FROM messages ORDER BY id"))


def gateway_with_tools(
    tmp_path: Path, model: FakeModel, approval: str, tools: str = "ledger__*"
) -> GatewayProcess:
    """botmux with the ledger server's ``tools`` offered to every conversation; idle actors
    kept, so a restart finds the turn's work only in the store."""
    extra = (
        stdio_server("ledger", tmp_path / "ledger.txt", approval)
        + f'[agent]\ntools = ["{tools}"]\n[gateway]\nidle_evict_s = 600\n'
    )
    return botmux_process(tmp_path, model.base_url, extra=extra)


async def start(gateway: GatewayProcess, failpoint: str = "") -> None:
    """Start it and wait until the ledger server is up (its tools offered)."""
    await gateway.start(env={"BOTMUX_FAILPOINT": failpoint})
    async with aiohttp.ClientSession() as http:
        with anyio.fail_after(20):
            while True:
                async with http.get(f"{gateway.url}/metrics") as r:
                    if UP in await r.text():
                        return
                await anyio.sleep(0.05)


#: (where the gateway dies, the tool, its runs the server saw, the result the model got)
LOOP_CASES = [
    # The model chose the step; nothing stored: it is asked again, the tool runs once.
    ("before_step_stored", "send", ["send hello"], "sent hello"),
    # Stored, no call run: the restart runs the call; the model is not asked again.
    ("after_step_stored", "send", ["send hello"], "sent hello"),
    # Committed started, not yet run: a tool that acts is not run (it may have been), the
    # model is told the outcome is unknown; a read-only one runs.
    ("after_call_started", "send", [], UNKNOWN),
    ("after_call_started", "lookup", ["lookup hello"], "found hello"),
    # Its result committed: replayed, not run again.
    ("after_call_finished", "send", ["send hello"], "sent hello"),
    # The tool ran and killed the gateway before it heard back: not run again; a read-only
    # tool runs again, once.
    ("mid_call", "send", ["send hello"], UNKNOWN),
    ("mid_call", "lookup", ["lookup hello", "lookup hello"], "found hello"),
]
#: (where the gateway dies, the answer: yes or no)
APPROVAL_CASES = [
    # Asked and stored, no answer yet: the restart keeps the wait; the answer given to the
    # restarted gateway decides it.
    ("awaiting_approval", True),
    ("awaiting_approval", False),
    # The yes committed, the call not run: the restart runs it.
    ("after_approval_stored", True),
]


def test_every_failpoint_of_the_tool_loop_is_crashed_at() -> None:
    """A failpoint added to the tool loop's events is added here too."""
    names = {e.name for e in vars(events_tools).values() if isinstance(getattr(e, "name", 0), str)}
    tool_points = {point for point, event in EVENTS.items() if event in names}
    covered = {c[0] for c in LOOP_CASES} | {c[0] for c in APPROVAL_CASES}
    assert covered - {"mid_call"} == tool_points
    assert len(tool_points) == 6


@pytest.mark.process
@pytest.mark.parametrize(
    ("point", "tool", "ran", "result"), [pytest.param(*c, id=f"{c[0]}-{c[1]}") for c in LOOP_CASES]
)
async def test_a_crash_in_the_tool_loop(
    tmp_path: Path, model: FakeModel, point: str, tool: str, ran: list[str], result: str
) -> None:
    mid_call = point == "mid_call"
    model.default = answering(tool, crash=True) if mid_call else answering(tool)
    gateway = gateway_with_tools(tmp_path, model, "never")
    try:
        await start(gateway, "" if mid_call else f"{point}:kill")
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                await http.post(f"{gateway.url}{URL}", json={"message": "hi"}, headers=KEY)
            if mid_call:
                with anyio.fail_after(20):
                    assert await gateway.wait() == -signal.SIGKILL, gateway.log_tail()
            else:
                await crash_at(gateway, point)
            await start(gateway)
            with anyio.fail_after(20):
                r = await http.post(f"{gateway.url}{URL}", json={"message": "hi"}, headers=KEY)
                body = await r.json()
        await settle(gateway)
    finally:
        await gateway.kill()
    assert (r.status, body["message"]["content"]) == (200, f"done: {result}")
    assert runs(tmp_path / "ledger.txt") == ran
    # The first step was asked for again only when it had not been stored.
    assert steps_asked(model) == (2 if point == "before_step_stored" else 1)
    assert len(model.requests) == steps_asked(model) + 1
    error = int(result == UNKNOWN)
    assert stored(tmp_path / "botmux.db") == [
        ("user", "answered", 0, "hi"),
        ("assistant", "step", 0, ""),
        ("tool", "finished", error, result),
        ("assistant", "final", 0, f"done: {result}"),
    ]


async def chat_until_killed(
    http: aiohttp.ClientSession, gateway: GatewayProcess, *, approve_when_asked: bool
) -> None:
    """A streamed chat (the peer route that can be asked for a yes) read until the process
    dies under it. ``approve_when_asked``: answer yes when the question comes."""
    body = {"message": "hi", "stream": True}
    with anyio.fail_after(20), contextlib.suppress(aiohttp.ClientError):
        async with http.post(f"{gateway.url}{URL}", json=body, headers=KEY) as r:
            async for name, data in sse_events(r):
                if name == "approval" and approve_when_asked:
                    with pytest.raises(aiohttp.ClientError):  # it dies before it answers
                        await approve(http, gateway, data["call_id"], True)


async def approve(
    http: aiohttp.ClientSession, gateway: GatewayProcess, call_id: str, yes: bool
) -> dict[str, Any]:
    url = f"{gateway.url}/api/sessions/crash/approvals/{call_id}"
    async with http.post(url, json={"approve": yes}) as r:
        assert r.status == 200, await r.text()
        return dict(await r.json())


def calls_stored(db: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT state, decided_by FROM messages WHERE role = 'tool'"))


@pytest.mark.process
@pytest.mark.parametrize(
    ("point", "yes"),
    [pytest.param(*c, id=f"{c[0]}-{'yes' if c[1] else 'no'}") for c in APPROVAL_CASES],
)
async def test_a_crash_while_an_approval_waits(
    tmp_path: Path, model: FakeModel, point: str, yes: bool
) -> None:
    model.default = answering("send")
    # Only the tool that needs a yes: the resumed turn has nobody to ask (no stream watches
    # it), so it is offered nothing, and must still replay its stored step.
    gateway = gateway_with_tools(tmp_path, model, "destructive", tools="ledger__send")
    db = tmp_path / "botmux.db"
    try:
        await start(gateway, f"{point}:kill")
        async with aiohttp.ClientSession() as http:
            answered_before = point == "after_approval_stored"
            await chat_until_killed(http, gateway, approve_when_asked=answered_before)
            await crash_at(gateway, point)
            assert runs(tmp_path / "ledger.txt") == []
            assert calls_stored(db) == [
                ("approved", "peer") if answered_before else ("awaiting", None)
            ]
            await start(gateway)
            if not answered_before:
                verdict = await approve(http, gateway, "call_1", yes)
                assert verdict["verdict"] == ("approved" if yes else "denied")
            with anyio.fail_after(20):
                r = await http.post(f"{gateway.url}{URL}", json={"message": "hi"}, headers=KEY)
                body = await r.json()
        await settle(gateway)
    finally:
        await gateway.kill()
    result = "sent hello" if yes else DENIED
    assert (r.status, body["message"]["content"]) == (200, f"done: {result}")
    assert runs(tmp_path / "ledger.txt") == (["send hello"] if yes else [])
    assert steps_asked(model) == 1 and len(model.requests) == 2
    assert calls_stored(db) == [("finished", "peer")]
    assert stored(db)[2] == ("tool", "finished", int(not yes), result)


# -- two nodes on PostgreSQL: a takeover mid-loop ---------------------------------------------

LEASE_S = 2.0


@pytest.mark.process
@pytest.mark.parametrize("waits_for_approval", [False, True], ids=["mid_call", "awaiting_approval"])
async def test_a_node_killed_mid_loop_is_taken_over_and_the_tool_still_runs_at_most_once(
    tmp_path: Path, postgres_url: str, model: FakeModel, waits_for_approval: bool
) -> None:
    """Node a runs the turn and dies in its tool loop: mid-call (the tool ran, a never heard
    back), or while the call waits for a yes. Node b takes the conversation over when a's
    lease expires and finishes the turn; the yes is given to b."""
    ledger = tmp_path / "ledger.txt"  # both nodes' servers write to it
    if waits_for_approval:
        model.default = answering("send")
        tools = stdio_server("ledger", ledger, "destructive")
    else:
        model.default = answering("send", crash=True)
        tools = stdio_server("ledger", ledger, "never")
    tools += '[agent]\ntools = ["ledger__send"]\n'
    async with cluster_nodes(
        tmp_path, postgres_url, model.base_url, lease_s=LEASE_S, heartbeat_s=0.4
    ) as make:
        a, b = make("a", tools), make("b", tools)
        await start(a, "awaiting_approval:kill" if waits_for_approval else "")
        await start(b)
        async with aiohttp.ClientSession() as http:
            if waits_for_approval:
                await chat_until_killed(http, a, approve_when_asked=False)
            else:
                with pytest.raises(aiohttp.ClientError):
                    await http.post(f"{a.url}{URL}", json={"message": "hi"}, headers=KEY)
            with anyio.fail_after(20):
                assert await a.wait() == -signal.SIGKILL, a.log_tail()
            ran_on_a = runs(ledger)
            if waits_for_approval:
                # The question a stored is there on b (a client whose stream died reads it
                # from the transcript), and b takes the yes.
                async with http.get(f"{b.url}/api/sessions/crash/messages") as t:
                    waiting = [m for m in (await t.json())["messages"] if m["role"] == "tool"]
                assert [(m["call_id"], m["state"]) for m in waiting] == [("call_1", "awaiting")]
                verdict = await approve(http, b, "call_1", True)
                assert verdict["verdict"] == "approved"
            # The client asks b again with its key, as it would behind a load balancer.
            with anyio.fail_after(10 * LEASE_S):
                r = await http.post(f"{b.url}{URL}", json={"message": "hi"}, headers=KEY)
                body = await r.json()
        await settle(b)
    rows = await pg_fetch(
        postgres_url, "SELECT role, state, is_error, content FROM messages ORDER BY id"
    )
    result = "sent hello" if waits_for_approval else UNKNOWN
    assert (r.status, body["message"]["content"]) == (200, f"done: {result}")
    assert ran_on_a == ([] if waits_for_approval else ["send hello"])
    assert runs(ledger) == ["send hello"]  # once, across both nodes
    # a asked for the step, b only for the answer after it: the stored step was not asked again.
    assert [r.api_key for r in model.requests] == ["sk-test-node-a", "sk-test-node-b"]
    assert [tuple(r) for r in rows] == [
        ("user", "answered", False, "hi"),
        ("assistant", "step", False, ""),
        ("tool", "finished", not waits_for_approval, result),
        ("assistant", "final", False, f"done: {result}"),
    ]
    assert "took over conversations" in b.log()
