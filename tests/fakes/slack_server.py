"""A local Slack (the Web API, the Socket Mode websocket, Events API posts, file downloads)
that the real slack_sdk talks to.

Why it exists: the Slack adapter must be tested against the protocol slack_sdk really speaks
(STYLE.md: fakes speak the real protocol, no mocks), including what goes wrong in production:
429s with ``Retry-After``, envelopes never acknowledged and delivered again, Slack's
``disconnect`` (a refresh) and the replay after it, a mention sent twice (``message`` and
``app_mention``, two event ids, one ``ts``), the bot's own posts echoed back as events.

The Web API is ``POST {api_base}/<method>`` (``api_base`` = ``{origin}/api``), answered as
Slack does: HTTP 200 with ``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}``, 429
with ``Retry-After`` (whole seconds) and ``{"ok": false, "error": "ratelimited"}``. The token is
read from ``Authorization: Bearer`` (slack_sdk's way) or the body's ``token``; a wrong one is
``invalid_auth``. Methods: ``auth.test``, ``chat.postMessage`` (text over
:data:`MAX_TEXT` is ``msg_too_long``; a ``thread_ts`` of no message of the channel is
``thread_not_found``), ``chat.update`` and ``chat.delete`` (the bot's own messages only:
``cant_update_message``, ``message_not_found``), ``chat.postEphemeral``, and
``apps.connections.open`` (with the app-level token), whose URL is this server's websocket.

Socket Mode: the websocket says ``hello`` (with ``num_connections``), then sends envelopes
``{"envelope_id", "type", "payload", "accepts_response_payload", "retry_attempt",
"retry_reason"}``, each to one open connection (in turn, as Slack spreads them over an app's
connections), and records each acknowledgement (``{"envelope_id"}`` sent back).
``disconnect()`` sends Slack's ``{"type": "disconnect", "reason": "refresh_requested"}``:
slack_sdk opens a new connection, and what was not acknowledged is delivered again there
(``retry_reason: "timeout"``), as Slack replays. ``redeliver()`` delivers every envelope not
acknowledged again, as Slack's retries do.

The Events API: with ``events_url`` set, envelopes go there instead as signed POSTs
(``X-Slack-Signature``, ``X-Slack-Request-Timestamp``; ``X-Slack-Retry-Num`` and
``X-Slack-Retry-Reason`` on a retry); an answer other than 200 leaves the event
unacknowledged. ``post_signed`` posts any body, signed (or not, or stale) as a test wants.

Files: ``add_file`` keeps bytes behind ``url_private_download`` on this server; a download
needs the bot token. Everything is recorded (``calls``, ``messages``, ``envelopes``,
``files.downloads``); waits never time out by themselves: wrap them in ``anyio.fail_after``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
import anyio
from aiohttp import web

from tests.fakes._file_server import FileServer
from tests.fakes._rate_limits import Limit, Windows

JSON = dict[str, Any]
TEAM = "T0BOTMUX1"
BOT_USER = "U0BOTMUX1"
BOT_ID = "B0BOTMUX1"
APP_ID = "A0BOTMUX1"
BOT_TOKEN = "xoxb-1111-2222-botmuxtesttoken"
APP_TOKEN = "xapp-1-A0BOTMUX1-3333-botmuxapptoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
MAX_TEXT = 40_000  # chat.postMessage refuses longer text (msg_too_long)
#: Slack's rate limits, off unless set (``slack.limits``): per method, per key.
TIER_LIMITS = {
    "chat.postMessage": Limit(1, 1.0),  # about one a second per channel (bursts aside)
    "chat.update": Limit(50, 60.0),  # Tier 3, per workspace
}


def signature(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One Web API call as the fake answered it."""

    method: str
    args: JSON
    status: int
    error: str  # "" when ok
    arrived: float
    retry_after: float | None = None


@dataclass(slots=True)
class Envelope:
    """One event or interaction as Slack delivers it, and what became of it."""

    envelope_id: str
    kind: str  # "events_api" | "interactive"
    payload: JSON
    deliveries: int = 0
    acked: bool = False
    on: object = None  # the websocket it was last sent on
    answers: list[int] = field(default_factory=list)  # the Events API's statuses


class FakeSlack:
    def __init__(self, *, bot_token: str, app_token: str, signing_secret: str) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.port = 0
        self.calls: list[ApiCall] = []
        self.messages: dict[str, list[JSON]] = {}  # by channel, oldest first
        self.envelopes: list[Envelope] = []
        self.events_url = ""  # set: the Events API over HTTP instead of Socket Mode
        self.limits: dict[str, Limit] = {}
        self.echo_own = True  # the bot's posts come back as message events
        self.files = FileServer(self._changed)
        self.hellos = 0
        self.clock: Callable[[], float] = time.monotonic
        self._windows: dict[str, Windows] = {}
        self._scripted: dict[str, list[tuple[int, str, float | None]]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._turn = itertools.count()
        self._ids = itertools.count(1)
        self._ts = itertools.count(1)
        self._change = anyio.Event()
        self._http: aiohttp.ClientSession | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    # -- what tests read --------------------------------------------------------------------

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.origin}/api"

    def calls_of(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[JSON]:
        """The bot's messages in ``channel`` as they are now (``thread_ts``: in that thread;
        None: every one)."""
        found = [m for m in self.messages.get(channel, []) if m.get("bot_id") == BOT_ID]
        if thread_ts is None:
            return found
        return [m for m in found if m.get("thread_ts") == thread_ts]

    def texts(self, channel: str, thread_ts: str | None = None) -> list[str]:
        return [str(m["text"]) for m in self.bot_messages(channel, thread_ts)]

    def unacked(self) -> list[Envelope]:
        return [e for e in self.envelopes if not e.acked]

    def _changed(self) -> None:
        self._change.set()
        self._change = anyio.Event()

    async def wait_until(self, check: Callable[[], object]) -> None:
        while not check():
            await self._change.wait()

    async def wait_for_bot_messages(
        self, channel: str, count: int, thread_ts: str | None = None
    ) -> list[JSON]:
        await self.wait_until(lambda: len(self.bot_messages(channel, thread_ts)) >= count)
        return self.bot_messages(channel, thread_ts)

    async def wait_acked(self, envelope: Envelope) -> None:
        await self.wait_until(lambda: envelope.acked)

    # -- what tests do --------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        error: str = "ratelimited",
        *,
        retry_after: float | None = 1.0,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` so (429: with ``Retry-After``)."""
        self._scripted.setdefault(method, []).extend([(status, error, retry_after)] * times)

    def add_file(self, name: str, mimetype: str, data: bytes, *, origin: str = "") -> JSON:
        """A file as a message's ``files`` entry carries it; its bytes served here (or the
        entry points at ``origin`` instead: another host)."""
        file_id = f"F{next(self._ids):08d}"
        path = f"/files-pri/{TEAM}-{file_id}/{name}"
        self.files.add(path, data)
        url = f"{origin or self.origin}{path}"
        return {
            "id": file_id,
            "name": name,
            "mimetype": mimetype,
            "size": len(data),
            "mode": "hosted",
            "url_private": url,
            "url_private_download": url + "?download=1",
        }

    def next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ids):06d}"

    async def send(
        self,
        channel: str,
        text: str,
        *,
        user: str,
        thread_ts: str | None = None,
        files: tuple[JSON, ...] = (),
        bot_id: str | None = None,
        subtype: str | None = None,
        mention_event: bool = True,
        on: Sequence[object] = (),
    ) -> str:
        """A person writes in ``channel``: the message is kept, its ``message`` event
        delivered, and (``mention_event``, when it mentions the bot outside a DM) its
        ``app_mention`` event too, with the same ts. ``on``: the connections (of
        :meth:`connections`) its events go to, in turn, instead of the next ones. Its ts."""
        ts = self.next_ts()
        message: JSON = {"type": "message", "user": user, "text": text, "ts": ts, "team": TEAM}
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        if files:
            message["files"] = list(files)
            message["subtype"] = "file_share"
        if subtype is not None:
            message["subtype"] = subtype
        if bot_id is not None:
            message["bot_id"] = bot_id
        self.messages.setdefault(channel, []).append(message)
        event = {**message, "channel": channel, "channel_type": _channel_type(channel)}
        ways = itertools.cycle(on) if on else itertools.repeat(None)
        await self.deliver_event(event, on=next(ways))
        if mention_event and f"<@{BOT_USER}>" in text and not channel.startswith("D"):
            mention = {k: v for k, v in event.items() if k not in ("channel_type", "subtype")}
            await self.deliver_event({**mention, "type": "app_mention"}, on=next(ways))
        self._changed()
        return ts

    async def deliver_event(self, event: JSON, *, on: object = None) -> Envelope:
        """An ``event_callback`` around ``event``, delivered (``on``: to that connection)."""
        event_id = f"Ev{next(self._ids):010d}"
        body = {
            "token": "legacy-verification-token",
            "team_id": TEAM,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
        }
        return await self.deliver("events_api", body, on=on)

    async def click(self, channel: str, message_ts: str, value: str, *, user: str) -> Envelope:
        """A person clicks a button of the bot's message ``message_ts`` (one it shows)."""
        message = next(m for m in self.messages.get(channel, []) if m["ts"] == message_ts)
        buttons = [
            element
            for block in message.get("blocks", [])
            if block.get("type") == "actions"
            for element in block.get("elements", [])
        ]
        action = next(b for b in buttons if b.get("value") == value)
        payload = {
            "type": "block_actions",
            "team": {"id": TEAM},
            "user": {"id": user},
            "api_app_id": APP_ID,
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
            "channel": {"id": channel},
            "message": dict(message),
            "actions": [
                {
                    "type": "button",
                    "action_id": action["action_id"],
                    "value": value,
                    "action_ts": str(time.time()),
                }
            ],
        }
        return await self.deliver("interactive", payload)

    async def deliver(self, kind: str, payload: JSON, *, on: object = None) -> Envelope:
        envelope = Envelope(f"env-{next(self._ids):08d}", kind, payload)
        self.envelopes.append(envelope)
        await self._send(envelope, on=on)
        return envelope

    async def redeliver(self) -> None:
        """Deliver every envelope not acknowledged again, as Slack retries."""
        for envelope in self.unacked():
            await self._send(envelope, reason="timeout")

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's ``disconnect`` message on every open connection: the client reconnects,
        and what was not acknowledged is delivered again on the new connection."""
        for ws in list(self._sockets):
            await ws.send_json({"type": "disconnect", "reason": reason})

    def connections(self) -> list[object]:
        """The open Socket Mode connections, oldest first (for ``send(on=...)``)."""
        return [ws for ws in self._sockets if not ws.closed]

    def _socket_for(self, on: object = None) -> web.WebSocketResponse | None:
        open_ = [ws for ws in self._sockets if not ws.closed]
        if on is not None:
            return next((ws for ws in open_ if ws is on), None)
        return open_[next(self._turn) % len(open_)] if open_ else None

    async def _send(self, envelope: Envelope, *, reason: str = "", on: object = None) -> None:
        envelope.deliveries += 1
        retry = envelope.deliveries - 1
        if self.events_url:
            assert self._tg is not None
            self._tg.start_soon(self._post_event, envelope, retry, reason)
            return
        ws = self._socket_for(on)
        if ws is None:
            envelope.deliveries -= 1  # kept: sent at the next hello
            return
        frame = {
            "envelope_id": envelope.envelope_id,
            "type": envelope.kind,
            "payload": envelope.payload,
            "accepts_response_payload": envelope.kind != "events_api",
            "retry_attempt": retry,
            "retry_reason": reason,
        }
        envelope.on = ws
        await ws.send_json(frame)

    async def _post_event(self, envelope: Envelope, retry: int, reason: str) -> None:
        if envelope.kind == "interactive":
            body = aiohttp.helpers.quote(json.dumps(envelope.payload), safe="")
            data = f"payload={body}".encode()
            content_type = "application/x-www-form-urlencoded"
        else:
            data = json.dumps(envelope.payload).encode()
            content_type = "application/json"
        headers = {"Content-Type": content_type}
        if retry:
            headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": reason}
        status = await self.post_signed(data, headers=headers)
        envelope.answers.append(status)
        envelope.acked = envelope.acked or status == 200
        self._changed()

    async def post_signed(
        self,
        body: bytes,
        *,
        headers: dict[str, str] | None = None,
        secret: str | None = None,
        age_s: float = 0.0,
        signed: bool = True,
    ) -> int:
        """POST ``body`` to ``events_url`` as Slack would (signed with ``secret``, default the
        app's, ``age_s`` ago); its status."""
        assert self._http is not None and self.events_url
        sent = dict(headers or {"Content-Type": "application/json"})
        if signed:
            timestamp = str(int(time.time() - age_s))
            sent["X-Slack-Request-Timestamp"] = timestamp
            sent["X-Slack-Signature"] = signature(secret or self.signing_secret, timestamp, body)
        try:
            async with self._http.post(self.events_url, data=body, headers=sent) as response:
                await response.read()
                return response.status
        except aiohttp.ClientError:
            return 0

    # -- the server -------------------------------------------------------------------------------

    def _answer(self, call: ApiCall, body: JSON) -> web.Response:
        self.calls.append(call)
        self._changed()
        headers = {"Retry-After": str(int(call.retry_after))} if call.retry_after else {}
        return web.json_response(body, status=call.status, headers=headers)

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: JSON = dict(request.query)
        if request.content_type == "application/json":
            args |= await request.json()
        elif request.can_read_body:
            args |= dict(parse_qsl((await request.read()).decode()))
        auth = request.headers.get("Authorization", "")
        token = (
            auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else args.pop("token", "")
        )
        args.pop("token", None)
        now = self.clock()
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            return self._answer(
                ApiCall(method, args, 200, "invalid_auth", now), _error("invalid_auth")
            )
        scripted = self._scripted.get(method)
        if scripted:
            status, error, retry_after = scripted.pop(0)
            call = ApiCall(method, args, status, error, now, retry_after)
            return self._answer(call, _error(error))
        limit = self.limits.get(method)
        if limit is not None:
            windows = self._windows.setdefault(method, Windows(limit))
            key = args.get("channel", "") if method == "chat.postMessage" else ""
            wait = windows.wait(key, now)
            if wait > 0:
                retry = float(max(1, int(wait + 0.999)))
                call = ApiCall(method, args, 429, "ratelimited", now, retry)
                return self._answer(call, _error("ratelimited"))
            windows.add(key, now)
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return self._answer(
                ApiCall(method, args, 200, "unknown_method", now), _error("unknown_method")
            )
        body = await handler(args)
        error = "" if body.get("ok") else str(body.get("error"))
        return self._answer(ApiCall(method, args, 200, error, now), body)

    async def _auth_test(self, args: JSON) -> JSON:
        return {
            "ok": True,
            "url": "https://botmux.slack.com/",
            "team": "botmux",
            "user": "botmux",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
        }

    async def _apps_connections_open(self, args: JSON) -> JSON:
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={next(self._ids)}"}

    async def _chat_postMessage(self, args: JSON) -> JSON:
        channel, text = str(args.get("channel", "")), args.get("text") or ""
        if not channel:
            return _error("channel_not_found")
        if not text and not args.get("blocks"):
            return _error("no_text")
        if len(text) > MAX_TEXT:
            return _error("msg_too_long")
        thread_ts = args.get("thread_ts")
        kept = self.messages.setdefault(channel, [])
        if thread_ts and not any(m["ts"] == thread_ts for m in kept):
            return _error("thread_not_found")
        ts = self.next_ts()
        message: JSON = {
            "type": "message",
            "text": text,
            "ts": ts,
            "bot_id": BOT_ID,
            "user": BOT_USER,
            "team": TEAM,
        }
        if thread_ts:
            message["thread_ts"] = thread_ts
        if args.get("blocks"):
            message["blocks"] = _blocks(args["blocks"])
        kept.append(message)
        if self.echo_own:
            event = {**message, "channel": channel, "channel_type": _channel_type(channel)}
            assert self._tg is not None
            self._tg.start_soon(self.deliver_event, event)
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    async def _chat_update(self, args: JSON) -> JSON:
        message = self._own(args)
        if isinstance(message, str):
            return _error(message)
        text = args.get("text") or ""
        if len(text) > MAX_TEXT:
            return _error("msg_too_long")
        message["text"] = text
        if "blocks" in args:
            message["blocks"] = _blocks(args["blocks"])
        message["edited"] = {"user": BOT_USER, "ts": self.next_ts()}
        return {"ok": True, "channel": args["channel"], "ts": message["ts"], "text": text}

    async def _chat_delete(self, args: JSON) -> JSON:
        message = self._own(args)
        if isinstance(message, str):
            return _error(message)
        self.messages[str(args["channel"])].remove(message)
        return {"ok": True, "channel": args["channel"], "ts": message["ts"]}

    async def _chat_postEphemeral(self, args: JSON) -> JSON:
        return {"ok": True, "message_ts": self.next_ts()}

    def _own(self, args: JSON) -> JSON | str:
        found = [
            m for m in self.messages.get(str(args.get("channel")), []) if m["ts"] == args.get("ts")
        ]
        if not found:
            return "message_not_found"
        if found[0].get("bot_id") != BOT_ID:
            return "cant_update_message"
        return found[0]

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(status=302, headers={"Location": "https://slack.com/signin"})
        return await self.files.serve(request, request.path)

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.hellos += 1
        open_ = [s for s in self._sockets if not s.closed]
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(open_),
                "connection_info": {"app_id": APP_ID},
                "debug_info": {"host": "fake", "approximate_connection_time": 3600},
            }
        )
        for envelope in self.unacked():  # replayed: those of no open connection
            held = envelope.on is not None and not getattr(envelope.on, "closed", True)
            if not held:
                await self._send(envelope, reason="timeout" if envelope.deliveries else "")
        self._changed()
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                ack = json.loads(message.data)
                for envelope in self.envelopes:
                    if envelope.envelope_id == ack.get("envelope_id"):
                        envelope.acked = True
                self._changed()
        finally:
            self._sockets.remove(ws)
            self._changed()
        return ws


def _error(code: str) -> JSON:
    return {"ok": False, "error": code}


def _channel_type(channel: str) -> str:
    return {"D": "im", "G": "group"}.get(channel[:1], "channel")


def _blocks(blocks: Any) -> list[JSON]:
    parsed = json.loads(blocks) if isinstance(blocks, str) else blocks
    assert isinstance(parsed, list)
    return parsed


@asynccontextmanager
async def open_fake_slack(
    *,
    bot_token: str = BOT_TOKEN,
    app_token: str = APP_TOKEN,
    signing_secret: str = SIGNING_SECRET,
) -> AsyncIterator[FakeSlack]:
    slack = FakeSlack(bot_token=bot_token, app_token=app_token, signing_secret=signing_secret)
    app = web.Application()
    app.router.add_post("/api/{method}", slack._api)
    app.router.add_get("/link/", slack._link)
    app.router.add_get("/files-pri/{path:.*}", slack._file)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    slack.port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
            slack._http, slack._tg = http, tg
            yield slack
            tg.cancel_scope.cancel()
    finally:
        for ws in list(slack._sockets):
            await ws.close()
        await runner.cleanup()
