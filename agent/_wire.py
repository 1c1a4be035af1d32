"""The chat completion call, plain and streamed, sent on aiohttp itself.

The ``openai`` client's per-call machinery (its request options and headers, httpx2's
``Request`` and URL parsing, the transport hop to aiohttp, building a ``ChatCompletion``
model) cost 1.28 ms of CPU per call on the benchmark machine; the same request and JSON
decode straight on an ``aiohttp.ClientSession`` cost 0.30 ms (both measured in one process,
50 calls at once, against the loopback fake model). That difference was half of botmux's CPU
per turn, so the one call every turn makes goes here. The wire is the same: a ``POST`` of the
same JSON body to ``{base_url}/chat/completions`` with a bearer key; the reply is read as
plain JSON.

Failures become the same :mod:`gateway.errors` exceptions as
:func:`agent.errors.translate_openai_errors` makes of openai's (one table, the same facts:
status, the provider's ``error.message``, ``code`` and ``type``, the headers policy reads),
so ``policy.classify`` sees no difference. A streamed call's events are decoded by
:mod:`agent._sse` from aiohttp's reads (the openai client's ``httpx2`` layer over aiohttp was
half of the agent's CPU per chunk). Transcriptions still go through the ``openai`` client.

Timeouts are the openai client's kind: ``timeout_s`` bounds connecting and each wait for the
next bytes, not the whole response, so a long answer streamed steadily is never cut.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import aiohttp

from agent import _body, _sse
from gateway.errors import ProviderError, ProviderTimeout, ProviderUnreachable

#: The response headers a status error keeps (what policy reads, and the request id).
KEPT_HEADERS = ("retry-after", "retry-after-ms", "x-ratelimit-reset-requests", "x-request-id")
#: Connections kept per client: the openai client's own default pool size.
MAX_CONNECTIONS = 1000
USER_AGENT = "botmux/0.1"


def status_error(status: int, raw: bytes, headers: Any, model: str) -> ProviderError:
    """A non-2xx answer as openai's client reads it: the body's ``error`` object (or the body)
    gives the message, code and type."""
    body: Any = None
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    data = body.get("error", body) if isinstance(body, dict) else body
    message = f"Error code: {status}"
    code = type_ = None
    if isinstance(data, dict):
        text = data.get("message")
        if isinstance(text, str) and text:
            message = text
        code = data.get("code")
        type_ = data.get("type")
    elif raw:
        message = f"Error code: {status} - {raw[:200].decode('utf-8', 'replace')}"
    return ProviderError(
        message[:500],
        status=status,
        code=code if isinstance(code, str) or code is None else str(code),
        type=type_ if isinstance(type_, str) else None,
        headers={k: headers[k] for k in KEPT_HEADERS if k in headers},
        model=model,
    )


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None: direct), as ``urllib`` reads it."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


class WireClient:
    """One endpoint and key's chat calls on its own aiohttp session (made at first use: a
    session belongs to the running event loop)."""

    __slots__ = ("_headers", "_proxy", "_session", "_stream_headers", "_timeout", "_url")

    def __init__(self, base_url: str, api_key: str, timeout_s: float) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        # The organization and project the openai client would send, from its variables.
        for variable, header in (
            ("OPENAI_ORG_ID", "OpenAI-Organization"),
            ("OPENAI_PROJECT_ID", "OpenAI-Project"),
        ):
            if os.environ.get(variable):
                self._headers[header] = os.environ[variable]
        self._stream_headers = {**self._headers, "Accept": "text/event-stream"}
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout_s, sock_read=timeout_s
        )
        self._session: aiohttp.ClientSession | None = None
        # HTTP(S)_PROXY and NO_PROXY as the openai client honours them, read once here:
        # aiohttp's trust_env reads them (and ~/.netrc) again on every request, which was a
        # tenth of the gateway's CPU per turn.
        self._proxy = proxy_for(self._url)

    def __repr__(self) -> str:
        return f"<WireClient {self._url} open={self._session is not None}>"

    def _open(self) -> aiohttp.ClientSession:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
            timeout=self._timeout,
            skip_auto_headers=("Accept-Encoding",),
        )
        return self._session

    async def _post(
        self, body: dict[str, Any], headers: dict[str, str], model: str
    ) -> aiohttp.ClientResponse:
        """Send ``body``; the response with its status and headers read, its body not yet."""
        session = self._session or self._open()
        data = _body.encode(body)  # images' data URLs spliced in, not escaped
        with _transport_errors(model):
            return await session.post(self._url, data=data, headers=headers, proxy=self._proxy)

    async def chat(self, body: dict[str, Any], model: str) -> dict[str, Any]:
        """POST ``body``; the decoded JSON reply. Raises ProviderError (a status, or a reply
        that is not a JSON object), ProviderTimeout or ProviderUnreachable."""
        response = await self._post(body, self._headers, model)
        try:
            with _transport_errors(model):
                raw = await response.read()
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise status_error(response.status, raw, response.headers, model)
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            raise ProviderError(f"invalid response: {exc}"[:500], status=200, model=model) from exc
        if not isinstance(reply, dict):
            raise ProviderError("invalid response: not a JSON object", status=200, model=model)
        return reply

    @asynccontextmanager
    async def stream(
        self, body: dict[str, Any], model: str
    ) -> AsyncIterator[AsyncIterator[list[Any]]]:
        """POST ``body`` (``"stream": true``); the decoded events of each read, as
        :func:`agent._sse.batches` gives them. Errors as :meth:`chat`'s, also mid-stream."""
        response = await self._post(body, self._stream_headers, model)
        try:
            if not 200 <= response.status < 300:
                with _transport_errors(model):
                    raw = await response.read()
                raise status_error(response.status, raw, response.headers, model)
            with _transport_errors(model):  # the body's reads, in the caller's loop
                yield _sse.batches(response.content.readany, model)
        finally:
            # Read to its end, the connection goes back to the pool; cut short (a cancel, an
            # error), it is closed, so the model sees the hang-up and stops generating.
            if response.content.at_eof():
                response.release()
            else:
                response.close()

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


@contextmanager
def _transport_errors(model: str) -> Iterator[None]:
    try:
        yield
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        raise ProviderTimeout("the request timed out", model=model) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ProviderUnreachable(f"connection failed: {exc}"[:500], model=model) from exc
