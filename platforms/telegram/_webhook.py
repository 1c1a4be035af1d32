"""Webhook mode: our own aiohttp listener for Telegram's POSTs (PTB's needs tornado).

The adapter's intake decides each update, as for the poller; the answer to Telegram's POST is
200 only after the commit (503 otherwise, so Telegram retries; 403 without the right secret
token). Several nodes each serve it behind a load balancer and set the same webhook.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
from aiohttp import web
from telegram import Bot, Update

from gateway.config import TelegramConfig
from gateway.events import Observe
from gateway.events_platforms import TelegramWebhookRefused
from platforms._guarded import ConnectionGuard, guarded_serving
from platforms.telegram._admission import Verdict

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# The webhook listener's guard (platforms._guarded): a request head within 10 s, idle
# connections closed after 75 s, at most 100 open at once.
WEBHOOK_HEADER_TIMEOUT_S = 10.0
WEBHOOK_IDLE_TIMEOUT_S = 75.0
WEBHOOK_MAX_CONNECTIONS = 100


class WebhookServer:
    """Listens at ``webhook_listen`` and sets the webhook; each update goes to ``submit``."""

    def __init__(
        self,
        config: TelegramConfig,
        *,
        allowed_updates: tuple[str, ...],
        screen: Callable[[list[Any]], list[Any]],
        submit: Callable[[Update], Awaitable[Verdict]],
        bot: Callable[[], Bot],
        observe: Observe,
    ) -> None:
        self._config = config
        self._allowed = allowed_updates
        self._screen = screen
        self._submit = submit
        self._bot = bot
        self._observe = observe
        self.port: int | None = None

    async def run(
        self, bot: Bot, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        config = self._config
        host, _, port = config.webhook_listen.rpartition(":")
        path = urlsplit(config.webhook_url).path or "/"
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post(path, self._on_webhook)
        # Guarded like the peer API: a header deadline, an idle timeout and a connection cap,
        # so a stranger's slow or idle sockets cannot hold the listener (Telegram itself
        # opens one connection: set_webhook's max_connections below).
        guard = ConnectionGuard(
            header_timeout_s=WEBHOOK_HEADER_TIMEOUT_S, max_connections=WEBHOOK_MAX_CONNECTIONS
        )
        async with guarded_serving(
            app, host.strip("[]"), int(port), guard, idle_timeout_s=WEBHOOK_IDLE_TIMEOUT_S
        ) as bound:
            self.port = bound
            await bot.set_webhook(
                config.webhook_url,
                secret_token=config.webhook_secret,
                allowed_updates=self._allowed,
                max_connections=1,  # one update at a time: arrival order is admission order
            )
            log.info("telegram webhook listening", extra={"listen": config.webhook_listen})
            task_status.started()
            await anyio.sleep_forever()

    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self._config.webhook_secret.encode()):
            self._observe(TelegramWebhookRefused())
            return web.json_response({"ok": False, "error": "forbidden"}, status=403)
        try:
            data = json.loads(await request.read())
        except (ValueError, RecursionError):  # not JSON (or nested past the parser's depth)
            data = None
        # One that parses as JSON but not as an Update is acknowledged (200) as an empty
        # update: Telegram delivers in order, so refusing it would hold back every later one.
        screened = self._screen([data]) if isinstance(data, dict) else []
        if not screened:
            return web.json_response({"ok": False, "error": "not an update"}, status=400)
        update = Update.de_json(screened[0], self._bot())
        verdict = await self._submit(update)
        if verdict is Verdict.ACK:
            return web.json_response({"ok": True})
        # Not admitted: Telegram delivers it again later.
        return web.json_response({"ok": False, "error": "try again"}, status=503)
