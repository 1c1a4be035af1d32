"""The Events API over HTTP (SPEC 17): our own aiohttp listener at ``POST /slack/events`` on
``[slack] listen``, guarded like the peer API and the Telegram webhook (``platforms._guarded``).

Every request is checked before anything of it is read: Slack signs ``v0:<timestamp>:<body>``
with the app's signing secret (HMAC-SHA256, ``X-Slack-Signature``); a request without a valid
signature, or signed more than 5 minutes ago (a replay), is answered 401 and goes no further
(slack_sdk's ``SignatureVerifier``, which compares in constant time). A signed one is:
``url_verification`` (the challenge echoed, when the URL is set in the app's settings), an
event callback (``application/json``), or an interaction (a click on a button:
``application/x-www-form-urlencoded`` with a ``payload`` field; the app's Interactivity URL is
the same one). Events and interactions go to the adapter's actor like Socket Mode's envelopes;
the answer is 200 only after the verdict is ``ACK`` (the row committed), else 503, so Slack
delivers it again (its retries carry ``X-Slack-Retry-Num``: admitted again, no-ops).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from slack_sdk.signature import Clock, SignatureVerifier

from gateway.config_slack import SlackConfig
from gateway.events import Observe
from gateway.events_platforms import SlackRequestRefused
from platforms._guarded import ConnectionGuard, guarded_serving
from platforms.slack._envelopes import Envelope, Verdict

log = logging.getLogger(__name__)

PATH = "/slack/events"
MAX_AGE_S = 300  # Slack's own rule: a request signed more than 5 minutes ago is refused
MAX_BODY = 1024 * 1024  # an event is a few KB; Slack's own limit on a message is 40,000 chars
# The listener's guard (platforms._guarded): a request head within 10 s, idle connections
# closed after 75 s, at most 100 open at once.
HEADER_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 75.0
MAX_CONNECTIONS = 100


def refusal(body: bytes, headers: Any, secret: str, now: float) -> str | None:
    """Why a request is refused (``unsigned``, ``stale``, ``bad signature``), or None."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not timestamp or not signature:
        return "unsigned"
    try:
        signed_at = int(timestamp)
    except ValueError:
        return "unsigned"
    if abs(now - signed_at) > MAX_AGE_S:
        return "stale"
    verifier = SignatureVerifier(secret, clock=_Clock(now))
    if not verifier.is_valid(body, timestamp, signature):
        return "bad signature"
    return None


class _Clock(Clock):
    """slack_sdk's verifier's clock, read once for the whole check."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def read_payload(body: bytes, content_type: str) -> tuple[str, Any] | None:
    """A signed request's (kind, payload): ``events_api`` or ``interactive``; None when the
    body is neither."""
    try:
        if content_type == "application/x-www-form-urlencoded":
            fields = parse_qs(body.decode("utf-8"), max_num_fields=20)
            payload = json.loads(fields.get("payload", [""])[0])
            return ("interactive", payload) if isinstance(payload, dict) else None
        data = json.loads(body)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past the parser's depth
        return None
    return ("events_api", data) if isinstance(data, dict) else None


class EventsServer:
    """Listens at ``[slack] listen``; each signed event goes to ``submit``."""

    def __init__(
        self,
        config: SlackConfig,
        *,
        submit: Callable[[Envelope], Awaitable[Verdict]],
        observe: Observe,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._submit = submit
        self._observe = observe
        self._clock = clock
        self.port: int | None = None

    def __repr__(self) -> str:
        return f"<EventsServer {self._config.listen} port={self.port}>"

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        host, _, port = self._config.listen.rpartition(":")
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(PATH, self._on_post)
        guard = ConnectionGuard(header_timeout_s=HEADER_TIMEOUT_S, max_connections=MAX_CONNECTIONS)
        async with guarded_serving(
            app, host.strip("[]"), int(port), guard, idle_timeout_s=IDLE_TIMEOUT_S
        ) as bound:
            self.port = bound
            log.info("slack events API listening", extra={"listen": self._config.listen})
            task_status.started()
            await anyio.sleep_forever()

    async def _on_post(self, request: web.Request) -> web.Response:
        body = await request.read()
        why = refusal(body, request.headers, self._config.signing_secret, self._clock())
        if why is not None:
            self._observe(SlackRequestRefused(why))  # type: ignore[arg-type]
            return web.json_response({"ok": False, "error": "invalid request"}, status=401)
        read = read_payload(body, request.content_type)
        if read is None:
            return web.json_response({"ok": False, "error": "not an event"}, status=400)
        kind, payload = read
        if payload.get("type") == "url_verification":
            return web.json_response({"challenge": str(payload.get("challenge", ""))})
        retry = request.headers.get("X-Slack-Retry-Num", "0")
        envelope = Envelope(kind, payload, int(retry) if retry.isdigit() else 0)
        verdict = await self._submit(envelope)
        if verdict is Verdict.ACK:
            return web.json_response({"ok": True})
        return web.json_response({"ok": False, "error": "try again"}, status=503)
