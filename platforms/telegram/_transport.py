"""python-telegram-bot's HTTP transport, on aiohttp: every Bot API call of the adapter.

PTB sends each Bot API call through a :class:`telegram.request.BaseRequest`. Its own,
``HTTPXRequest`` (httpx over httpcore), cost 1.84 ms of CPU per ``sendMessage`` on the
benchmark machine (PTB's own work included; 20 calls at once against the loopback fake
Telegram in another process); the same calls through this class cost 0.38 ms. Under 200
streamed replies at once, the previews, typing pulses and finals were the larger part of the
gateway's CPU, and every final queued behind them.

Beyond carrying the request, :class:`BotApiRequest` reads 429 and 5xx answers itself (see
:mod:`platforms.telegram.errors` for why), and takes two hooks: ``on_answer`` hears after
every request whether Telegram answered (the poller's tells ``/readyz``), ``screen`` sees
every answer's ``result`` list before PTB parses it (``convert.screen_updates``).

PTB's four timeouts, as aiohttp has them: ``connect`` bounds opening a connection and
``pool`` the wait for a free one (together aiohttp's ``connect``, whose expiry proves the
request never left); ``read`` bounds each wait for the answer's next bytes once the request is
written (``sock_read``); aiohttp has no write timeout, so the four together bound the whole
call. ``HTTP(S)_PROXY``/``NO_PROXY`` are honoured as httpx honoured them, read once per host.

File downloads (``_files``) go over the same session (:meth:`BotApiRequest.download`): the
file URLs are on the Bot API's host, so a download reuses a kept-alive connection instead of
opening (and, in production, TLS-handshaking) one of its own each time.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from platforms.telegram.errors import answer_error

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class BotApiRequest(BaseRequest):
    """PTB's transport on one aiohttp session (made at ``initialize``: a session belongs to
    the running event loop). Timeouts in seconds, None for none, as ``HTTPXRequest`` takes
    them."""

    __slots__ = (
        "_connect",
        "_media_write",
        "_on_answer",
        "_pool",
        "_pool_size",
        "_proxies",
        "_read",
        "_screen",
        "_session",
        "_timeouts",
        "_write",
    )

    def __init__(
        self,
        *,
        connection_pool_size: int = 1,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
        on_answer: Callable[[bool], None] | None = None,
        screen: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        self._pool_size = connection_pool_size
        self._read = read_timeout
        self._write = write_timeout
        self._connect = connect_timeout
        self._pool = pool_timeout
        self._media_write = media_write_timeout
        self._on_answer = on_answer or (lambda reached: None)
        self._screen = screen
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str], str | None] = {}
        self._timeouts: dict[tuple[float | None, ...], aiohttp.ClientTimeout] = {}

    def __repr__(self) -> str:
        return f"<BotApiRequest pool={self._pool_size} open={self._session is not None}>"

    @property
    def read_timeout(self) -> float | None:
        return self._read

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size)
            )

    async def shutdown(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def parse_json_payload(self, payload: bytes) -> dict[str, Any]:  # type: ignore[override]
        """PTB's documented hook for decoding answers (a static method there: ours needs
        ``self``, and PTB calls it on the instance)."""
        data = BaseRequest.parse_json_payload(payload)
        result = data.get("result") if isinstance(data, dict) else None
        if self._screen is not None and isinstance(result, list):
            data["result"] = self._screen(result)
        return data

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This BotApiRequest is not initialized!")
        files = request_data is not None and request_data.contains_files
        default_write = self._media_write if files else self._write
        timeout = self._timeout(
            self._read if read_timeout is BaseRequest.DEFAULT_NONE else read_timeout,
            default_write if write_timeout is BaseRequest.DEFAULT_NONE else write_timeout,
            self._connect if connect_timeout is BaseRequest.DEFAULT_NONE else connect_timeout,
            self._pool if pool_timeout is BaseRequest.DEFAULT_NONE else pool_timeout,
        )
        headers = {"User-Agent": self.USER_AGENT}
        data: Any = None
        if request_data is not None and files:
            data = _multipart(request_data)
        elif request_data is not None and (params := request_data.json_parameters):
            data = urllib.parse.urlencode(params).encode()
            headers.update(FORM)
        with self._failures():
            async with session.request(
                method, url, data=data, headers=headers, timeout=timeout, proxy=self._proxy(url)
            ) as response:
                status, payload = response.status, await response.read()
        self._on_answer(status < 500)
        if status == 429 or status >= 500:
            error = answer_error(status, payload)
            if error is not None:
                raise error
        return status, payload

    @asynccontextmanager
    async def download(self, url: str, timeout_s: float) -> AsyncIterator[aiohttp.ClientResponse]:
        """GET ``url`` on this transport's session: the response, its body not yet read
        (the caller streams it). ``timeout_s`` bounds the connect and each read. Failures,
        also while the body is read, are PTB's as a Bot API call's are (``TimedOut``,
        ``NetworkError``), and ``on_answer`` hears of them the same way."""
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This BotApiRequest is not initialized!")
        timeout = self._timeout(timeout_s, None, timeout_s, timeout_s)
        headers = {"User-Agent": self.USER_AGENT}
        with self._failures():
            async with session.get(
                url,
                headers=headers,
                timeout=timeout,
                proxy=self._proxy(url),
                allow_redirects=False,  # downloads go only to the Bot API's origin
            ) as response:
                self._on_answer(response.status < 500)
                yield response

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """aiohttp's failures as PTB's (``errors.translate`` reads their causes)."""
        try:
            yield
        except TimeoutError as exc:  # a timeout is no outage (a long poll's read ends so)
            if isinstance(exc, aiohttp.ConnectionTimeoutError):  # errors._NOT_SENT
                raise TimedOut(
                    "Connect or pool timeout: the request was *not* sent to Telegram"
                ) from exc
            raise TimedOut(f"aiohttp.{type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self._on_answer(False)
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc

    def _timeout(
        self,
        read: float | None,
        write: float | None,
        connect: float | None,
        pool: float | None,
    ) -> aiohttp.ClientTimeout:
        key = (read, write, connect, pool)
        timeout = self._timeouts.get(key)
        if timeout is None:
            opening = None if connect is None or pool is None else connect + pool
            whole = None if None in key else sum(t for t in key if t is not None)
            timeout = aiohttp.ClientTimeout(
                total=whole, connect=opening, sock_connect=connect, sock_read=read
            )
            if len(self._timeouts) < 64:  # PTB passes a handful of distinct ones
                self._timeouts[key] = timeout
        return timeout

    def _proxy(self, url: str) -> str | None:
        """The proxy the environment names for ``url``'s host (None: direct), as httpx read
        ``HTTP(S)_PROXY`` and ``NO_PROXY``; looked up once per scheme and host."""
        parts = urllib.parse.urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._proxies:
            bypass = urllib.request.proxy_bypass(key[1])
            self._proxies[key] = None if bypass else urllib.request.getproxies().get(key[0])
        return self._proxies[key]


def _multipart(request_data: RequestData) -> aiohttp.FormData:
    """An upload: the parameters and the files as one ``multipart/form-data`` body, as httpx
    built it from PTB's ``json_parameters`` and ``multipart_data``."""
    form = aiohttp.FormData()
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in request_data.multipart_data.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form
