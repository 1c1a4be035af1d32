"""Socket Mode (SPEC 17, the default way in): slack_sdk's aiohttp client, whose envelopes
this module hands to the adapter's actor and acknowledges only on its verdict.

slack_sdk's ``SocketModeClient`` opens a websocket at the URL ``apps.connections.open`` gives
(with the app-level token), answers Slack's pings, reconnects on its own (a ``disconnect``
message, Slack's periodic refresh, a closed or silent socket: a new URL each time) and calls
our listener for each envelope, each in a task of its own. The listener waits for the actor's
verdict and sends the envelope's ``envelope_id`` back only for ``ACK``: an envelope whose
admission failed, or that arrived while draining, stays unacknowledged, and Slack delivers it
again (to this connection after a reconnect, or to another node's). Slack's own retries and
its replays after a reconnect are admitted again as duplicates: no-ops, acknowledged.

The first URL is asked for here, before the client connects, so a wrong app token fails the
start with a clear error (the client would retry it forever, logging each time). Several
nodes each hold a connection of their own; Slack gives each envelope to one of them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from gateway.config_slack import SlackConfig
from gateway.events import Observe
from gateway.events_platforms import SlackConnectionChanged
from platforms.slack._envelopes import Envelope, Verdict
from platforms.slack.errors import TRANSLATED, translate

log = logging.getLogger(__name__)

STOP_DEADLINE_S = 5.0
_LIBRARY_LOG = logging.getLogger("platforms.slack.socket_mode")


class SocketLink:
    """One Socket Mode connection, its envelopes handed to ``submit``."""

    def __init__(
        self,
        config: SlackConfig,
        *,
        submit: Callable[[Envelope], Awaitable[Verdict]],
        observe: Observe,
        hello: Callable[[], None],
    ) -> None:
        self._config = config
        self._submit = submit
        self._observe = observe
        self._hello = hello
        self._client: SocketModeClient | None = None
        self.connected = False

    def __repr__(self) -> str:
        return f"<SocketLink connected={self.connected}>"

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        config = self._config
        web = AsyncWebClient(base_url=config.api_base, timeout=int(config.request_timeout_s))
        client = self._client = SocketModeClient(
            config.app_token,
            logger=_LIBRARY_LOG,
            web_client=web,
            auto_reconnect_enabled=True,
            ping_interval=config.ping_interval_s,
        )
        client.message_listeners.append(self._on_message)
        client.socket_mode_request_listeners.append(self._on_request)
        client.on_close_listeners.append(self._on_close)
        try:
            try:
                client.wss_uri = await client.issue_new_wss_url()
            except TRANSLATED as exc:
                raise translate(exc) from exc
            await client.connect()  # type: ignore[no-untyped-call]
            task_status.started()
            await anyio.sleep_forever()
        finally:
            self.connected = False
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_DEADLINE_S):
                await client.close()  # type: ignore[no-untyped-call]

    async def _on_message(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None
    ) -> None:
        kind = message.get("type")
        if kind == "hello":
            self.connected = True
            info = message.get("num_connections")
            count = info if isinstance(info, int) and not isinstance(info, bool) else 0
            self._hello()
            self._observe(SlackConnectionChanged("up", count))
        elif "envelope_id" in message and not isinstance(message.get("payload"), dict):
            # No request slack_sdk can build (it logs an error and calls no listener): Slack
            # never sends one, but one that did would come back forever unacknowledged.
            log.warning("slack envelope unreadable: acknowledged and skipped")
            await client.send_socket_mode_response({"envelope_id": message["envelope_id"]})
        elif kind == "disconnect":
            # The client reconnects at once, on a new URL; what was not acknowledged comes again.
            log.info("slack asked to reconnect", extra={"reason": message.get("reason")})

    async def _on_close(self, message: object) -> None:
        if self.connected:
            self.connected = False
            self._observe(SlackConnectionChanged("down", 0))

    async def _on_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        retry = request.retry_attempt if isinstance(request.retry_attempt, int) else 0
        verdict = await self._submit(Envelope(request.type, request.payload, retry))
        if verdict is not Verdict.ACK:
            return
        try:
            await client.send_socket_mode_response(
                SocketModeResponse(envelope_id=request.envelope_id)
            )
        except Exception as exc:  # the socket went away: Slack delivers it again, a duplicate
            log.info("slack envelope not acknowledged", extra={"error": type(exc).__name__})
