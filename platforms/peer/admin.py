"""The admin API and the operator console page (SPEC 13), on the peer listener.

``/console/`` is a static page (HTML, CSS, a small script shipped in the package: no build
step, no external asset); it holds no secret and is served without a token. Everything it
shows comes from ``/api/admin/...``, JSON behind the peer tokens like the rest of the API
(the adapter's auth middleware; without tokens, its loopback rules), documented in the
OpenAPI document and usable without the page.

Live updates are server-sent events at ``GET /api/admin/events``. A browser's EventSource
cannot send an ``Authorization`` header, so that route takes a *ticket* instead: minted by
``POST /api/admin/events/ticket`` (behind the token), valid for :data:`TICKET_TTL_S`,
signed with a key this process drew at start (HMAC-SHA256), naming the token by its name
(a reload that removes the token, or limits it to some sessions, voids its tickets).
The ticket is the only credential ever put in a URL; it opens one stream (single use: a
ticket read from a proxy's log or a browser's history opens nothing), it expires in a
minute, it is not the token, the server keeps no access log, and every log line names a
request's path only, never its query. An open stream is re-checked whenever it wakes (a
change, a reload, every keepalive): once its token is gone or no longer an operator's, it
ends.

Every action (approve, reject, revoke) is reported as :class:`~gateway.events.AdminActed`,
naming who did it: the token's name, or ``loopback`` without tokens.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, Protocol

import anyio
from aiohttp import web

from gateway.config_peer import PeerToken
from gateway.events import AdminActed, Observe
from gateway.messages import (
    ConversationListing,
    OutboxChunk,
    PairingCode,
    RowPage,
    ScheduleRecord,
    StoredMessage,
    schedule_of,
)
from gateway.timeline import Timeline
from platforms.peer._admin_schedules import schedules_json
from platforms.peer._tool_servers import ToolStates, admin_tools
from platforms.peer.convert import BadRequest, page_params, sse
from platforms.peer.streaming import SSE_HEADERS

log = logging.getLogger(__name__)

#: How long an event-stream ticket is good for (the page mints a new one to reconnect).
TICKET_TTL_S = 60.0
#: The event stream sends a comment after this much silence (proxies, dead clients).
EVENTS_KEEPALIVE_S = 15.0
#: After a change, wait this long for the burst to end before sending the overview.
EVENTS_COALESCE_S = 0.25
PAGE_FILES = {"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css"}
PAGE_ROUTES = {
    "/console/": "index.html",
    "/console/app.js": "app.js",
    "/console/app.css": "app.css",
}
#: The page may load only what it is served from: no CDN, no inline script, no framing.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none';"
    " base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
EVENTS_PATH = "/api/admin/events"
MAX_LIMIT = 200
MAX_QUERY = 200
#: A page cursor: the last row's updated_at (as Python prints a float) and key.
CURSOR = r"^[0-9]{1,17}(\.[0-9]{1,17})?~.{1,512}$"
_CURSOR = re.compile(CURSOR, re.DOTALL)
RECENT = 10
OUTBOX_LIMIT = 200


class AdminStore(Protocol):
    """What the admin API reads and changes in the store (both backends have it)."""

    async def search_conversations(
        self, query: str, limit: int, after: tuple[float, str] | None = None
    ) -> list[ConversationListing]: ...

    async def page(self, conversation: str, limit: int, before: int | None) -> RowPage: ...

    async def outbox_chunks(self, limit: int) -> list[OutboxChunk]: ...

    async def outbox_pending(self) -> dict[str, int]: ...

    async def pairing_codes(self) -> list[PairingCode]: ...

    async def approved_users(self) -> list[tuple[str, str, float]]: ...

    async def approve_pairing(self, platform: str, code: str) -> str | None: ...

    async def reject_pairing(self, platform: str, code: str) -> str | None: ...

    async def revoke_user(self, platform: str, user_id: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Live:
    """The running gateway's state, read when the overview is built."""

    ready: Mapping[str, bool]
    live_sessions: int
    queued: Mapping[str, int]  # platform -> turns queued or running
    running: Sequence[str]  # conversations with a turn running
    benched: Sequence[tuple[str, str, str, float]]  # model, masked key, reason, seconds
    node: str | None = None  # several nodes: this one's name
    leases: int | None = None  # several nodes: the conversations this node holds


@dataclass(frozen=True, slots=True)
class AdminDeps:
    """What the composition root hands the peer adapter for the admin API."""

    store: AdminStore
    timeline: Timeline
    live: Callable[[], Live]
    observe: Observe
    #: Several nodes: every node seen (node, started_at, last_seen, alive, conversations).
    nodes: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    #: Every part's ``statistics()`` by part (``store``, ``router``, ``telegram``, ...):
    #: frozen dataclasses of counters and states, no secrets (GET /api/admin/diagnostics).
    statistics: Callable[[], Mapping[str, object]] = dict
    wall: Callable[[], float] = field(default=time.time)
    #: Scheduled messages with their records (SPEC 16; GET /api/admin/schedules).
    schedules: Callable[[], Awaitable[list[ScheduleRecord]]] | None = None
    #: The MCP tool servers' states (SPEC 15; GET /api/admin/tools).
    tools: ToolStates = list


class Tickets:
    """Short-lived signed single-use tickets for the event stream:
    ``<expiry>.<name>.<nonce>.<mac>``, where name is the token's name, base64url (empty: no
    tokens, loopback), and the nonce makes every ticket another (two minted in one second
    for one token are two tickets)."""

    def __init__(self, ttl_s: float = TICKET_TTL_S, wall: Callable[[], float] = time.time):
        self._key = secrets.token_bytes(32)
        self._ttl_s = ttl_s
        self._wall = wall
        self._used: dict[str, float] = {}  # the MACs of redeemed tickets, until they expire

    def __repr__(self) -> str:
        return f"<Tickets ttl_s={self._ttl_s}>"

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def mint(self, name: str) -> str:
        encoded = base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")
        nonce = secrets.token_urlsafe(12)
        body = f"{math.ceil(self._wall() + self._ttl_s)}.{encoded}.{nonce}"
        return f"{body}.{self._mac(body)}"

    def check(self, ticket: str) -> str | None:
        """The token name a valid, unexpired ticket names ("" for loopback); else None."""
        body, _, mac = ticket.rpartition(".")
        expiry, _, named = body.partition(".")
        encoded = named.partition(".")[0]
        if not hmac.compare_digest(self._mac(body).encode(), mac.encode()):
            return None
        if not expiry.isdigit() or int(expiry) < self._wall():
            return None
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()

    def redeem(self, ticket: str) -> str | None:
        """:meth:`check`, once: a ticket already redeemed is refused until it expires (and
        then as expired). What is remembered is bounded by the tickets minted a minute."""
        name = self.check(ticket)
        mac = ticket.rpartition(".")[2]
        if name is None or mac in self._used:
            return None
        now = self._wall()
        self._used = {m: at for m, at in self._used.items() if at >= now}
        self._used[mac] = float(ticket.partition(".")[0])
        return name


def _page(name: str) -> bytes:
    return resources.files("platforms.peer.console").joinpath(name).read_bytes()


def _int(query: Mapping[str, str], name: str, default: int, top: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= top:
        raise BadRequest(f"{name} must be an integer from 1 to {top}", param=name)
    return int(raw)


def _cursor(raw: str | None) -> tuple[float, str] | None:
    if raw is None:
        return None
    if not _CURSOR.match(raw):
        raise BadRequest("cursor must be a next_cursor this API returned", param="cursor")
    stamp, _, key = raw.partition("~")
    return float(stamp), key


def summary_json(c: ConversationListing) -> dict[str, Any]:
    return {
        "key": c.key,
        "platform": c.platform,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
        "messages": c.messages,
        "pending": c.pending,
        "last_failure": c.last_failure,
        "last_failure_at": c.last_failure_at,
    }


def attachment_json(item: object) -> dict[str, Any]:
    """An attachment reference (SPEC 9: name, type, size, sha256), whatever shape it has."""
    fields = {
        "name": ("name", "filename"),
        "content_type": ("content_type", "mime_type", "type"),
        "size": ("size", "size_bytes"),
        "sha256": ("sha256",),
    }
    out: dict[str, Any] = {}
    for key, names in fields.items():
        value = next((getattr(item, n) for n in names if getattr(item, n, None) is not None), None)
        out[key] = value if isinstance(value, int | str) else None
    return out


def message_json(row: StoredMessage) -> dict[str, Any]:
    attachments = getattr(row, "attachments", None) or ()
    return {
        "id": row.id,
        "role": row.role,
        "content": row.shown,  # a voice note's transcript too (SPEC 9)
        "state": row.state,
        "created_at": row.created_at,
        "failure": row.failure,
        "attachments": [attachment_json(a) for a in attachments],
        # A tool step's calls; a tool row's call and tool (SPEC 15).
        "tool_calls": json.loads(row.tool_calls) if row.tool_calls else None,
        "call_id": row.call_id,
        "tool": row.tool,
        "scheduled": schedule_of(row.platform_message_id) if row.role == "user" else None,
    }


def chunk_json(c: OutboxChunk) -> dict[str, Any]:
    return {
        "id": c.id,
        "conversation": c.conversation,
        "platform": c.platform,
        "state": str(c.state),
        "seq": c.seq,
        "text": c.text[:500],
        "created_at": c.created_at,
    }


def _fields(stats: object) -> dict[str, Any]:
    """A part's statistics (a dataclass, nested ones included) as JSON's object."""
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        return dataclasses.asdict(stats)
    raise TypeError(f"statistics are a dataclass, not {type(stats).__name__}")


def _benched_json(benched: Sequence[tuple[str, str, str, float]]) -> list[dict[str, Any]]:
    return [
        {
            "model": model,
            "key": key,
            "reason": reason,
            "seconds_left": None if math.isinf(seconds) else round(seconds, 1),
        }
        for model, key, reason, seconds in benched
    ]


class Admin:
    """The admin routes: built by the peer adapter when the composition root wired it."""

    def __init__(
        self,
        deps: AdminDeps,
        *,
        token_of: Callable[[web.Request], PeerToken | None],
        tokens: Callable[[], Sequence[PeerToken]],
        claim: Callable[[web.Request, PeerToken], bool] = lambda request, token: True,
    ) -> None:
        self._deps = deps
        self._token_of = token_of  # the token a request authenticated with (None: no tokens)
        self._tokens = tokens  # the current peer.tokens (a reload changes them)
        self._claim = claim  # counts a stream's connection as its token's (the adapter's)
        self.tickets = Tickets(wall=deps.wall)
        self._pages = {name: _page(name) for name in PAGE_FILES}
        self.keepalive_s = EVENTS_KEEPALIVE_S
        self._streams: set[anyio.CancelScope] = set()  # the event streams open

    def __repr__(self) -> str:
        return f"<Admin streams={self.streams}>"

    @property
    def streams(self) -> int:
        return len(self._streams)

    def close(self) -> None:
        """End every event stream (the server stops): each ends cleanly, at once, instead
        of holding the shutdown up until its deadline."""
        for scope in self._streams:
            scope.cancel()

    def _who(self, request: web.Request) -> str:
        """Who a request acts as, for the operator log: its token's name (never the token),
        or "loopback" without tokens."""
        token = self._token_of(request)
        return token.name if token is not None else "loopback"

    def _operator(self, request: web.Request) -> bool:
        """Whether the request may use the admin API: no tokens (loopback), or a token that
        may use every session."""
        token = self._token_of(request)
        return token is None or "*" in token.sessions

    @staticmethod
    def checks_itself(path: str) -> bool:
        """The routes the adapter's auth middleware leaves to this module: the static page
        (open), and the event stream (its ticket, checked here; a refused ticket is not
        counted as a failed authentication: an expired one is what a reconnecting page has,
        and no one guesses an HMAC)."""
        return path in PAGE_ROUTES or path == EVENTS_PATH

    def install(self, app: web.Application) -> None:
        """Add the page's and the admin API's routes, and the operators-only rule."""
        # Path parameters take any character but "/" (a key has ":", a code may be typed
        # with braces by a fuzzer: its answer is 404 from the handler, not an unknown route).
        for path in PAGE_ROUTES:
            app.router.add_get(path, self._page)
        get, post = app.router.add_get, app.router.add_post
        get("/api/admin/overview", self._overview)
        get("/api/admin/diagnostics", self._diagnostics)
        get("/api/admin/conversations", self._conversations)
        get("/api/admin/conversations/{key:[^/]+}/messages", self._messages)
        get("/api/admin/outbox", self._outbox)
        get("/api/admin/schedules", self._schedules)
        get("/api/admin/tools", self._tools)
        get("/api/admin/pairing", self._pairing)
        post("/api/admin/pairing/{platform:[^/]+}/{code:[^/]+}/approve", self._approve)
        post("/api/admin/pairing/{platform:[^/]+}/{code:[^/]+}/reject", self._reject)
        post("/api/admin/users/{platform:[^/]+}/{user_id:[^/]+}/revoke", self._revoke)
        post("/api/admin/events/ticket", self._ticket)
        get(EVENTS_PATH, self._events)  # its ticket was minted by an operator
        app.middlewares.append(self._operators_only)

    @web.middleware
    async def _operators_only(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The admin API (``/api/admin/...``, the reload route too) sees and changes
        everything: a token limited to some sessions (its ``sessions`` globs lack ``*``) is
        no operator's, and gets 403. Runs after the auth middleware."""
        admin = request.path.startswith("/api/admin/") and request.path != EVENTS_PATH
        if admin and not self._operator(request):
            raise BadRequest(
                "this token is limited to some sessions; the admin API needs a token"
                ' whose sessions include "*"',
                status=403,
                code="forbidden",
            )
        return await handler(request)

    async def _page(self, request: web.Request) -> web.Response:
        name = PAGE_ROUTES[request.path]
        # The page says whether to ask for a token (no secret: /openapi.json says as much),
        # so opening it never costs a failed authentication.
        auth = b"token" if self._tokens() else b"loopback"
        return web.Response(
            body=self._pages[name].replace(b"{{auth}}", auth),
            content_type=PAGE_FILES[name],
            charset="utf-8",
            headers=PAGE_HEADERS,
        )

    # -- reads -----------------------------------------------------------------------------

    async def overview(self) -> dict[str, Any]:
        deps, live = self._deps, self._deps.live()
        store = deps.store
        series = deps.timeline.series()
        cluster = None
        if deps.nodes is not None:
            nodes = await deps.nodes()
            cluster = {"node": live.node, "leases": live.leases, "nodes": nodes}
        return {
            "version": deps.timeline.version,
            "now": deps.wall(),
            "ready": dict(live.ready),
            "live_sessions": live.live_sessions,
            "live_turns": len(live.running),
            "running": sorted(live.running),
            "queued": dict(live.queued),
            "outbox_pending": await store.outbox_pending(),
            "benched": _benched_json(live.benched),
            "pairing_pending": len(await store.pairing_codes()),
            "recent": [summary_json(c) for c in await store.search_conversations("", RECENT)],
            "series": {
                "start": series.start,
                "minute_s": series.minute_s,
                "turns": list(series.turns),
                "failures": list(series.failures),
                "model_calls": list(series.model_calls),
                "model_failures": list(series.model_failures),
            },
            "cluster": cluster,
        }

    async def _overview(self, request: web.Request) -> web.Response:
        return web.json_response(await self.overview())

    async def _diagnostics(self, request: web.Request) -> web.Response:
        parts = self._deps.statistics()
        return web.json_response({name: _fields(stats) for name, stats in parts.items()})

    async def _conversations(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "")
        if len(query) > MAX_QUERY:
            raise BadRequest(f"q is at most {MAX_QUERY} characters", param="q")
        limit = _int(request.query, "limit", 50, MAX_LIMIT)
        after = _cursor(request.query.get("cursor"))
        rows = await self._deps.store.search_conversations(query, limit + 1, after)
        page, more = rows[:limit], len(rows) > limit
        last = page[-1] if page else None
        return web.json_response(
            {
                "conversations": [summary_json(c) for c in page],
                "next_cursor": f"{last.updated_at!r}~{last.key}" if more and last else None,
            }
        )

    async def _messages(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        limit, before = page_params(request.query)
        page = await self._deps.store.page(key, limit, before)
        if not page.rows and before is None:
            raise BadRequest(f"no conversation {key[:200]!r}", status=404, code="not_found")
        older = page.rows[0].id if page.more and page.rows else None
        return web.json_response(
            {"conversation": key, "messages": [message_json(r) for r in page.rows], "next": older}
        )

    async def _outbox(self, request: web.Request) -> web.Response:
        chunks = await self._deps.store.outbox_chunks(OUTBOX_LIMIT)
        return web.json_response({"chunks": [chunk_json(c) for c in chunks]})

    async def _schedules(self, request: web.Request) -> web.Response:
        records = await self._deps.schedules() if self._deps.schedules is not None else []
        return web.json_response(schedules_json(records))

    async def _tools(self, request: web.Request) -> web.Response:
        return web.json_response(admin_tools(self._deps.tools()))

    async def _pairing(self, request: web.Request) -> web.Response:
        store = self._deps.store
        return web.json_response(
            {
                "pending": [
                    {
                        "platform": c.platform,
                        "code": c.code,
                        "user_id": c.user_id,
                        "label": c.label,
                        "created_at": c.created_at,
                        "expires_at": c.expires_at,
                    }
                    for c in await store.pairing_codes()
                ],
                "approved": [
                    {"platform": platform, "user_id": user_id, "approved_at": at}
                    for platform, user_id, at in await store.approved_users()
                ],
            }
        )

    # -- actions ---------------------------------------------------------------------------

    def _acted(
        self,
        request: web.Request,
        action: Literal["approve", "reject", "revoke"],
        target: str,
        done: bool,
    ) -> None:
        platform = request.match_info["platform"]
        by = self._who(request)
        self._deps.observe(
            AdminActed(action, by, platform[:64], target[:64], "ok" if done else "unknown")
        )
        if not done:
            raise BadRequest(
                f"no such {'user' if action == 'revoke' else 'pending code'} on {platform[:64]}",
                status=404,
                code="not_found",
            )

    async def _decide(self, request: web.Request, approve: bool) -> web.Response:
        platform = request.match_info["platform"]
        code = request.match_info["code"].strip().upper()
        store = self._deps.store
        decide = store.approve_pairing if approve else store.reject_pairing
        user = await decide(platform, code)
        self._acted(request, "approve" if approve else "reject", code, user is not None)
        return web.json_response(
            {"platform": platform, "code": code, "user_id": user, "approved": approve}
        )

    async def _approve(self, request: web.Request) -> web.Response:
        return await self._decide(request, True)

    async def _reject(self, request: web.Request) -> web.Response:
        return await self._decide(request, False)

    async def _revoke(self, request: web.Request) -> web.Response:
        platform, user_id = request.match_info["platform"], request.match_info["user_id"]
        done = await self._deps.store.revoke_user(platform, user_id)
        self._acted(request, "revoke", user_id, done)
        return web.json_response({"platform": platform, "user_id": user_id, "revoked": True})

    # -- live updates ----------------------------------------------------------------------

    async def _ticket(self, request: web.Request) -> web.Response:
        token = self._token_of(request)
        ticket = self.tickets.mint(token.name if token is not None else "")
        return web.json_response({"ticket": ticket, "expires_in_s": TICKET_TTL_S})

    def _operator_named(self, name: str) -> bool:
        """Whether ``name`` (a ticket's) is an operator's token now (or, without tokens,
        the loopback ticket's "")."""
        tokens = self._tokens()
        if not tokens:
            return name == ""
        return any(t.name == name and "*" in t.sessions for t in tokens)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        name = self.tickets.redeem(request.query.get("ticket", ""))
        if name is None or not self._operator_named(name):
            raise BadRequest(
                "a valid ticket is required (POST /api/admin/events/ticket; each opens one stream)",
                status=401,
                code="unauthorized",
                param="ticket",
            )
        token = next((t for t in self._tokens() if t.name == name), None)
        if token is not None and not self._claim(request, token):
            raise BadRequest(
                "this token holds its share of the open connections",
                status=429,
                code="too_many_connections",
            )
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        with anyio.CancelScope() as scope:
            self._streams.add(scope)
            try:
                await self._stream(response, -1, name)
            finally:
                self._streams.discard(scope)
        return response

    async def _stream(self, response: web.StreamResponse, seen: int, name: str) -> None:
        """Overviews as things change, a keepalive in silence; ends once ``name`` is no
        longer an operator's token (a reload wakes every stream: ``ConfigReloaded``)."""
        timeline = self._deps.timeline
        while True:
            changed = False
            with anyio.move_on_after(self.keepalive_s):
                seen = await timeline.wait_changed(seen)
                changed = True
            if not self._operator_named(name):
                log.info("console event stream ended: its token is gone", extra={"token": name})
                return
            if not changed:
                await response.write(b": keepalive\n\n")
                continue
            await response.write(sse(await self.overview(), "overview"))
            await anyio.sleep(EVENTS_COALESCE_S)  # at most a few overviews a second
