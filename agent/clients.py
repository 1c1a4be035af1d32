"""The model clients: one ``AsyncOpenAI`` per (endpoint, key), reused across turns.

A client owns a connection pool; building one per call would pay a new TCP connection (and
TLS) every turn. The aiohttp transport is used because it is the cheapest the ``openai``
package offers. Retries inside the client are off: retry and fallback belong to ``policy/``.
"""

from __future__ import annotations

import openai

from gateway.config import ModelEndpoint

_Key = tuple[str, str, float]


class ClientPool:
    def __init__(self) -> None:
        self._clients: dict[_Key, openai.AsyncOpenAI] = {}
        self._built = 0

    def __repr__(self) -> str:
        return f"<ClientPool clients={len(self._clients)} built={self._built}>"

    def statistics(self) -> dict[str, int]:
        return {"clients": len(self._clients), "built": self._built}

    def get(self, endpoint: ModelEndpoint, api_key: str) -> openai.AsyncOpenAI:
        key = (endpoint.base_url, api_key, endpoint.timeout_s)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = self._build(endpoint, api_key)
        return client

    async def rebuild(self, endpoint: ModelEndpoint, api_key: str) -> openai.AsyncOpenAI:
        """Replace the client (transport recovery): a wedged connection pool is thrown away."""
        key = (endpoint.base_url, api_key, endpoint.timeout_s)
        old = self._clients.pop(key, None)
        if old is not None:
            await old.close()
        return self.get(endpoint, api_key)

    def _build(self, endpoint: ModelEndpoint, api_key: str) -> openai.AsyncOpenAI:
        self._built += 1
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=endpoint.base_url,
            timeout=endpoint.timeout_s,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(timeout=endpoint.timeout_s),
        )

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
