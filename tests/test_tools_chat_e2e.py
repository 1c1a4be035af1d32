"""Tool-using turns end to end on the chat platforms (SPEC 15, issue 34): a whole gateway in
process with its ``[[tools.mcp]]`` servers and ``[[profiles]]``, the real python-telegram-bot
and discord.py against the loopback platforms, real MCP servers: the SDK-built test server
(tests/fakes/mcp_server.py) over stdio and over streamable HTTP, and the published
``mcp-server-time`` from PyPI over stdio. The fake model scripts the tool calls.

What is asserted is what people and the model see: the one final message in the chat, the
preview that showed the tool while it ran, the tools the model was offered and the results it
was given in its next request, the rows the store keeps (user, step, tool calls, answer), and
what the log says of a server that died mid-call.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from gateway.config import Config
from gateway.events_mcp import ToolCalled, ToolServerChanged
from gateway.messages import StoredMessage
from gateway.store import Transcript, open_store
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.mcp_server import open_http_server, stdio_command
from tests.fakes.openai_server import FakeModel, Request, calls, ok
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import Events, make_config, running_gateway, telegram_section
from tests.support import discord_world

with warnings.catch_warnings():  # discord.py imports audioop, deprecated since 3.11
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord  # noqa: F401  (imported here once, under the filter)

# A gateway in process, and the MCP servers' processes.
pytestmark = [pytest.mark.anyio, pytest.mark.gateway, pytest.mark.process]

ALICE, BOB = 42, 4242  # Telegram: each one's private chat has their id
#: The published server's console script, as ``pip install mcp-server-time`` installs it.
TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")


def quoted(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(json.dumps(v) for v in values)


def stdio_server(name: str, keys: str = "") -> str:
    """A ``[[tools.mcp]]`` entry running tests/fakes/mcp_server.py over stdio."""
    command, args = stdio_command()
    return (
        f'[[tools.mcp]]\nname = "{name}"\ncommand = "{command}"\nargs = [{quoted(args)}]\n'
        + keys
        + "\n"
    )


def time_server() -> str:
    """``mcp-server-time`` from PyPI, over stdio, by its console script when installed so."""
    if TIME_SERVER.exists():
        command, args = str(TIME_SERVER), ["--local-timezone", "UTC"]
    else:
        command, args = sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"]
    return f'[[tools.mcp]]\nname = "time"\ncommand = "{command}"\nargs = [{quoted(args)}]\n\n'


def profile(name: str, conversations: list[str], tools: list[str], keys: str = "") -> str:
    return (
        f'[[profiles]]\nname = "{name}"\nconversations = [{quoted(conversations)}]\n'
        f"tools = [{quoted(tools)}]\n{keys}\n"
    )


@asynccontextmanager
async def gateway(config: Config, *servers: str) -> AsyncIterator[Events]:
    """The gateway, once each of ``servers`` is up (a turn then finds their tools)."""
    events = Events()
    async with running_gateway(config, events=events):
        for server in servers:
            await events.wait_for(ToolServerChanged, server=server, state="up")
        yield events


def configured(tmp_path: Path, model: FakeModel, extra: str) -> Config:
    return make_config(tmp_path / "botmux.db", model.base_url, extra=extra)


async def transcript(config: Config, conversation: str) -> list[StoredMessage]:
    async with open_store(config) as store:
        return await store.read(Transcript(conversation))


def offered(request: Request) -> list[str]:
    return sorted(t["function"]["name"] for t in request.tools or [])


def shape(rows: list[StoredMessage]) -> list[tuple[str, str, str | None]]:
    """Each row's role, state and (tool rows) call id."""
    return [(r.role, r.state, r.call_id) for r in rows]


# -- Telegram: the test server over stdio ---------------------------------------------------------

STEP_TEXT = "Let me ask the tool."
TG_ANSWER = "The tool said: hello from the tool."


async def test_a_telegram_turn_calls_a_stdio_server_shows_it_and_answers_once(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    extra = (
        telegram_section(tg, f"allow_users = [{ALICE}]\nstream_interval_s = 0.05\n")
        + "\n"
        + stdio_server("local", 'approval = "never"\n')  # sleep is not annotated read-only
        + profile("mine", [f"telegram:{ALICE}"], ["local__echo", "local__sleep"])
    )
    config = configured(tmp_path, model, extra)
    model.script(
        calls(
            ("local__echo", {"text": "hello from the tool"}),
            ("local__sleep", {"seconds": 1.5}),  # a preview shows it, on a loaded machine too
            text=STEP_TEXT,
        ),
        ok(TG_ANSWER),
    )
    async with gateway(config, "local"):
        tg.inject_message(ALICE, "ask the tool")
        with anyio.fail_after(20):
            await tg.wait_for_sent(1, ALICE)
    # Stopped: whatever the chat shows now is all it will show.
    final = f"{STEP_TEXT}\n\n{TG_ANSWER}"
    assert tg.sent_messages(ALICE) == [final]
    assert tg.visible_messages(ALICE) == [final]
    drafts = tg.draft_texts(ALICE)
    assert any("using local__sleep …" in d for d in drafts), drafts
    assert "typing" in tg.chat_actions(ALICE)  # before the first draft

    first, second = model.requests
    assert offered(first) == ["local__echo", "local__sleep"]
    assert dict(second.tool_results) == {"call_1": "hello from the tool", "call_2": "slept"}
    (step,) = [m for m in second.messages if m.get("tool_calls")]
    assert [c["function"]["name"] for c in step["tool_calls"]] == ["local__echo", "local__sleep"]

    rows = await transcript(config, f"telegram:{ALICE}")
    assert shape(rows) == [
        ("user", "answered", None),
        ("assistant", "step", None),
        ("tool", "finished", "call_1"),
        ("tool", "finished", "call_2"),
        ("assistant", "final", None),
    ]
    user, step_row, echo, sleep, answer = rows
    assert user.content == "ask the tool" and step_row.content == STEP_TEXT
    assert [c["name"] for c in json.loads(step_row.tool_calls or "[]")] == [
        "local__echo",
        "local__sleep",
    ]
    assert (echo.tool, echo.content) == ("local__echo", "hello from the tool")
    assert (sleep.tool, sleep.content) == ("local__sleep", "slept")
    assert (answer.content, answer.failure) == (final, None)
    assert answer.user_row_id == user.id == step_row.user_row_id


# -- Discord: the test server over streamable HTTP, and mcp-server-time from PyPI ---------------

D_STEP = "Checking the clock and the web server."
D_ANSWER = "It is a quarter past something in Paris."


async def test_a_discord_turn_calls_an_http_server_and_the_published_time_server(
    tmp_path: Path, model: FakeModel
) -> None:
    dm = discord_world.DM_ID
    async with discord_world.open_world() as dc, open_http_server() as (url, _):
        extra = (
            discord_world.discord_toml(dc, "stream_interval_s = 0.05\n")
            + f'\n[[tools.mcp]]\nname = "web"\nurl = "{url}"\napproval = "never"\n\n'
            + time_server()
            + profile("ops", [f"discord:{dm}"], ["web__echo", "web__sleep", "time__*"])
        )
        config = configured(tmp_path, model, extra)
        model.script(
            calls(
                ("web__echo", {"text": "over http"}),
                (
                    "web__sleep",
                    {"seconds": 1.5},
                ),  # a preview shows it, on a loaded machine too
                ("time__get_current_time", {"timezone": "Europe/Paris"}),
                text=D_STEP,
            ),
            ok(D_ANSWER),
        )
        async with gateway(config, "web", "time") as events:
            await dc.inject_message(dm, "what time is it in Paris?", author_id=discord_world.ALICE)
            final = f"{D_STEP}\n\n{D_ANSWER}"
            with anyio.fail_after(20):
                await dc.wait_until(lambda: dc.visible_contents(dm) == [final])
        shown = previews(dc)
    assert dc.visible_contents(dm) == [final]
    assert len(dc.calls("POST", "/channels/{channel_id}/messages")) == 1  # the preview, finalised
    assert any("using web__sleep …" in t for t in shown), shown

    first, second = model.requests
    assert offered(first) == [
        "time__convert_time",
        "time__get_current_time",
        "web__echo",
        "web__sleep",
    ]
    said = dict(second.tool_results)
    assert (said["call_1"], said["call_2"]) == ("over http", "slept")
    now = json.loads(said["call_3"])  # the published server's own answer
    assert now["timezone"] == "Europe/Paris"
    told = datetime.fromisoformat(now["datetime"])
    assert told.utcoffset() is not None
    assert abs(told.timestamp() - datetime.now(UTC).timestamp()) < 120  # the real time

    called = {(e.server, e.tool, e.outcome) for e in events.of(ToolCalled)}
    assert called == {
        ("web", "echo", "ok"),
        ("web", "sleep", "ok"),
        ("time", "get_current_time", "ok"),
    }
    rows = await transcript(config, f"discord:{dm}")
    assert shape(rows) == [
        ("user", "answered", None),
        ("assistant", "step", None),
        ("tool", "finished", "call_1"),
        ("tool", "finished", "call_2"),
        ("tool", "finished", "call_3"),
        ("assistant", "final", None),
    ]
    assert json.loads(rows[4].content)["timezone"] == "Europe/Paris"
    assert rows[-1].content == final


def previews(dc: FakeDiscord) -> list[str]:
    """Every text the channel's bot message showed: as sent, then each edit."""
    sent = [c.json["content"] for c in dc.calls("POST", "/channels/{channel_id}/messages")]
    edited = [
        c.json["content"] for c in dc.calls("PATCH", "/channels/{channel_id}/messages/{message_id}")
    ]
    return sent + edited


# -- Profiles ---------------------------------------------------------------------------------------


async def test_a_profile_gets_exactly_its_tools_and_a_conversation_outside_gets_none(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    extra = (
        telegram_section(tg, f"allow_users = [{ALICE}, {BOB}]\n")
        + "\n"
        + stdio_server("local", 'allow = ["echo", "add"]\n')
        + stdio_server("other")
        + profile(
            "ops",
            [f"telegram:{ALICE}"],
            ["local__*"],
            'system_prompt = "You are the ops assistant."\n',
        )
    )
    config = configured(tmp_path, model, extra)
    async with gateway(config, "local", "other"):
        with anyio.fail_after(20):
            tg.inject_message(ALICE, "from alice")
            await tg.wait_for_sent(1, ALICE)
            tg.inject_message(BOB, "from bob", first_name="Bob")
            await tg.wait_for_sent(1, BOB)
    by_user = {r.last_user: r for r in model.requests}
    tooled, plain = by_user["from alice"], by_user["from bob"]
    assert offered(tooled) == ["local__add", "local__echo"]  # not other__*, not local's others
    assert tooled.messages[0] == {"role": "system", "content": "You are the ops assistant."}
    assert "tools" not in plain.body and "tool_choice" not in plain.body
    assert plain.messages[0].get("content") != "You are the ops assistant."
    assert tg.sent_messages(ALICE) == ["echo: from alice"]
    assert tg.sent_messages(BOB) == ["echo: from bob"]


# -- A fault at turn level ------------------------------------------------------------------------

FAULT_ANSWER = "The tool's server fell over; it may or may not have done it."


async def test_a_server_dying_mid_call_is_an_error_result_the_turn_answers_and_logs_once(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    extra = (
        telegram_section(tg, f"allow_users = [{ALICE}]\n")
        + "\n"
        + stdio_server("local", 'approval = "never"\n')
        + profile("mine", [f"telegram:{ALICE}"], ["local__*"])
    )
    config = configured(tmp_path, model, extra)
    model.script(
        calls(("local__exit_now", {})),
        ok(FAULT_ANSWER),
        calls(("local__echo", {"text": "back again"}), ids="again"),
        ok("It is back."),
    )
    async with gateway(config, "local") as events:
        with anyio.fail_after(20):
            tg.inject_message(ALICE, "do the risky thing")
            await tg.wait_for_sent(1, ALICE)
            # The server is started again: the next turn's call runs on it.
            await events.wait_for(ToolServerChanged, 2, server="local", state="up")
            tg.inject_message(ALICE, "and now?")
            await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == [FAULT_ANSWER, "It is back."]
    died = dict(model.requests[1].tool_results)["call_1"]
    assert "may or may not" in died, died
    assert dict(model.requests[3].tool_results)["again_1"] == "back again"
    called = [(e.tool, e.outcome) for e in events.of(ToolCalled)]
    assert called == [("exit_now", "unavailable"), ("echo", "ok")]

    rows = await transcript(config, f"telegram:{ALICE}")
    assert shape(rows) == [
        ("user", "answered", None),
        ("assistant", "step", None),
        ("tool", "finished", "call_1"),
        ("assistant", "final", None),
        ("user", "answered", None),
        ("assistant", "step", None),
        ("tool", "finished", "again_1"),
        ("assistant", "final", None),
    ]
    assert rows[2].content == died and rows[3].content == FAULT_ANSWER
    assert rows[3].failure is None and rows[7].content == "It is back."

    down = [
        r
        for r in caplog.records
        if r.getMessage() == "tool_server" and getattr(r, "state", None) == "down"
    ]
    assert len(down) == 1, [vars(r) for r in down]
    assert down[0].levelno == logging.WARNING
    assert getattr(down[0], "detail", "") == "the server's process exited with code 3"
    traced = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info or r.exc_text]
    assert traced == []
