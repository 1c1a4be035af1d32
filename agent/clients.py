"""The model clients: one per (endpoint, key), reused across turns.

A client owns a connection pool; building one per call would pay a new TCP connection (and
TLS) every turn. Each (endpoint, key) has two: the :class:`~agent._wire.WireClient` that sends
the chat calls, plain and streamed (aiohttp itself: a quarter of the ``openai`` client's CPU
per call), and an ``AsyncOpenAI`` for transcriptions, built at its first use (on a worker
thread), on the aiohttp transport because it is the cheapest the ``openai`` package offers.
Retries inside the clients are off: retry and fallback belong to ``policy/``.

Transport recovery replaces a client while other turns may still be using the old one, so
clients are borrowed with :meth:`ClientPool.use`: a replaced client is closed only when the
last call borrowing it returns. Many turns recovering at once share one rebuild: a client
younger than ``REBUILD_AFTER_S`` is not replaced again. A reload that drops a key or an
endpoint retires its clients the same way (:meth:`ClientPool.retire_except`).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from agent._wire import WireClient
from gateway.config import ModelEndpoint

if TYPE_CHECKING:
    import openai

_Key = tuple[str, str, float]
REBUILD_AFTER_S = 1.0


@dataclass(eq=False, slots=True)
class _Entry:
    endpoint: ModelEndpoint
    api_key: str
    built_at: float
    wire: WireClient
    borrowed: int = 0
    retired: bool = False
    sdk: openai.AsyncOpenAI | None = None  # built at first use

    async def client(self) -> openai.AsyncOpenAI:
        """The ``AsyncOpenAI``, built at the first call on a worker thread: building one
        loads a CA bundle into a new SSL context (~30 ms of CPU, which on the loop stalled
        every conversation; ``tests.bench.stalls``). Builds that race keep the first."""
        if self.sdk is None:
            built = await anyio.to_thread.run_sync(self._build_sdk)
            if self.sdk is None:
                self.sdk = built
            else:  # another call built one meanwhile
                await built.close()
        return self.sdk

    def _build_sdk(self) -> openai.AsyncOpenAI:
        import openai  # here, not at import: only transcriptions use it

        # No loop is needed to build it: its aiohttp session is made at the first request.
        return openai.AsyncOpenAI(
            api_key=self.api_key,
            base_url=self.endpoint.base_url,
            timeout=self.endpoint.timeout_s,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(timeout=self.endpoint.timeout_s),
        )

    async def aclose(self) -> None:
        await self.wire.aclose()
        if self.sdk is not None:
            await self.sdk.close()


@dataclass(frozen=True, slots=True)
class ClientPoolStatistics:
    """The model clients a pool holds (``ClientPool.statistics()``)."""

    clients: int  # (endpoint, key) pairs with a client now
    built: int  # clients made since start (rebuilds included)
    retired: int  # replaced by a rebuild, closed when their last borrower is done


class ClientPool:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clients: dict[_Key, _Entry] = {}
        self._retired: list[_Entry] = []
        self._clock = clock
        self._built = 0

    def __repr__(self) -> str:
        return f"<ClientPool clients={len(self._clients)} built={self._built}>"

    def statistics(self) -> ClientPoolStatistics:
        return ClientPoolStatistics(len(self._clients), self._built, len(self._retired))

    @asynccontextmanager
    async def use(
        self, endpoint: ModelEndpoint, api_key: str, *, rebuild: bool = False
    ) -> AsyncIterator[openai.AsyncOpenAI]:
        """Borrow the openai client of (endpoint, key); ``rebuild``: replace it first."""
        async with self._borrow(endpoint, api_key, rebuild) as entry:
            yield await entry.client()

    @asynccontextmanager
    async def wire(
        self, endpoint: ModelEndpoint, api_key: str, *, rebuild: bool = False
    ) -> AsyncIterator[WireClient]:
        """Borrow the chat-call client of (endpoint, key); ``rebuild``: replace it first."""
        async with self._borrow(endpoint, api_key, rebuild) as entry:
            yield entry.wire

    @asynccontextmanager
    async def _borrow(
        self, endpoint: ModelEndpoint, api_key: str, rebuild: bool
    ) -> AsyncIterator[_Entry]:
        """(endpoint, key)'s clients, replaced first on ``rebuild`` (transport recovery)."""
        key = (endpoint.base_url, api_key, endpoint.timeout_s)
        entry = self._clients.get(key)
        if entry is not None and rebuild and self._clock() - entry.built_at >= REBUILD_AFTER_S:
            entry.retired = True
            self._retired.append(entry)
            entry = None
        if entry is None:
            entry = self._clients[key] = self._build(endpoint, api_key)
        entry.borrowed += 1
        try:
            yield entry
        finally:
            entry.borrowed -= 1
            if entry.retired and entry.borrowed == 0 and entry in self._retired:
                self._retired.remove(entry)
                with anyio.CancelScope(shield=True):
                    await entry.aclose()

    @staticmethod
    def load_library() -> None:
        """Import openai now (~0.5 s, ~48 MB resident): a configured transcription's first
        voice note must not wait for it. Chat calls never need it (:mod:`agent._wire`)."""
        importlib.import_module("openai")

    def _build(self, endpoint: ModelEndpoint, api_key: str) -> _Entry:
        self._built += 1
        wire = WireClient(endpoint.base_url, api_key, endpoint.timeout_s)
        return _Entry(endpoint, api_key, self._clock(), wire)

    async def retire_except(self, keep: set[_Key]) -> None:
        """Drop the clients not in ``keep`` (a reload removed their key or endpoint): those no
        call borrows are closed now, the others when their last call returns."""
        for key in [k for k in self._clients if k not in keep]:
            entry = self._clients.pop(key)
            if entry.borrowed:
                entry.retired = True
                self._retired.append(entry)
            else:
                await entry.aclose()

    async def aclose(self) -> None:
        entries = [*self._clients.values(), *self._retired]
        self._clients, self._retired = {}, []
        for entry in entries:
            await entry.aclose()
