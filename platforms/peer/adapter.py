"""The peer HTTP API actor (SPEC section 5): an aiohttp server in our task group.

A chat request is admitted like any platform message (the Idempotency-Key is its platform
id), then waits for its turn's outcome, which the session actor hands to this adapter's
outlet side. Turns of one session are serialized by its session actor, so concurrent requests
to one session are answered in admission order, one turn each.

The auth middleware is the API's front door (SPEC 14, docs/SECURITY.md): probes pass; with
tokens set, every other request needs one, a valid token is never refused for other clients'
failures, an address that keeps failing auth is refused for a while, and a token past its
request rate waits; a token reaches only the sessions its globs match (else 404, as if the
session did not exist). Without tokens (loopback only) a request must look local: a
loopback ``Host`` and ``Origin`` and JSON POSTs. The decisions are
:mod:`platforms.peer.limits`'; :mod:`platforms._guarded` guards the socket itself.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest

from gateway.config_peer import PeerConfig, PeerToken
from gateway.errors import ConversationClosed
from gateway.messages import CONTROL_COMMANDS, ChunkState, Inbound, StoredMessage, TurnOutcome
from gateway.ports import Asker, CallReads, Intake, Ledger, Transcripts, Watch
from platforms import _fetch
from platforms._guarded import ConnectionGuard, GuardedHandler, guarded_serving
from platforms.peer import convert, limits, responses, streaming
from platforms.peer._approvals import add_approvals_route
from platforms.peer._auth import AuthHolder
from platforms.peer._files import BodyReader, attachment_response
from platforms.peer._in_flight import InFlight
from platforms.peer._loopback import not_local
from platforms.peer._reload_route import Reload, add_reload_route
from platforms.peer._statistics import Counts, PeerStatistics
from platforms.peer._tool_servers import ToolStates, readyz_tools
from platforms.peer.admin import Admin, AdminDeps
from platforms.peer.attachments import Files, chat_attachments, content_parts
from platforms.peer.errors import error_middleware, json_error
from platforms.peer.streaming import SSE_HEADERS, LiveReply, Watched, finish

log = logging.getLogger(__name__)

#: When a waiting request also looks in the store for its turn's outcome: after 2 s, then
#: twice as long each time, at most every 30 s.
REPLY_CHECK_S = 2.0
REPLY_CHECK_MAX_S = 30.0
#: A streamed completion whose turn takes longer than this sends its headers and then an SSE
#: comment this often, so proxies and clients do not time the connection out.
SSE_KEEPALIVE_S = 15.0
#: At the stop, how long the requests woken from their wait have to answer (503, a stream's
#: error event) before what is left is cancelled; then how long the listener's close may
#: take. The gateway's stop margin holds both (gateway.app.STOP_MARGIN_S).
STOP_GRACE_S = 0.3
STOP_DEADLINE_S = 1.0
# The A2A agent card is public, as discovery needs (it says how to authenticate).
_OPEN_ROUTES = frozenset(
    {"/healthz", "/readyz", "/.well-known/agent-card.json", "/.well-known/agent.json"}
)
#: request[_TOKEN]: the PeerToken a request authenticated with (absent without tokens).
_TOKEN = web.RequestKey("botmux.peer.token", PeerToken)


class _Waiters:
    """Requests waiting for their turn's outcome, by platform message id."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[anyio.Event]] = {}
        self._outcomes: dict[str, TurnOutcome] = {}

    def expect(self, pmid: str) -> anyio.Event:
        event = anyio.Event()
        self._waiting.setdefault(pmid, []).append(event)
        return event

    def resolve(self, pmid: str, outcome: TurnOutcome) -> None:
        events = self._waiting.get(pmid)
        if events:
            self._outcomes[pmid] = outcome
            for event in events:
                event.set()

    def take(self, pmid: str, event: anyio.Event) -> TurnOutcome | None:
        events = self._waiting.get(pmid, [])
        if event in events:
            events.remove(event)
        outcome = self._outcomes.get(pmid)
        if not events:
            self._waiting.pop(pmid, None)
            self._outcomes.pop(pmid, None)
        return outcome

    def wake_all(self) -> None:
        """The listener stops: every request waiting for an outcome stops waiting (it finds
        none, and answers that the gateway is shutting down)."""
        for events in self._waiting.values():
            for event in events:
                event.set()

    def __len__(self) -> int:
        return len(self._waiting)


@dataclass(frozen=True, slots=True)
class Serving:
    """What the peer listener serves, handed over when it starts (built after every part it
    reads: the intake, readiness, metrics and the console's view of the gateway)."""

    intake: Intake
    ready: Callable[[], dict[str, bool]]
    metrics: Callable[[], Awaitable[bytes]]
    admin: AdminDeps | None = None
    #: The MCP servers' states (SPEC 15), shown by /readyz; they never make it 503.
    tools: ToolStates = list


class PeerAdapter:
    platform = "peer"
    _intake: Intake  # given when it starts (``Serving``), like readiness and metrics
    _ready: Callable[[], dict[str, bool]]
    _metrics: Callable[[], Awaitable[bytes]]
    _tools: ToolStates

    def __init__(
        self,
        config: PeerConfig,
        *,
        ledger: Ledger,
        transcripts: Transcripts,
        calls: CallReads,
        clock: Callable[[], float] = time.monotonic,
        live: Callable[[], PeerConfig] | None = None,
        reload: Reload | None = None,
        max_attachment_bytes: int = 20 * 1024 * 1024,
    ) -> None:
        self._config = config  # what is read at start: listen, body size, connections
        self._auth = AuthHolder(live or (lambda: config), clock=clock)  # tokens: live
        self._reload = reload
        self._max_file = max_attachment_bytes
        self._bodies = BodyReader(config.max_body_bytes)
        self._ledger = ledger
        self._transcripts = transcripts
        self._calls = calls
        self._waiters = _Waiters()
        self._pmids: dict[int, str] = {}
        self._watched: dict[str, Watched] = {}  # by platform message id
        self._in_flight = InFlight()  # every request, answered 503 at the stop
        self._guard = ConnectionGuard(
            header_timeout_s=config.header_timeout_s, max_connections=config.max_connections
        )
        self.sse_keepalive_s = SSE_KEEPALIVE_S
        self._registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "botmux_peer_requests",
            "Peer API responses, by token name (never the token) and status",
            ["token", "status"],
            registry=self._registry,
        )
        self.port: int | None = None
        self._mounted: list[Callable[[web.Application], None]] = []
        self._counts = Counts()
        # The operator console and its admin API (platforms.peer.admin), when served.
        self.admin: Admin | None = None

    def __repr__(self) -> str:
        return f"<PeerAdapter {self._config.listen} waiting={len(self._waiters)}>"

    def statistics(self) -> PeerStatistics:
        return self._counts.snapshot(
            waiting=len(self._waiters),
            locked_out_refusals=self._auth.current().failures.statistics().refused,
            guard=self._guard,
        )

    # -- outlet --------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return [text]

    def delivered_as(self, row: StoredMessage) -> str | None:
        # The HTTP response is the delivery, so the answer's commit records it: one write
        # less per turn than recording it after. A reply nobody waits for (the client left,
        # or the turn was resumed after a restart) stays readable in the transcript and
        # through a retry with the same Idempotency-Key.
        return f"http:{row.id}"

    async def deliver(self, outcome: TurnOutcome) -> None:
        if outcome.interrupted:  # its rows are still pending: their requests wait on
            return
        for row in outcome.rows:  # a merged turn (SPEC 10) answers the request of each row
            pmid = self._pmids.pop(row, None)
            if pmid is not None:
                self._waiters.resolve(pmid, outcome)
        for chunk in outcome.chunks:  # pending: stored before the answer recorded delivery
            if chunk.state != ChunkState.DELIVERED:  # (a restart's redelivery of those)
                await self._ledger.delivered(chunk.id, f"http:{chunk.user_row_id}")

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        yield

    # Peer bytes arrive inline and are stored at admission; https image URLs go to the model
    # as they are: nothing of the peer API is ever fetched.
    fetch = _fetch.unsupported

    def asker(self, row: StoredMessage) -> Asker | None:
        # Only a streaming chat request can be asked (SPEC 15): a plain chat, a completion
        # or a response cannot, and its turn is offered no tool that needs a yes.
        watched = self._watched.get(row.platform_message_id or "")
        return watched if watched is not None and watched.asking else None

    def watching(self, row: StoredMessage) -> Watch | None:
        watched = self._watched.get(row.platform_message_id or "")
        return watched.watch() if watched is not None else None

    # -- the server ----------------------------------------------------------------------

    def mount(self, routes: Callable[[web.Application], None], paths: dict[str, Any]) -> None:
        """Serve more routes on this listener, behind its auth and limits (A2A's), before
        ``run``; ``paths``: their part of the OpenAPI document."""
        self._mounted.append(routes)
        self._auth.mount_paths(paths)

    def token_scope(self, request: web.Request) -> bytes:
        """What a request's ids are scoped to: its token's digest, or nothing without tokens."""
        return self._anon_scope(request)

    def build_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self._config.max_body_bytes,
            middlewares=[self._in_flight.middleware, error_middleware, self._auth_middleware],
        )
        app.router.add_post("/api/sessions/{session_id}/chat", self._chat)
        app.router.add_get("/api/sessions/{session_id}/messages", self._messages)
        app.router.add_delete("/api/sessions/{session_id}", self._delete)
        app.router.add_get("/api/sessions/{session_id}/attachments/{sha256}", self._attachment)
        add_approvals_route(app, self, who=_token_name)
        app.router.add_post("/v1/chat/completions", self._completions)
        responses.add_routes(app.router, self)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model_id}", self._model)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_route)
        app.router.add_get("/openapi.json", self._openapi_route)
        for routes in self._mounted:
            routes(app)
        if self._reload is not None:
            add_reload_route(app, self._reload, who=_who)
        if self.admin is not None:
            self.admin.install(app)
        app.on_response_prepare.append(_server_header)
        app.on_response_prepare.append(self._count)
        app.on_response_prepare.append(self._in_flight.prepared)
        return app

    async def _count(self, request: web.Request, response: web.StreamResponse) -> None:
        token = request.get(_TOKEN)
        name = token.name if isinstance(token, PeerToken) else "-"
        self._requests.labels(name, str(response.status)).inc()

    def serve(self, serving: Serving) -> None:
        """What the listener serves from now on (``run`` calls it; tests that build the app
        without a listener too)."""
        self._intake = serving.intake
        self._ready = serving.ready
        self._metrics = serving.metrics
        self._tools = serving.tools
        if serving.admin is not None:
            tokens = lambda: self._auth.current().config.tokens  # noqa: E731
            self.admin = Admin(
                serving.admin, token_of=self._token_of, tokens=tokens, claim=self.claim
            )

    async def run(
        self,
        serving: Serving,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen and serve: started last, when every part ``serving`` reads is built."""
        self.serve(serving)
        # handler_cancellation: a client that hangs up while it waits for its turn cancels its
        # handler, which lets go of the body, the text and its waiter (the turn itself runs
        # on in its session actor, and its reply is stored: a retry with the same
        # Idempotency-Key gets it).
        async with guarded_serving(
            self.build_app(),
            self._config.host,
            self._config.port,
            self._guard,
            idle_timeout_s=self._config.idle_timeout_s,
            handler_cancellation=True,
            stop_deadline_s=STOP_DEADLINE_S,
        ) as port:
            self.port = port
            log.info(
                "peer API listening",
                extra={
                    "listen": f"{self._config.host}:{self.port}",
                    "max_connections": self._guard.cap,
                },
            )
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                # The drain is over: what requests still wait on stays pending in the store
                # (or waits on a database that stopped answering). Each is answered now: a
                # turn's waiter 503 (a stream an error event), whatever is left cancelled.
                self._waiters.wake_all()
                with anyio.CancelScope(shield=True):
                    await self._in_flight.stop(STOP_GRACE_S)
                if self.admin is not None:
                    self.admin.close()  # the console's event streams end before the server

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self._counts.requests += 1
        auth = self._auth.current()  # one config's tokens for the whole decision
        if request.path in _OPEN_ROUTES or Admin.checks_itself(request.path):
            # /readyz with a token is checked as any request: it shows a token holder more.
            bears = request.path == "/readyz" and "Authorization" in request.headers
            if not (auth.digests and bears):
                return await handler(request)  # probes, the console page and its stream
        if not auth.digests:
            refusal = not_local(request, self._config.host)
            return refusal if refusal is not None else await handler(request)
        # The token first, in constant time: a valid token is served whatever other clients
        # sharing its address (a proxy, a NAT) have failed.
        index = limits.match_bearer(request.headers.get("Authorization", ""), auth.digests)
        if index is not None:
            token = auth.config.tokens[index]
            request[_TOKEN] = token
            verdict = auth.rate.take(index, token.requests_per_min)
            if not verdict.allowed:
                self._counts.rate_limited += 1
                log.info("peer API: token rate limited", extra={"token": token.name})
                return _too_many(verdict, "this token's request rate is used up", "rate_limited")
            if not self.claim(request, token):
                return self._over_share(token)
            return await handler(request)
        # An unknown route, or a method a route does not take (a CORS preflight's OPTIONS),
        # is no attempt at a credential: answered (404, 405) and not counted.
        if request.match_info.http_exception is not None:
            return await handler(request)
        address = limits.client_key(
            limits.client_address(
                request.remote, request.headers.getall("X-Forwarded-For", []), auth.proxies
            )
        )
        verdict = auth.failures.check(address)
        if not verdict.allowed:
            self._counts.rate_limited += 1
            return _too_many(
                verdict,
                "too many failed authentication attempts from this address",
                "too_many_auth_failures",
            )
        self._counts.unauthorized += 1
        if auth.failures.record_failure(address):
            log.warning(
                "peer auth: too many failures, refusing the address for a while",
                extra={"client": address, "window_s": auth.failures.window_s},
            )
        response = json_error(401, "a valid bearer token is required", "unauthorized")
        response.headers["WWW-Authenticate"] = 'Bearer realm="botmux"'
        return response

    def claim(self, request: web.Request, token: PeerToken) -> bool:
        """Count the request's connection as ``token``'s: False when the token holds its
        share (``max_connections``, else half the listener's cap) already, so that one
        token's waiting requests and streams never take every slot from the others."""
        protocol = request.protocol
        if not isinstance(protocol, GuardedHandler):  # an app served without the guard
            return True
        return protocol.claim(token.name, token.max_connections or max(1, self._guard.cap // 2))

    def _over_share(self, token: PeerToken) -> web.Response:
        self._counts.rate_limited += 1
        self._guard.quiet.warning(
            "peer API: a token holds its share of the connections; refused", token=token.name
        )
        response = _too_many(
            limits.Verdict(False, 1.0),
            "this token holds its share of the open connections",
            "too_many_connections",
        )
        response.force_close()  # this connection is no slot of the token's
        return response

    def _token_of(self, request: web.Request) -> PeerToken | None:
        token = request.get(_TOKEN)
        return token if isinstance(token, PeerToken) else None

    def _session(self, request: web.Request, session_id: str) -> str:
        """``session_id``, if the request's token may use it; else 404, as if it did not
        exist (no existence oracle): a named session in the token's globs, an anonymous one
        only if this token made it, whatever its globs. Without tokens every session is
        reachable."""
        session_id = convert.check_session_id(session_id)
        token = request.get(_TOKEN)
        if isinstance(token, PeerToken) and not (
            convert.owns(self._anon_scope(request), session_id)
            if convert.anonymous(session_id)
            else any(fnmatch.fnmatchcase(session_id, glob) for glob in token.sessions)
        ):
            log.info("peer API: a session outside the token's scope", extra={"token": token.name})
            raise convert.BadRequest("no such session", status=404, code="not_found")
        return session_id

    def _by(self, request: web.Request) -> str:
        """Who asks, for the log of a deletion: the token's name, never the token."""
        token = request.get(_TOKEN)
        return f"peer API, token {token.name}" if isinstance(token, PeerToken) else "peer API"

    def _anon_scope(self, request: web.Request) -> bytes:
        """What an anonymous completion's Idempotency-Key is scoped to: the token (its
        digest, a secret, so nobody can work the session id out), or nothing without tokens."""
        token = request.get(_TOKEN)
        if isinstance(token, PeerToken):
            return limits.token_digests((token.token,))[0]
        return b""

    async def _read_json(self, request: web.Request) -> Any:
        return await self._bodies.json(request)

    async def _run_turn(
        self,
        session_id: str,
        text: str,
        idempotency_key: str | None,
        *,
        retry: bool = False,
        reply: LiveReply | None = None,
        response_format: Mapping[str, Any] | None = None,
        files: Files | None = None,
        instructions: str | None = None,
    ) -> TurnOutcome:
        """Admit the message and wait for its outcome; ``reply``: stream the answer into it
        while the model writes it; ``response_format``: ask the model for it;
        ``instructions``: an extra system message for this turn.

        A repeat under an Idempotency-Key must carry the same message (else 422) and gets the
        stored outcome; if that was a retryable failure, the first repeat runs the turn once
        more (``retry``) and later repeats get that second outcome.
        """
        if not self._intake.accepting:
            raise ConversationClosed("draining")
        conversation = convert.conversation_key(session_id)
        pmid = convert.platform_message_id(session_id, idempotency_key, retry=retry)
        event = self._waiters.expect(pmid)
        watched = self._watched.get(pmid) or self._watched.setdefault(
            pmid, Watched(response_format, instructions)
        )
        watched.requests += 1
        if reply is not None:
            watched.replies.append(reply)
        try:
            refs = tuple(files.refs) if files else ()
            admission = await self._intake.admit(
                Inbound("peer", conversation, pmid, text, attachments=refs),
                files.blobs if files else None,
            )
            if files:
                files.blobs.clear()  # stored: not held while the client waits for its turn
            row = admission.row
            if reply is not None:
                reply.row = row.id
            if admission.duplicate and row.content != text:
                raise convert.BadRequest(
                    "this Idempotency-Key was used with another message; use a new key",
                    status=422,
                    code="idempotency_key_reused",
                )
            if admission.duplicate and row.state != "pending":
                settled = await self._transcripts.outcome(row.id)
                if settled is not None:
                    failure = settled.failure
                    if failure is not None and failure.retryable and not retry:
                        return await self._run_turn(
                            session_id,
                            text,
                            idempotency_key,
                            retry=True,
                            reply=reply,
                            response_format=response_format,
                            files=files,
                            instructions=instructions,
                        )
                    return settled
            self._pmids[row.id] = pmid
            await self._wait_outcome(pmid, row.id, event)
        finally:
            outcome = self._waiters.take(pmid, event)
            watched.requests -= 1
            if reply in watched.replies:
                watched.replies.remove(reply)
            if watched.requests == 0:
                self._watched.pop(pmid, None)
        if outcome is None:  # woken by the stop (wake_all): the turn stays pending
            raise ConversationClosed("draining")
        self._counts.turns += 1
        return outcome

    async def _wait_outcome(self, pmid: str, row_id: int, event: anyio.Event) -> None:
        """Until the turn's outcome arrives: delivered here (the turn ran on this node, or
        its node notified this one), or, as a backstop for a lost notification or a node
        that died after answering, found in the store."""
        wait_s = REPLY_CHECK_S
        while not event.is_set():
            with anyio.move_on_after(wait_s):
                await event.wait()
            wait_s = min(wait_s * 2, REPLY_CHECK_MAX_S)  # a long turn costs few reads
            if not event.is_set() and (settled := await self._transcripts.outcome(row_id)):
                self._pmids.pop(row_id, None)
                self._waiters.resolve(pmid, settled)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        session_id = self._session(request, request.match_info["session_id"])
        async with self._bodies.turn(request):  # the body and its files are freed after it
            ask = convert.chat_request(await self._read_json(request))
            files = chat_attachments(ask.attachments, self._max_file)
        text, stream = ask.text, ask.stream
        del ask
        if text.startswith("/") and text[1:].split(" ", 1)[0] in CONTROL_COMMANDS:
            name, _, args = text[1:].partition(" ")
            answer = await self._intake.command(
                "peer", convert.conversation_key(session_id), name, args.strip()
            )
            body = convert.chat_response(session_id, answer, None)
            if not convert.wants_stream(stream, request.headers.get("Accept", "")):
                return web.json_response(body)
            response = web.StreamResponse(headers=SSE_HEADERS)
            await response.prepare(request)
            await finish(response, convert.sse(body, "message"))
            return response
        key = request.headers.get("Idempotency-Key")
        if not convert.wants_stream(stream, request.headers.get("Accept", "")):
            outcome = await self._run_turn(session_id, text, key, files=files)
            return web.json_response(
                convert.chat_response(session_id, outcome.reply, outcome.failure)
            )
        return await self._chat_stream(request, session_id, text, key, files)

    async def _chat_stream(
        self, request: web.Request, session_id: str, text: str, key: str | None, files: Files
    ) -> web.StreamResponse:
        def run(reply: LiveReply) -> Awaitable[TurnOutcome]:
            return self._run_turn(session_id, text, key, reply=reply, files=files)

        return await streaming.chat_stream(request, session_id, run, self.sse_keepalive_s)

    async def _messages(self, request: web.Request) -> web.Response:
        session_id = self._session(request, request.match_info["session_id"])
        limit, before = convert.page_params(request.query)
        page = await self._transcripts.page(convert.conversation_key(session_id), limit, before)
        older = page.rows[0].id if page.more and page.rows else None
        return web.json_response(convert.transcript_json(page.rows, next_before=older))

    async def _attachment(self, request: web.Request) -> web.Response:
        session_id = self._session(request, request.match_info["session_id"])
        key = convert.conversation_key(session_id)
        return await attachment_response(self._transcripts, key, request.match_info["sha256"])

    async def _delete(self, request: web.Request) -> web.Response:
        session_id = self._session(request, request.match_info["session_id"])
        removed = await self._intake.delete(
            convert.conversation_key(session_id), by=self._by(request)
        )
        if removed is None:
            return json_error(404, f"no session {session_id}", "not_found")
        return web.json_response({"session_id": session_id, "deleted": True, "messages": removed})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        async with self._bodies.turn(request):  # the body and its files are freed after it
            parsed = convert.completion_request(await self._read_json(request))
            text, files = parsed.text, None
            if parsed.parts is not None:
                text, files = content_parts(parsed.parts, self._max_file)
                parsed = dataclasses.replace(parsed, text=text, parts=None)
        key = request.headers.get("Idempotency-Key")
        header = request.headers.get("X-Botmux-Session")
        session_id = convert.completion_session(
            header, parsed.user, idempotency_key=key, scope=self._anon_scope(request)
        )
        if header is not None or parsed.user is not None:
            # An anonymous session made here is the token's own (its id names the token); a
            # named one must be in the token's scope, and an anon- one the token's.
            session_id = self._session(request, session_id)
        if not parsed.stream:
            outcome = await self._run_turn(
                session_id, text, key, response_format=parsed.response_format, files=files
            )
            if outcome.failure is not None:
                return streaming.completion_failure(outcome)
            return web.json_response(
                convert.completion_json(
                    outcome.user_row_id, outcome.reply, parsed.model, outcome.usage
                )
            )
        return await self._stream(request, session_id, parsed, key, files)

    async def _stream(
        self,
        request: web.Request,
        session_id: str,
        parsed: convert.CompletionRequest,
        key: str | None,
        files: Files | None,
    ) -> web.StreamResponse:
        def run(reply: LiveReply) -> Awaitable[TurnOutcome]:
            return self._run_turn(
                session_id,
                parsed.text,
                key,
                reply=reply,
                response_format=parsed.response_format,
                files=files,
            )

        return await streaming.completion_stream(request, parsed, run, self.sse_keepalive_s)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [convert.model_json()]})

    async def _model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["model_id"]
        if model_id != convert.MODEL_NAME:
            return json_error(
                404, f"no model {model_id[:100]!r}; botmux serves one, botmux", "model_not_found"
            )
        return web.json_response(convert.model_json())

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        checks = self._ready()
        ready = all(checks.values())  # a tool server down is no reason to route around us
        detail = _TOKEN in request or (
            not self._auth.current().digests and not_local(request, self._config.host) is None
        )
        tools = readyz_tools(self._tools(), detail=detail)
        body = {"ready": ready, "checks": checks, "tools": tools}
        return web.json_response(body, status=200 if ready else 503)

    async def _openapi_route(self, request: web.Request) -> web.Response:
        return web.Response(body=self._auth.current().openapi, content_type="application/json")

    async def _metrics_route(self, request: web.Request) -> web.Response:
        return web.Response(
            body=await self._metrics() + generate_latest(self._registry),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    # aiohttp would announce its and Python's exact versions to every client.
    response.headers["Server"] = "botmux"


def _too_many(verdict: limits.Verdict, message: str, code: str) -> web.Response:
    response = json_error(429, f"{message}; retry after {verdict.retry_after_header} s", code)
    response.headers["Retry-After"] = verdict.retry_after_header
    return response


def _token_name(request: web.Request) -> str:
    """The name of the request's token ("" without tokens): who answered an approval."""
    token = request.get(_TOKEN)
    return token.name if isinstance(token, PeerToken) else ""


def _who(request: web.Request) -> str:
    """Who a request is, for the log: its token's name (never the token), else loopback."""
    return _token_name(request) or "loopback"
