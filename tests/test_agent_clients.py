"""agent/clients.py: the transcription client (``AsyncOpenAI``) is built off the event loop's
thread, at its first use, once: building it loads a CA bundle into an SSL context (~30 ms of
CPU), which on the loop stalled every conversation."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from agent import clients
from agent.clients import ClientPool
from gateway.config import ModelEndpoint

pytestmark = pytest.mark.anyio

ENDPOINT = ModelEndpoint(model="whisper-1", base_url="http://127.0.0.1:9/v1")


async def test_the_sdk_client_is_built_at_first_use_and_reused() -> None:
    pool = ClientPool()
    async with pool.use(ENDPOINT, "sk-one") as client:
        first = client
        assert str(client.base_url).startswith("http://127.0.0.1:9/v1")
    async with pool.use(ENDPOINT, "sk-one") as client:
        assert client is first  # built once, reused
    await pool.aclose()


async def test_racing_first_uses_keep_one_client_and_close_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two first uses at once: both build (each on a worker thread), one client is kept for
    both, the other is closed."""
    loop_thread = threading.get_ident()
    built: list[tuple[int, Any]] = []
    build = clients._Entry._build_sdk

    def recorded(self: Any) -> Any:  # a spy: the real client is built
        sdk = build(self)
        built.append((threading.get_ident(), sdk))
        return sdk

    monkeypatch.setattr(clients._Entry, "_build_sdk", recorded)
    pool = ClientPool()
    got: list[Any] = []

    async def use() -> None:
        async with pool.use(ENDPOINT, "sk-race") as client:
            got.append(client)

    async with anyio.create_task_group() as tg:
        tg.start_soon(use)
        tg.start_soon(use)
    assert len(built) == 2 and all(ident != loop_thread for ident, _ in built)
    assert got[0] is got[1]  # both calls use the one kept
    [other] = [sdk for _, sdk in built if sdk is not got[0]]
    assert other.is_closed() and not got[0].is_closed()
    await pool.aclose()
    assert got[0].is_closed()
