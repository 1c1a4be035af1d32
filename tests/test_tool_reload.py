"""Tools and a reload (SPEC 13, 15): a running gateway takes a new MCP server, a new offer and
a new profile from its edited config at the next turn; without servers at start, the first
one needs a restart (there is no toolbox to give it to) and the reload says so.

What is asserted is what the model was offered (the fake provider's requests), what the
reload answered, and which tool ran."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.app import GatewayApp
from gateway.config import Config, parse_config
from gateway.events import Event
from gateway.events_mcp import ToolServerChanged
from tests.fakes.mcp_server import stdio_command
from tests.fakes.openai_server import FakeModel, calls, ok
from tests.harness import config_text
from tests.support.peer import chat

pytestmark = [pytest.mark.anyio, pytest.mark.gateway, pytest.mark.process]


def server(name: str) -> str:
    command, args = stdio_command()
    quoted = ", ".join(f'"{a}"' for a in args)
    return f'[[tools.mcp]]\nname = "{name}"\ncommand = "{command}"\nargs = [{quoted}]\n'


class File:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        path.write_text(text)

    def edit(self, old: str, new: str) -> None:
        text = self.path.read_text()
        assert old in text, old
        self.path.write_text(text.replace(old, new))

    def read(self) -> Config:
        return parse_config(self.path.read_text(), source=str(self.path), env={})


class Up:
    """Taps the gateway's events to wait until a tool server is up (no polling)."""

    def __init__(self, app: GatewayApp) -> None:
        self.up: set[str] = set()
        self._changed = anyio.Event()
        inner = app.observe

        def observe(event: Event) -> None:
            if isinstance(event, ToolServerChanged):
                (self.up.add if event.state == "up" else self.up.discard)(event.server)
                self._changed.set()
                self._changed = anyio.Event()
            inner(event)

        app.observe = observe  # type: ignore[assignment]  # what the parts are built with

    async def until(self, name: str) -> None:
        with anyio.fail_after(30):
            while name not in self.up:
                await self._changed.wait()


def offered(model: FakeModel, index: int) -> list[str]:
    return sorted(t["function"]["name"] for t in model.requests[index].tools or [])


async def test_a_reload_adds_a_server_and_widens_the_offer_at_the_next_turn(
    tmp_path: Path, model: FakeModel
) -> None:
    base = config_text(tmp_path / "b.db", model.base_url)
    file = File(tmp_path / "botmux.toml", f'{base}\n[agent]\ntools = ["a__echo"]\n{server("a")}')
    app = GatewayApp(file.read(), read=file.read)
    up = Up(app)
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as http:
        await tg.start(app.run)
        assert app.peer is not None and app.reloader is not None
        url = f"http://127.0.0.1:{app.peer.port}"
        await up.until("a")
        model.script(ok("one"))
        assert await chat(http, url, "s", "first") == "one"
        assert offered(model, 0) == ["a__echo"]

        file.edit('tools = ["a__echo"]', 'tools = ["a__echo", "b__echo"]')
        file.path.write_text(file.path.read_text() + server("b"))
        result = await app.reloader.reload("test")
        assert result.outcome == "applied", result
        assert set(result.plan.live) == {"agent.tools", "tools.mcp"}
        await up.until("b")
        model.script(calls(("b__echo", {"text": "from b"})), ok("echoed"))
        assert await chat(http, url, "s", "echo it") == "echoed"
        assert offered(model, 1) == ["a__echo", "b__echo"]
        results = [m["content"] for m in model.requests[2].messages if m.get("role") == "tool"]
        assert results == ["from b"]  # server b's tool ran

        # A profile added by a reload gives its conversations its own offer.
        file.path.write_text(
            file.path.read_text()
            + '[[profiles]]\nname = "narrow"\nconversations = ["peer:n*"]\ntools = []\n'
        )
        result = await app.reloader.reload("test")
        assert result.outcome == "applied" and result.plan.live == ("profiles",), result
        model.script(ok("plain"))
        assert await chat(http, url, "narrow-1", "hi") == "plain"
        assert offered(model, 3) == []
        app.stop.set()


async def test_the_first_server_needs_a_restart_and_the_reload_says_so(
    tmp_path: Path, model: FakeModel
) -> None:
    file = File(tmp_path / "botmux.toml", config_text(tmp_path / "b.db", model.base_url))
    app = GatewayApp(file.read(), read=file.read)
    async with anyio.create_task_group() as tg:
        await tg.start(app.run)
        assert app.reloader is not None
        file.path.write_text(file.path.read_text() + server("a"))
        result = await app.reloader.reload("test")
        assert result.outcome == "refused"
        assert result.plan.restart == ("tools.mcp",)
        assert app.live.current.tools.mcp == ()  # nothing of the file applied
        app.stop.set()
