"""The model clients: one ``AsyncOpenAI`` per (endpoint, key), reused across turns.

A client owns a connection pool; building one per call would pay a new TCP connection (and
TLS) every turn. The aiohttp transport is used because it is the cheapest the ``openai``
package offers. Retries inside the client are off: retry and fallback belong to ``policy/``.

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

from gateway.config import ModelEndpoint

if TYPE_CHECKING:
    import openai

_Key = tuple[str, str, float]
REBUILD_AFTER_S = 1.0


@dataclass(eq=False, slots=True)
class _Entry:
    client: openai.AsyncOpenAI
    built_at: float
    borrowed: int = 0
    retired: bool = False


class ClientPool:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clients: dict[_Key, _Entry] = {}
        self._retired: list[_Entry] = []
        self._clock = clock
        self._built = 0

    def __repr__(self) -> str:
        return f"<ClientPool clients={len(self._clients)} built={self._built}>"

    def statistics(self) -> dict[str, int]:
        return {"clients": len(self._clients), "built": self._built, "retired": len(self._retired)}

    @asynccontextmanager
    async def use(
        self, endpoint: ModelEndpoint, api_key: str, *, rebuild: bool = False
    ) -> AsyncIterator[openai.AsyncOpenAI]:
        """Borrow the client of (endpoint, key); ``rebuild``: replace it first (recovery)."""
        key = (endpoint.base_url, api_key, endpoint.timeout_s)
        entry = self._clients.get(key)
        if entry is not None and rebuild and self._clock() - entry.built_at >= REBUILD_AFTER_S:
            entry.retired = True
            self._retired.append(entry)
            entry = None
        if entry is None:
            entry = self._clients[key] = _Entry(self._build(endpoint, api_key), self._clock())
        entry.borrowed += 1
        try:
            yield entry.client
        finally:
            entry.borrowed -= 1
            if entry.retired and entry.borrowed == 0 and entry in self._retired:
                self._retired.remove(entry)
                with anyio.CancelScope(shield=True):
                    await entry.client.close()

    @staticmethod
    def load_library() -> None:
        """Import openai now: a configured model's first turn must not wait for it (~0.5 s,
        ~17 MB resident with httpx2). A gateway without a model never loads it."""
        importlib.import_module("openai")
        importlib.import_module("openai.types.chat")

    def _build(self, endpoint: ModelEndpoint, api_key: str) -> openai.AsyncOpenAI:
        self._built += 1
        import openai  # here, not at import: a gateway without a model never loads it

        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=endpoint.base_url,
            timeout=endpoint.timeout_s,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(timeout=endpoint.timeout_s),
        )

    async def retire_except(self, keep: set[_Key]) -> None:
        """Drop the clients not in ``keep`` (a reload removed their key or endpoint): those no
        call borrows are closed now, the others when their last call returns."""
        for key in [k for k in self._clients if k not in keep]:
            entry = self._clients.pop(key)
            if entry.borrowed:
                entry.retired = True
                self._retired.append(entry)
            else:
                await entry.client.close()

    async def aclose(self) -> None:
        entries = [*self._clients.values(), *self._retired]
        self._clients, self._retired = {}, []
        for entry in entries:
            await entry.client.close()
