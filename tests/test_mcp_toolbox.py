"""McpToolBox against real MCP servers (SPEC 15): the SDK-built test server over stdio and
streamable HTTP, a hand-written one for what SDK servers never send, and a published server
nobody here wrote (``mcp-server-time``, from PyPI).

What is asserted is what the model and an operator see: the tools offered and their names and
annotations, call outcomes, ``status()``, the events (which are the log lines and the
metrics) and the log records. Waits are on the box's own events, never on time; the only
timing is a server's ``timeout_s`` (a hung tool) and small restart backoffs.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.tools import MAX_TEXT, model_name
from agent.tools._stdio import MAX_LINE
from agent.tools.mcp import McpToolBox, plan_reconfigure
from gateway.config_tools import McpServer, ToolsConfig
from gateway.events import Event
from gateway.events_mcp import ToolCalled, ToolServerChanged
from gateway.messages import DataUrl, ToolSpec
from policy.backoff import Backoff
from tests.actors import session
from tests.fakes.mcp_server import LONG_NAME, PIXEL, SPACED_NAME, open_http_server, stdio_command
from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.harness import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.process]

PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FAST = Backoff(base=0.05, cap=0.2)


def fake(name: str = "fake", **kw: Any) -> McpServer:
    command, args = stdio_command()
    return McpServer(name=name, command=command, args=args, **kw)


def raw(name: str, mode: str, **kw: Any) -> McpServer:
    return McpServer(
        name=name, command=sys.executable, args=("-m", "tests.fakes.mcp_raw", mode), **kw
    )


class Seen:
    """The box's events, and a way to wait for one (each event wakes the waiters)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._next = anyio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._next.set()
        self._next = anyio.Event()

    async def until(self, check: Callable[[], object], within: float = 20.0) -> None:
        with anyio.fail_after(within):
            while not check():
                await self._next.wait()

    def states(self, server: str) -> list[str]:
        return [
            e.state for e in self.events if isinstance(e, ToolServerChanged) and e.server == server
        ]

    def calls(self) -> list[tuple[str, str, str]]:
        return [(e.server, e.tool, e.outcome) for e in self.events if isinstance(e, ToolCalled)]


@asynccontextmanager
async def running(
    *servers: McpServer, backoff: Backoff = FAST, ping_every: float = 30.0
) -> AsyncIterator[tuple[McpToolBox, Seen]]:
    seen = Seen()
    config = ToolsConfig(mcp=servers)
    box = McpToolBox(config, observe=seen, backoff=backoff, ping_every=ping_every)
    async with anyio.create_task_group() as tg:
        await tg.start(box.run)  # at once: no server has answered yet
        yield box, seen
        tg.cancel_scope.cancel()


def up(box: McpToolBox, *servers: str) -> Callable[[], bool]:
    return lambda: all(s.state == "up" for s in box.status() if s.name in servers)


def spec(box: McpToolBox, name: str) -> ToolSpec:
    found = box.find(name)
    assert found is not None, (name, [s.name for s in box.offered(["*"])])
    return found


@contextmanager
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No record with a traceback, ours or the SDK's (its stdio reader logs one for each line
    that is no JSON-RPC: a storm, for a server printing to stdout)."""
    caplog.set_level(logging.DEBUG)
    yield
    traced = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]
    assert not traced


async def test_a_stdio_server_offers_its_tools_named_and_annotated_and_runs_them() -> None:
    async with running(fake()) as (box, seen):
        assert box.status()[0].state == "starting" and box.offered(["*"]) == []
        await seen.until(up(box, "fake"))

        names = [s.name for s in box.offered(["fake__*"])]
        assert "fake__echo" in names and "fake__add" in names
        assert all(PROVIDER_NAME.match(n) for n in names)
        assert box.offered([]) == [] and box.offered(["other__*"]) == []
        assert [s.name for s in box.offered(["fake__ec*"])] == ["fake__echo"]

        echo, add, append = (spec(box, f"fake__{t}") for t in ("echo", "add", "append"))
        assert (echo.read_only, echo.idempotent, echo.approval) == (True, False, False)
        assert (add.read_only, add.idempotent, add.approval) == (False, True, True)
        # destructiveHint false is still no read-only tool: it waits for a yes
        assert (append.read_only, append.approval) == (False, True)
        assert echo.parameters["type"] == "object" and "text" in echo.parameters["properties"]
        assert echo.description == "Say the text back." and echo.tool == "echo"

        long_name = model_name("fake", LONG_NAME)
        assert len(long_name) <= 64 and long_name.startswith("fake__ttt")
        assert (await box.call(spec(box, long_name), {})).text == "long"
        spaced = model_name("fake", SPACED_NAME)
        assert PROVIDER_NAME.match(spaced) and spaced != "fake__with_spaces"
        assert (await box.call(spec(box, spaced), {})).text == "spaced"

        said = await box.call(echo, {"text": "hello"})
        assert (said.text, said.is_error, said.images) == ("hello", False, ())
        assert (await box.call(add, {"a": 2, "b": 3})).text == "5"
        pictured = await box.call(spec(box, "fake__picture"), {})
        assert pictured.text == "a dot"
        (image,) = pictured.images
        assert isinstance(image, DataUrl) and image.content_type == "image/png"
        assert (
            str(image) == "data:image/png;base64," + __import__("base64").b64encode(PIXEL).decode()
        )
        structured = await box.call(spec(box, "fake__structured"), {})
        assert json.loads(structured.text) == {"answer": 42}
        failed = await box.call(spec(box, "fake__fail"), {})
        assert failed.is_error and "it broke" in failed.text

        assert box.status()[0].detail == "fake-tools 1.0"
        assert seen.states("fake") == ["starting", "up"]
        assert ("fake", "fail", "error") in seen.calls() and ("fake", "echo", "ok") in seen.calls()
        assert box.statistics().calls == 7


async def test_allow_deny_and_approval_modes_shape_what_is_offered() -> None:
    servers = (
        fake("picky", allow=("e*", "a*"), deny=("append",), approval="never"),
        fake("careful", allow=("echo",), approval="always"),
    )
    async with running(*servers) as (box, seen):
        await seen.until(up(box, "picky", "careful"))
        offered = {s.name: s.approval for s in box.offered(["*"])}
        assert offered == {
            "picky__echo": False,
            "picky__add": False,
            "picky__environment": False,
            "picky__exit_now": False,
            "careful__echo": True,  # read-only, but "always" asks
        }
        assert box.find("picky__append") is None  # denied: not callable by name either


async def test_the_child_sees_only_the_sdk_defaults_and_its_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BOTMUX_TEST_SECRET", "hunter2")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-gateway-only")
    async with running(fake(env={"GIVEN": "yes"})) as (box, seen):
        await seen.until(up(box, "fake"))
        child = json.loads((await box.call(spec(box, "fake__environment"), {})).text)
    assert child["GIVEN"] == "yes"
    assert "BOTMUX_TEST_SECRET" not in child and "OPENAI_API_KEY" not in child
    # The SDK's defaults; Python itself may add LC_CTYPE (PEP 538) in the child.
    assert set(child) - {"LC_CTYPE"} <= {
        "HOME",
        "LOGNAME",
        "PATH",
        "SHELL",
        "TERM",
        "USER",
        "GIVEN",
    }


async def test_a_tools_list_changed_notification_refreshes_the_offer() -> None:
    async with running(fake()) as (box, seen):
        await seen.until(up(box, "fake"))
        assert box.find("fake__late") is None
        assert (await box.call(spec(box, "fake__grow"), {})).text == "grown"
        await seen.until(lambda: box.find("fake__late") is not None)
        assert (await box.call(spec(box, "fake__late"), {})).text == "late"
        assert seen.states("fake") == ["starting", "up"]  # no reconnection


async def test_an_http_server_works_dies_mid_call_and_comes_back() -> None:
    async with open_http_server() as (url, _):
        port = int(url.split(":")[2].split("/")[0])
        probe = McpServer(name="web", url=url, headers={"X-Probe": "sesame"}, timeout_s=10)
        async with running(probe) as (box, seen):
            await seen.until(up(box, "web"))
            said = await box.call(spec(box, "web__echo"), {"text": "over http"})
            assert said.text == "over http"
            heard = await box.call(spec(box, "web__header"), {"name": "X-Probe"})
            assert heard.text == "sesame"
            # Past the SDK's default SSE event bound (1 MiB), cut to the box's own.
            big = await box.call(spec(box, "web__big"), {"size": 3_000_000})
            assert not big.is_error and big.text.startswith("x" * MAX_TEXT)
            assert big.text.endswith(f"more than {MAX_TEXT} characters]")

            echo = spec(box, "web__echo")  # as a turn that started before holds it
            died = await box.call(spec(box, "web__exit_now"), {})
            assert died.is_error and "may or may not" in died.text
            await seen.until(lambda: seen.states("web")[-1] == "down")
            assert box.offered(["*"]) == [] and box.find("web__echo") is None
            offline = await box.call(echo, {"text": "hello?"})
            assert offline.is_error and "not available" in offline.text

            async with open_http_server(port) as (_, again):
                await seen.until(lambda: seen.states("web")[-1] == "up")
                assert (await box.call(echo, {"text": "back"})).text == "back"
                again.kill()
                await again.wait()
            # Restarted while the box was idle: the server no longer knows the session.
            async with open_http_server(port):
                lost = await box.call(echo, {"text": "still there?"})
                assert lost.is_error and "refused" in lost.text  # it did not run
                await seen.until(lambda: seen.states("web").count("up") == 3)
                assert (await box.call(echo, {"text": "again"})).text == "again"
        assert seen.states("web") == ["starting", "up", "down", "up", "down", "up"]
        calls = seen.calls()
        assert ("web", "exit_now", "unavailable") in calls and (
            "web",
            "echo",
            "unavailable",
        ) in calls


async def test_faults_of_one_server_stay_with_it_and_are_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    servers = (
        fake("good"),
        fake("slow", timeout_s=1.5),
        McpServer(name="missing", command="/nonexistent/mcp-server"),
        McpServer(name="broken", command=sys.executable, args=("-m", "no_such_mcp_module")),
        raw("garbage", "garbage"),
        raw("odd", "odd"),
    )
    with no_tracebacks(caplog):
        async with running(*servers) as (box, seen):
            await seen.until(up(box, "good", "slow", "odd"))
            # Two tries more each: still one line for each server that is down.
            await seen.until(lambda: box.statistics().restarts >= 9)
            status = {s.name: s for s in box.status()}
            assert (
                status["missing"].state == "down"
                and "/nonexistent/mcp-server" in status["missing"].detail
            )
            assert status["garbage"].state == "down" and "malformed" in status["garbage"].detail
            # The last line the child wrote on its stderr says why it exited.
            assert status["broken"].detail.startswith("the server's process exited with code 1: ")
            assert "No module named no_such_mcp_module" in status["broken"].detail
            assert seen.states("broken") == ["starting", "down"]
            assert seen.states("missing") == ["starting", "down"]
            assert seen.states("garbage") == ["starting", "down"]

            # A listing in two pages; two tools with no object schema skipped, said once.
            assert sorted(s.name for s in box.offered(["odd__*"])) == ["odd__good", "odd__nonsense"]
            skipped = [r for r in caplog.records if r.getMessage() == "tool skipped"]
            assert sorted(r.tool for r in skipped) == ["shapeless", "stringly"]  # type: ignore[attr-defined]
            nonsense = await box.call(spec(box, "odd__nonsense"), {})
            assert nonsense.is_error and "nonsense" in nonsense.text
            assert (await box.call(spec(box, "odd__good"), {})).text == "fine"

            hung = await box.call(spec(box, "slow__sleep"), {"seconds": 30})
            assert hung.is_error and "1.5 s" in hung.text
            assert (
                await box.call(spec(box, "slow__echo"), {"text": "still here"})
            ).text == "still here"

            big = await box.call(spec(box, "good__big"), {"size": 10_000_000})
            assert (
                not big.is_error
                and len(big.text) < MAX_TEXT + 100
                and big.text.endswith("characters]")
            )

            died = await box.call(spec(box, "good__exit_now"), {})
            assert died.is_error and "may or may not" in died.text
            await seen.until(lambda: "down" in seen.states("good"))
            down = [
                e for e in seen.events if isinstance(e, ToolServerChanged) and e.state == "down"
            ]
            assert down[-1].detail == "the server's process exited with code 3"
            assert (await box.call(spec(box, "odd__good"), {})).text == "fine"  # others unmoved
            await seen.until(lambda: seen.states("good")[-2:] == ["down", "up"])
            assert (await box.call(spec(box, "good__echo"), {"text": "again"})).text == "again"

    assert ("slow", "sleep", "timeout") in seen.calls()
    assert ("good", "exit_now", "unavailable") in seen.calls()
    assert ("odd", "nonsense", "error") in seen.calls()
    assert seen.states("slow") == ["starting", "up"] and seen.states("odd") == ["starting", "up"]


async def test_a_published_server_from_pypi_works_through_the_box() -> None:
    time_server = McpServer(
        name="time",
        command=sys.executable,
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
    )
    async with running(time_server) as (box, seen):
        await seen.until(up(box, "time"))
        now = spec(box, "time__get_current_time")
        assert now.read_only and not now.approval
        assert {s.name for s in box.offered(["time__*"])} == {
            "time__get_current_time",
            "time__convert_time",
        }
        result = await box.call(now, {"timezone": "Europe/Paris"})
        assert not result.is_error and json.loads(result.text)["timezone"] == "Europe/Paris"
        wrong = await box.call(now, {"timezone": "Mars/Olympus"})
        assert wrong.is_error


async def test_a_reload_adds_removes_and_retunes_without_touching_calls_in_flight() -> None:
    async with running(fake("keep"), raw("drop", "odd")) as (box, seen):
        await seen.until(up(box, "keep", "drop"))
        async with anyio.create_task_group() as tg:
            results: list[str] = []

            async def slow_call() -> None:
                results.append((await box.call(spec(box, "keep__sleep"), {"seconds": 0.5})).text)

            tg.start_soon(slow_call)
            await anyio.wait_all_tasks_blocked()  # the call waits for its answer
            await box.reconfigure(
                ToolsConfig(mcp=(fake("keep", deny=("echo",)), raw("new", "odd")))
            )
            assert [s.name for s in box.status()] == ["keep", "new"]
            assert box.find("keep__echo") is None and box.find("keep__add") is not None
            assert box.find("drop__good") is None
        assert results == ["slept"]
        await seen.until(up(box, "new"))
        assert (await box.call(spec(box, "new__good"), {})).text == "fine"
        assert seen.states("keep") == ["starting", "up"]  # never restarted
        assert seen.states("drop") == ["starting", "up", "removed"]
        assert box.statistics().restarts == 0


async def test_a_message_past_the_bound_ends_the_session_and_the_call_is_told() -> None:
    async with running(fake()) as (box, seen):
        await seen.until(up(box, "fake"))
        over = await box.call(spec(box, "fake__big"), {"size": MAX_LINE + 1000})
        assert over.is_error and "may or may not" in over.text
        await seen.until(lambda: seen.states("fake")[-2:] == ["down", "up"])
        down = next(
            e for e in seen.events if isinstance(e, ToolServerChanged) and e.state == "down"
        )
        assert down.detail == "the server sent a message over 32 MiB"
        assert (await box.call(spec(box, "fake__echo"), {"text": "fine"})).text == "fine"


async def test_a_bug_of_ours_is_logged_whole_once_and_the_server_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An observer that fails on every listing: the failure is the gateway's, not the
    server's; its traceback is logged once however often the server is retried."""
    caplog.set_level(logging.DEBUG, logger="agent.tools")
    seen = Seen()

    def observe(event: Event) -> None:
        seen(event)
        if type(event).__name__ == "ToolsListed":
            raise KeyError("a bug")

    box = McpToolBox(ToolsConfig(mcp=(fake(),)), observe=observe, backoff=FAST)
    async with anyio.create_task_group() as tg:
        await tg.start(box.run)
        await seen.until(lambda: box.statistics().restarts >= 3)
        (status,) = box.status()
        tg.cancel_scope.cancel()
    assert status.state == "down" and "a failure inside the gateway (KeyError)" in status.detail
    bugs = [r for r in caplog.records if r.exc_info]
    assert len(bugs) == 1 and bugs[0].getMessage() == "tool server: a bug in the gateway"


async def test_an_idle_http_session_is_pinged_and_a_gone_endpoint_noticed() -> None:
    async with open_http_server() as (url, server):
        async with running(McpServer(name="web", url=url), ping_every=0.2) as (box, seen):
            await seen.until(up(box, "web"))
            server.kill()
            await server.wait()
            await seen.until(lambda: seen.states("web")[-1] == "down")  # no call needed
            assert box.offered(["*"]) == [] and seen.calls() == []


def test_a_reload_restarts_only_servers_whose_connection_changed() -> None:
    old = (fake("a"), fake("b"), McpServer(name="c", url="http://127.0.0.1:1/mcp"), fake("d"))
    new = (
        fake("a"),  # unchanged
        fake("b", deny=("x",), approval="always", timeout_s=5),  # the same connection
        McpServer(name="c", url="http://127.0.0.1:1/mcp", headers={"A": "b"}),  # headers
        fake("e"),
    )
    plan = plan_reconfigure(old, new)
    assert plan.stop == ("d", "c")
    assert [s.name for s in plan.start] == ["c", "e"]
    assert [s.name for s in plan.retune] == ["b"]
    assert plan_reconfigure(new, new) == plan_reconfigure((), ())


async def test_a_turn_calls_a_real_servers_tool_through_the_box(tmp_path: Path) -> None:
    """The agent's tool loop on a session actor (tests.actors), the box in between."""
    async with running(fake()) as (box, seen), open_fake_model() as model:
        await seen.until(up(box, "fake"))
        model.script(calls(("fake__echo", {"text": "said by the tool"})), ok("the tool spoke"))
        async with session(tmp_path, model, toolbox=box, tools=("fake__ec*",)) as world:
            await world.admit("use the tool")
            await world.delivered(1)
    (outcome,) = world.platform.delivered
    assert outcome.reply == "the tool spoke"
    first, second = model.requests
    (offered,) = first.tools or []
    assert offered["function"]["name"] == "fake__echo"
    assert offered["function"]["parameters"]["properties"]["text"]["type"] == "string"
    results = [m for m in second.messages if m.get("role") == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [("call_1", "said by the tool")]
    assert ("fake", "echo", "ok") in seen.calls()


async def test_what_is_said_of_an_http_server_shows_no_credentials_of_its_url() -> None:
    port = free_port()  # nobody listens there
    url = f"http://someone:hunter2@127.0.0.1:{port}/mcp?key=sesame"
    async with running(McpServer(name="web", url=url)) as (_, seen):
        await seen.until(lambda: seen.states("web") == ["starting", "down"])
    said = [e.detail for e in seen.events if isinstance(e, ToolServerChanged)]
    assert said[0] == f"http: http://127.0.0.1:{port}/mcp"
    assert not [d for d in said if "hunter2" in d or "sesame" in d or "someone" in d]
