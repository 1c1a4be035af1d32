"""The last check before a model request leaves (``before_call``): several nodes use it so a
node frozen between its lease check and the request sends nothing. It runs before every
attempt, retries included, and a turn it cancels sends no request at all, even on a pooled
connection (where nothing else would suspend before the request is written)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from agent.clients import ClientPool
from agent.turn import Agent
from tests.fakes.openai_server import FakeModel, open_fake_model, server_error
from tests.harness import make_config

pytestmark = pytest.mark.anyio

Guard = Callable[[anyio.CancelScope], Callable[[], None]]


async def turns(fake: FakeModel, tmp_path: Path, *guards: Guard) -> list[str]:
    """One turn per guard, on one agent (later turns reuse the first one's connection);
    each guard is made for its turn's cancel scope. Returns each turn's reply, or
    "cancelled"."""
    config = make_config(tmp_path / "s.db", fake.base_url, model_extra="max_retries = 2\n")
    assert config.model is not None
    clients = ClientPool()
    replies: list[str] = []
    try:
        agent = Agent(config.model, config.agent, clients)
        for guard in guards:
            with anyio.CancelScope() as scope:
                result = await agent.run_turn("peer:a", [], "hello", before_call=guard(scope))
                replies.append(result.reply)
            if scope.cancelled_caught:
                replies.append("cancelled")
        return replies
    finally:
        await clients.aclose()


def let_through(scope: anyio.CancelScope) -> Callable[[], None]:
    return lambda: None


def cancel(scope: anyio.CancelScope) -> Callable[[], None]:
    return scope.cancel


async def test_it_runs_before_every_attempt(tmp_path: Path) -> None:
    checks: list[int] = []
    async with open_fake_model() as fake:
        fake.script(server_error())
        replies = await turns(
            fake, tmp_path, lambda scope: lambda: checks.append(len(fake.requests))
        )
    assert replies == ["echo: hello"]
    assert checks == [0, 1]  # before the first request, and before the retry


async def test_a_turn_it_cancels_sends_nothing_even_on_a_pooled_connection(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        replies = await turns(fake, tmp_path, let_through, cancel, let_through)
        await anyio.sleep(0.1)
    assert replies == ["echo: hello", "cancelled", "echo: hello"]
    assert len(fake.requests) == 2
