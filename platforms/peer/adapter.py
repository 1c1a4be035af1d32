"""The peer HTTP API actor (SPEC section 5): an aiohttp server in our task group.

A chat request is admitted like any platform message (the Idempotency-Key is its platform
id), then waits for its turn's outcome, which the session actor hands to this adapter's
outlet side. Turns of one session are serialized by its session actor, so concurrent requests
to one session are answered in admission order, one turn each.

The auth middleware is the API's front door: probes pass, every other request needs a bearer
token (when tokens are set), an address that keeps failing auth is refused for a while, and a
token past its request rate waits; the decisions are :mod:`platforms.peer.limits`'.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from aiohttp import web

from gateway.config import PeerConfig
from gateway.errors import ConversationClosed
from gateway.messages import CONTROL_COMMANDS, Failure, Inbound, TurnOutcome
from gateway.ports import Intake
from platforms.peer import convert, limits
from platforms.peer.errors import error_middleware, json_error
from platforms.peer.openapi import build_openapi

log = logging.getLogger(__name__)

#: When a waiting request also looks in the store for its turn's outcome: after 2 s, then
#: twice as long each time, at most every 30 s.
REPLY_CHECK_S = 2.0
REPLY_CHECK_MAX_S = 30.0
_OPEN_ROUTES = frozenset({"/healthz", "/readyz"})


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

    def __len__(self) -> int:
        return len(self._waiting)


class PeerAdapter:
    platform = "peer"

    def __init__(
        self,
        config: PeerConfig,
        intake: Intake,
        *,
        ready: Callable[[], dict[str, bool]],
        metrics: Callable[[], Awaitable[bytes]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._intake = intake
        self._ready = ready
        self._metrics = metrics
        self._waiters = _Waiters()
        self._pmids: dict[int, str] = {}
        self._digests = limits.token_digests(config.tokens)
        self._auth_failures = limits.FailureWindow(
            config.auth_fail_limit, config.auth_fail_window_s, clock=clock
        )
        self._token_rate = limits.TokenBuckets(
            config.token_requests_per_min, config.token_burst, clock=clock
        )
        self._openapi = json.dumps(build_openapi(auth=bool(config.tokens))).encode()
        self.port: int | None = None
        self._stats = {"requests": 0, "turns": 0, "unauthorized": 0, "rate_limited": 0}

    def __repr__(self) -> str:
        return f"<PeerAdapter {self._config.listen} waiting={len(self._waiters)}>"

    def statistics(self) -> dict[str, int]:
        return {
            **self._stats,
            "waiting": len(self._waiters),
            "locked_out_refusals": self._auth_failures.statistics()["refused"],
        }

    # -- outlet --------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return [text]

    async def deliver(self, outcome: TurnOutcome) -> None:
        # The HTTP response is the delivery; a reply nobody waits for (the client left, or
        # the turn was resumed after a restart) stays readable in the transcript and through
        # a retry with the same Idempotency-Key.
        pmid = self._pmids.pop(outcome.user_row_id, None)
        if pmid is not None:
            self._waiters.resolve(pmid, outcome)  # answer first: recording is off the reply path
        for chunk in outcome.chunks:
            await self._intake.delivered(chunk.id, f"http:{chunk.user_row_id}")

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        yield

    # -- the server ----------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self._config.max_body_bytes,
            middlewares=[error_middleware, self._auth_middleware],
        )
        app.router.add_post("/api/sessions/{session_id}/chat", self._chat)
        app.router.add_get("/api/sessions/{session_id}/messages", self._messages)
        app.router.add_delete("/api/sessions/{session_id}", self._delete)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_route)
        app.router.add_get("/openapi.json", self._openapi_route)
        app.on_response_prepare.append(_server_header)
        return app

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # A client that hangs up while it waits for its turn cancels its handler, which lets
        # go of the body, the text and its waiter (the turn itself runs on, and its reply
        # is stored: a retry with the same Idempotency-Key gets it).
        runner = web.AppRunner(
            self.build_app(), access_log=None, handle_signals=False, handler_cancellation=True
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._config.host, self._config.port, reuse_address=True)
            await site.start()
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            self.port = sockets[0].getsockname()[1] if sockets else self._config.port
            log.info("peer API listening", extra={"listen": f"{self._config.host}:{self.port}"})
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await runner.cleanup()

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self._stats["requests"] += 1
        if not self._digests or request.path in _OPEN_ROUTES:
            return await handler(request)
        address = limits.client_key(request.remote)
        # A locked-out address is refused before its token is even looked at: answering a
        # right guess with 200 during the lockout would let guessing go on at full speed.
        verdict = self._auth_failures.check(address)
        if not verdict.allowed:
            self._stats["rate_limited"] += 1
            return _too_many(
                verdict,
                "too many failed authentication attempts from this address",
                "too_many_auth_failures",
            )
        index = limits.match_bearer(request.headers.get("Authorization", ""), self._digests)
        if index is None:
            self._stats["unauthorized"] += 1
            if self._auth_failures.record_failure(address):
                log.warning(
                    "peer auth: too many failures, refusing the address for a while",
                    extra={"client": address, "window_s": self._auth_failures.window_s},
                )
            response = json_error(401, "a valid bearer token is required", "unauthorized")
            response.headers["WWW-Authenticate"] = 'Bearer realm="botmux"'
            return response
        verdict = self._token_rate.take(index)
        if not verdict.allowed:
            self._stats["rate_limited"] += 1
            return _too_many(verdict, "this token's request rate is used up", "rate_limited")
        return await handler(request)

    async def _read_json(self, request: web.Request) -> Any:
        raw = await request.read()
        return convert.parse_json(raw)

    async def _run_turn(
        self, session_id: str, text: str, idempotency_key: str | None
    ) -> tuple[int, str, Failure | None]:
        """Admit the message and wait for its outcome: (user row id, reply, failure)."""
        if not self._intake.accepting:
            raise ConversationClosed("draining")
        conversation = convert.conversation_key(session_id)
        pmid = convert.platform_message_id(session_id, idempotency_key)
        event = self._waiters.expect(pmid)
        try:
            admission = await self._intake.admit(
                Inbound(
                    platform="peer", conversation=conversation, platform_message_id=pmid, text=text
                )
            )
            row = admission.row
            if admission.duplicate and row.state != "pending":
                settled = await self._intake.outcome(row.id)
                if settled is not None:
                    return row.id, settled.reply, settled.failure
            self._pmids[row.id] = pmid
            await self._wait_outcome(pmid, row.id, event)
        finally:
            outcome = self._waiters.take(pmid, event)
        assert outcome is not None
        self._stats["turns"] += 1
        return outcome.user_row_id, outcome.reply, outcome.failure

    async def _wait_outcome(self, pmid: str, row_id: int, event: anyio.Event) -> None:
        """Until the turn's outcome arrives: delivered here (the turn ran on this node, or
        its node notified this one), or, as a backstop for a lost notification or a node
        that died after answering, found in the store."""
        wait_s = REPLY_CHECK_S
        while not event.is_set():
            with anyio.move_on_after(wait_s):
                await event.wait()
            wait_s = min(wait_s * 2, REPLY_CHECK_MAX_S)  # a long turn costs few reads
            if not event.is_set() and (settled := await self._intake.outcome(row_id)):
                self._pmids.pop(row_id, None)
                self._waiters.resolve(pmid, settled)

    async def _chat(self, request: web.Request) -> web.Response:
        session_id = convert.check_session_id(request.match_info["session_id"])
        text = convert.chat_message(await self._read_json(request))
        if text.startswith("/") and text[1:].split(" ", 1)[0] in CONTROL_COMMANDS:
            reply = await self._intake.command(
                "peer", convert.conversation_key(session_id), text[1:].split(" ", 1)[0]
            )
            return web.json_response(convert.chat_response(session_id, reply, None))
        _, reply, failure = await self._run_turn(
            session_id, text, request.headers.get("Idempotency-Key")
        )
        return web.json_response(convert.chat_response(session_id, reply, failure))

    async def _messages(self, request: web.Request) -> web.Response:
        session_id = convert.check_session_id(request.match_info["session_id"])
        rows = await self._intake.transcript(convert.conversation_key(session_id))
        return web.json_response(convert.transcript_json(rows))

    async def _delete(self, request: web.Request) -> web.Response:
        session_id = convert.check_session_id(request.match_info["session_id"])
        removed = await self._intake.delete(convert.conversation_key(session_id), by="peer API")
        if removed is None:
            return json_error(404, f"no session {session_id}", "not_found")
        return web.json_response({"session_id": session_id, "deleted": True, "messages": removed})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        parsed = convert.completion_request(await self._read_json(request))
        session_id = convert.completion_session(
            request.headers.get("X-Botmux-Session"), parsed.user
        )
        row_id, reply, failure = await self._run_turn(
            session_id, parsed.text, request.headers.get("Idempotency-Key")
        )
        if failure is not None:
            status = convert.completion_error_status(failure)
            return web.json_response(
                convert.error_json(reply, failure.reason, status), status=status
            )
        if not parsed.stream:
            return web.json_response(convert.completion_json(row_id, reply, parsed.model))
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for event in convert.completion_chunks(row_id, reply, parsed.model):
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": convert.MODEL_NAME,
                        "object": "model",
                        "created": 0,
                        "owned_by": "botmux",
                    }
                ],
            }
        )

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        checks = self._ready()
        ready = all(checks.values())
        return web.json_response({"ready": ready, "checks": checks}, status=200 if ready else 503)

    async def _openapi_route(self, request: web.Request) -> web.Response:
        return web.Response(body=self._openapi, content_type="application/json")

    async def _metrics_route(self, request: web.Request) -> web.Response:
        return web.Response(
            body=await self._metrics(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    # aiohttp would announce its and Python's exact versions to every client.
    response.headers["Server"] = "botmux"


def _too_many(verdict: limits.Verdict, message: str, code: str) -> web.Response:
    response = json_error(429, f"{message}; retry after {verdict.retry_after_header} s", code)
    response.headers["Retry-After"] = verdict.retry_after_header
    return response
