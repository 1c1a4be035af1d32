"""Tool servers as an operator sees them (SPEC 15): a gateway with two real MCP servers, the
test server over stdio (up) and one whose command does not exist (down). ``/readyz`` stays 200
and lists both with their states (why one is down only for a token holder), ``botmux status``
prints a line for each, ``GET /api/admin/tools`` lists them for an operator (403 for a token
limited to some sessions), and the console's Tools view shows them (a real headless Chromium;
its screenshot is docs/console/tools.png).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from gateway.events_mcp import ToolServerChanged
from tests.fakes.mcp_server import stdio_command
from tests.fakes.openai_server import FakeModel
from tests.harness import Events, config_text, free_port, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.gateway, pytest.mark.process]

OPS = "ops-console-token-0123456789"
OTHER = "bots-console-token-987654321"
AUTH = {"Authorization": f"Bearer {OPS}"}
MISSING = "/nonexistent/botmux-no-such-mcp-server"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def servers() -> str:
    command, args = stdio_command()
    quoted = ", ".join(f'"{a}"' for a in args)
    return (
        f'[[tools.mcp]]\nname = "local"\ncommand = "{command}"\nargs = [{quoted}]\n\n'
        f'[[tools.mcp]]\nname = "gone"\ncommand = "{MISSING}"\n'
    )


def shots(tmp_path: Path) -> Path:
    """Where the screenshot goes: ``$BOTMUX_CONSOLE_SCREENSHOTS`` (how docs/console/ is made)."""
    folder = Path(os.environ.get("BOTMUX_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@asynccontextmanager
async def gateway(tmp_path: Path, model: FakeModel) -> AsyncIterator[tuple[str, Path]]:
    """The gateway, once ``local`` is up and ``gone`` down; its URL and its config file."""
    extra = (
        f'[[peer.tokens]]\ntoken = "{OPS}"\nname = "ops"\n\n'
        f'[[peer.tokens]]\ntoken = "{OTHER}"\nname = "bots"\nsessions = ["bot-*"]\n\n' + servers()
    )
    text = config_text(
        tmp_path / "botmux.db", model.base_url, listen=f"127.0.0.1:{free_port()}", extra=extra
    )
    path = tmp_path / "botmux.toml"
    path.write_text(text)
    events = Events()
    async with running_gateway(parse_config(text, source=str(path), env={}), events=events) as (
        _,
        url,
    ):
        await events.wait_for(ToolServerChanged, server="local", state="up")
        await events.wait_for(ToolServerChanged, server="gone", state="down")
        yield url, path


async def get(http: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with http.get(url, **kw) as r:
        return r.status, await r.json()


async def test_readyz_botmux_status_and_the_admin_api_show_each_tool_server(
    tmp_path: Path, model: FakeModel
) -> None:
    async with gateway(tmp_path, model) as (url, config), aiohttp.ClientSession() as http:
        probe = await get(http, f"{url}/readyz")
        detailed = await get(http, f"{url}/readyz", headers=AUTH)
        wrong = await get(http, f"{url}/readyz", headers={"Authorization": "Bearer nope-nope"})
        admin = await get(http, f"{url}/api/admin/tools", headers=AUTH)
        limited = await get(
            http, f"{url}/api/admin/tools", headers={"Authorization": f"Bearer {OTHER}"}
        )
        anonymous = await get(http, f"{url}/api/admin/tools")
        status = await anyio.run_process(
            [sys.executable, "-m", "gateway", "status", "--config", str(config)], check=False
        )
    # A server that is down never makes the gateway unready: a turn goes on without its tools.
    code, body = probe
    assert code == 200 and body["ready"] is True
    by_name = {s["name"]: s for s in body["tools"]}
    assert by_name["local"]["state"] == "up" and by_name["local"]["tools"] > 5
    assert by_name["gone"] == {"name": "gone", "state": "down", "tools": 0}  # no detail: a probe
    code, body = detailed
    assert code == 200
    gone = next(s for s in body["tools"] if s["name"] == "gone")
    assert gone["state"] == "down" and MISSING in gone["detail"], gone
    assert "next try in" in gone["detail"]
    assert wrong[0] == 401  # a probe that shows a token is checked as any request

    code, body = admin
    assert code == 200
    listed = {s["name"]: s for s in body["servers"]}
    assert listed["local"]["state"] == "up" and "local__echo" in listed["local"]["tools"]
    assert len(listed["local"]["tools"]) == by_name["local"]["tools"]
    assert listed["gone"]["state"] == "down" and listed["gone"]["tools"] == []
    assert MISSING in listed["gone"]["detail"]
    assert limited[0] == 403 and anonymous[0] == 401

    out = status.stdout.decode()
    assert status.returncode == 0, status.stderr.decode()
    assert "gateway: running" in out
    assert f"tool server local: up, {by_name['local']['tools']} tool(s)" in out
    (line,) = [x for x in out.splitlines() if "tool server gone:" in x]
    assert line.strip().startswith("tool server gone: down, 0 tool(s) (") and MISSING in line


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
async def test_the_console_tools_view_shows_each_servers_state(
    tmp_path: Path, model: FakeModel
) -> None:
    from playwright.async_api import async_playwright, expect

    folder = shots(tmp_path)
    async with gateway(tmp_path, model) as (url, _), async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 520})
            page.set_default_timeout(15_000)
            await page.goto(f"{url}/console/")
            await page.fill("#token", OPS)
            await page.click("#login-form button[type=submit]")
            await page.click('#tabs a[data-tab="tools"]')
            view = page.locator("#view-tools")
            await expect(view).to_contain_text("1 tool server(s) down")
            rows = view.locator("tbody tr")
            await expect(rows).to_have_count(2)
            await expect(rows.filter(has_text="local")).to_contain_text("up")
            await expect(rows.filter(has_text="local")).to_contain_text("local__echo")
            await expect(rows.filter(has_text="gone")).to_contain_text("down")
            await expect(rows.filter(has_text="gone")).to_contain_text(MISSING)
            await page.screenshot(path=str(folder / "tools.png"), full_page=True)
        finally:
            await browser.close()


async def test_without_tokens_readyz_shows_the_detail_to_local_requests_only(
    tmp_path: Path, model: FakeModel
) -> None:
    extra = f'[[tools.mcp]]\nname = "gone"\ncommand = "{MISSING}"\n'
    text = config_text(tmp_path / "botmux.db", model.base_url, extra=extra)
    events = Events()
    async with (
        running_gateway(parse_config(text, source="t", env={}), events=events) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        await events.wait_for(ToolServerChanged, server="gone", state="down")
        local = await get(http, f"{url}/readyz")
        rebound = await get(http, f"{url}/readyz", headers={"Host": "attacker.example"})
    assert local[0] == 200 and MISSING in local[1]["tools"][0]["detail"]
    # A web page reaching the loopback listener (DNS rebinding) gets the probe, not the detail.
    assert rebound[0] == 200 and rebound[1]["tools"] == [
        {"name": "gone", "state": "down", "tools": 0}
    ]
