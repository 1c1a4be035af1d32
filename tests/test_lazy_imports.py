"""Libraries a gateway may not need are not imported at start (issue 20: idle memory).

openai (with httpx2, ~48 MB resident) loads at start only when transcription is configured
(asyncpg only with a PostgreSQL store, markdown-it only with a chat platform):
chat calls, plain and streamed, go on aiohttp itself (agent/_wire.py); pypdf (with cryptography, ~12 MB) at the first PDF; the chat platforms' libraries
only with their platform; the MCP SDK (with pydantic models of every protocol version, starlette,
httpx2) only when ``[[tools.mcp]]`` lists a server (``agent.tools.mcp``). Checked in a fresh
interpreter, as ``botmux run`` imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
import gateway.app, gateway.cli
import agent.tools
from agent.clients import ClientPool
heavy = ("openai", "httpx2", "pypdf", "telegram", "discord", "cryptography", "asyncpg")
heavy += ("markdown_it",)
heavy += ("mcp", "mcp_types")
heavy += ("slack_sdk",)
print(",".join(m for m in heavy if m in sys.modules))
ClientPool.load_library()
print("openai" in sys.modules)
"""

TOOLS = """
import sys
import agent.tools.mcp
print(",".join(m for m in ("mcp", "mcp_types") if m in sys.modules))
"""

CHAT = """
import sys, tempfile
from pathlib import Path
import anyio
from agent.clients import ClientPool
from agent.turn import Agent
from gateway.ports import Watch
from tests.fakes.openai_server import open_fake_model, streamed
from tests.harness import make_config

class Sink:
    binding = False
    def put(self, event):
        pass

async def main():
    async with open_fake_model() as fake:
        fake.script(streamed("a", "b"))
        with tempfile.TemporaryDirectory() as tmp:
            config = make_config(Path(tmp) / "s.db", fake.base_url)
            clients = ClientPool()
            agent = Agent(config.model, config.agent, clients)
            streamed_turn = await agent.run_turn("peer:a", [], "one", watch=Watch(stream=Sink()))
            plain = await agent.run_turn("peer:a", [], "two")
            await clients.aclose()
    print(streamed_turn.reply, plain.reply)
    print(",".join(m for m in ("openai", "httpx2") if m in sys.modules))

anyio.run(main)
"""


def test_the_gateway_imports_no_model_library_or_pdf_reader_at_start() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded, after = done.stdout.splitlines()
    assert loaded == ""
    assert after == "True"  # what a configured transcription loads at start


def test_a_chat_turn_plain_or_streamed_needs_no_openai_package() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHAT], cwd=ROOT, capture_output=True, text=True, check=True
    )
    replies, loaded = done.stdout.splitlines()
    assert replies == "ab echo: two"
    assert loaded == ""


def test_the_mcp_sdk_loads_with_the_toolbox_module_only() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TOOLS], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert (
        done.stdout.strip() == "mcp,mcp_types"
    )  # the probe can see it: what the test above checks
