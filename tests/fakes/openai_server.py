"""A loopback OpenAI-compatible model server whose answers tests script call by call.

Real HTTP on 127.0.0.1, so botmux's real ``openai`` client (and its real transport, timeouts
and error parsing) is what gets tested. Every request is recorded: the model asked for, the
messages, the API key, and the per-"session" concurrency seen (a test says what a session is
with ``session_of``).

Use::

    async with open_fake_model() as fake:
        fake.script(rate_limited(retry_after=2), ok("hello"))     # next two calls, any model
        fake.script(timeout(), model="gpt-primary")               # only for that model
        ... point botmux at fake.base_url ...
        assert [r.model for r in fake.requests] == [...]

When nothing is scripted, ``fake.default`` answers (by default: ``echo: <last user text>``).

Streaming (a request with ``"stream": true``): ``ok(text)`` streams in 16-character pieces at
once; ``streamed(*chunks, interval_s=, first_delay_s=, cut_after=, hold_after=, usage=)`` (or
``streamed_text(text, n, ...)``, the text in ``n`` pieces) writes each chunk as its own SSE
event and holds the HTTP response open in between, so a relay that buffers the whole answer
shows nothing until the end. ``cut_after=N`` aborts the connection after N chunks (no
``finish_reason``, no ``[DONE]``: the client's connection error). ``hold_after=N`` writes N
chunks, then waits for ``release_streams()``: a test can look at what arrived while the model
is still writing, with no sleeps. Every chunk written is recorded in ``chunks_sent`` (a
``SentChunk``: request index, chunk index, text, monotonic time); ``wait_for_chunks(n)``;
``first_chunk(i)`` (minus ``requests[i].started``: the model's own time to first token).
``bench_stream(chunks, interval_s, first_delay_s)`` is what benchmarks stream; the module run
as a program serves it (``python -m tests.fakes.openai_server PORT LATENCY CHUNKS INTERVAL``).
A ``Stream`` answering a non-streaming request answers its joined text in one reply.

Usage: ``stream_options.include_usage`` gets a last chunk with empty ``choices`` and the
usage, as OpenAI sends it. Counts are deterministic: ``ok(text, usage=Usage(p, c))`` or
``streamed(..., usage=...)`` script them; otherwise ``fake.usage_of(request, text)`` decides
(by default 3 prompt + 2 completion tokens; ``word_usage`` counts words instead).

A context limit (``fake.enforce_context(limit, chars_per_token=4)``): a request whose prompt
tokens (``fake.prompt_tokens(request)``: the characters of every message's text, divided by
``chars_per_token``, rounded up) plus its ``max_tokens`` exceed ``limit`` gets OpenAI's 400
``context_length_exceeded``; an answered one reports that count as ``usage.prompt_tokens``.
Refused requests are recorded in ``fake.overflowed`` (their indexes in ``requests``).

Every ``Request`` keeps its whole ``body``; ``content_parts``, ``max_tokens``,
``response_format``, ``include_usage``, ``tools`` and ``stream_options`` read it.

Transcription (``POST /v1/audio/transcriptions``, multipart as the ``openai`` client sends
it): each call is recorded in ``transcriptions`` (a ``Transcription``: model, key, file name,
the file's bytes); ``script_transcription(ok("text"), rate_limited(), model=...)`` scripts
the next ones, otherwise ``fake.transcript`` is the answer (``{"text": ...}``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Usage:
    """Token counts as the model reports them (``total`` is their sum)."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


DEFAULT_USAGE = Usage(3, 2)


@dataclass(frozen=True)
class Ok:
    text: str
    usage: Usage | None = None  # None: ``FakeModel.usage_of`` decides


@dataclass(frozen=True)
class Fail:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    """Wait, then answer with ``then`` (a delay past the client's timeout is a timeout)."""

    seconds: float
    then: Ok | Fail | None = None


@dataclass(frozen=True)
class Drop:
    """Close the connection without an answer."""


@dataclass(frozen=True)
class Hold:
    """Wait until ``release()`` is called, then answer with ``then`` (or the default)."""

    then: Ok | Fail | None = None


@dataclass(frozen=True)
class Stream:
    """Stream ``chunks`` one SSE event each: ``first_delay_s`` before the first, ``interval_s``
    between the others, the response held open meanwhile. ``cut_after``: abort the connection
    after that many chunks. ``hold_after``: after that many, wait for ``release_streams()``."""

    chunks: tuple[str, ...]
    interval_s: float = 0.0
    first_delay_s: float = 0.0
    cut_after: int | None = None
    hold_after: int | None = None
    usage: Usage | None = None
    finish_reason: str = "stop"

    @property
    def text(self) -> str:
        return "".join(self.chunks)


@dataclass(frozen=True)
class Calls:
    """A tool step (SPEC 15): the model asks for these calls ((name, arguments as JSON text,
    call id), in order) and writes ``text`` beside them; ``finish_reason`` is "tool_calls".
    Streamed as OpenAI streams it: the text's pieces, then each call's id and name in one
    delta and its arguments in pieces of 8 characters."""

    calls: tuple[tuple[str, str, str], ...]
    text: str = ""
    usage: Usage | None = None


Outcome = Ok | Fail | Sleep | Drop | Hold | Stream | Calls


def calls(*called: tuple[str, dict[str, Any]], text: str = "", ids: str = "call") -> Calls:
    """A step calling each (tool name, arguments) in order; call ids ``<ids>_1``, ... ."""
    return Calls(
        tuple(
            (name, json.dumps(arguments), f"{ids}_{i}")
            for i, (name, arguments) in enumerate(called, 1)
        ),
        text,
    )


def ok(text: str, *, usage: Usage | None = None) -> Ok:
    return Ok(text, usage)


def streamed(
    *chunks: str,
    interval_s: float = 0.0,
    first_delay_s: float = 0.0,
    cut_after: int | None = None,
    hold_after: int | None = None,
    usage: Usage | None = None,
) -> Stream:
    return Stream(tuple(chunks), interval_s, first_delay_s, cut_after, hold_after, usage)


def streamed_text(text: str, n: int, **options: Any) -> Stream:
    """``text`` cut into ``n`` pieces of (nearly) equal length, streamed as ``streamed``."""
    size, extra = divmod(len(text), n)
    bounds = [i * size + min(i, extra) for i in range(n + 1)]
    return streamed(*(text[a:b] for a, b in itertools.pairwise(bounds)), **options)


def word_usage(request: Request, text: str) -> Usage:
    """Usage counted in words: of every message's text content, and of the answer."""
    prompt = 0
    for message in request.messages:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        prompt += sum(len(str(p.get("text") or "").split()) for p in parts if isinstance(p, dict))
    return Usage(prompt, len(text.split()))


def error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    type: str | None = None,
    headers: dict[str, str] | None = None,
) -> Fail:
    body = {"error": {"message": message, "type": type or "error", "code": code, "param": None}}
    return Fail(status, body, headers or {})


def rate_limited(retry_after: float | None = None, *, header: str = "retry-after") -> Fail:
    headers = {} if retry_after is None else {header: str(retry_after)}
    return error(
        429,
        "Rate limit reached for requests",
        code="rate_limit_exceeded",
        type="requests",
        headers=headers,
    )


def quota() -> Fail:
    return error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        code="insufficient_quota",
        type="insufficient_quota",
    )


def unauthorized() -> Fail:
    return error(
        401,
        "Incorrect API key provided: sk-****.",
        code="invalid_api_key",
        type="invalid_request_error",
    )


def payment_required() -> Fail:
    return error(402, "Payment required", code="payment_required")


def model_not_found(model: str = "x") -> Fail:
    return error(
        404,
        f"The model `{model}` does not exist",
        code="model_not_found",
        type="invalid_request_error",
    )


def context_overflow() -> Fail:
    return error(
        400,
        "This model's maximum context length is 8192 tokens.",
        code="context_length_exceeded",
        type="invalid_request_error",
    )


def server_error(status: int = 500) -> Fail:
    return error(
        status, "The server had an error while processing your request.", type="server_error"
    )


def timeout(seconds: float = 30.0) -> Sleep:
    return Sleep(seconds, None)


def drop() -> Drop:
    return Drop()


def _client_gone(http: web.Request) -> bool:
    """Whether the client of ``http`` has closed its connection, even if this server has not
    read the end yet (a peek at the socket; a copy of it, asyncio keeps the original)."""
    transport = http.transport
    if transport is None or transport.is_closing():
        return True
    sock = transport.get_extra_info("socket")
    if sock is None:
        return True
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as peek:
            return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing to read: the client still waits
    except OSError:
        return True  # reset


@dataclass(frozen=True)
class Request:
    model: str
    messages: list[dict[str, Any]]
    api_key: str
    stream: bool
    started: float
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)  # as received

    @property
    def stream_options(self) -> dict[str, Any]:
        options = self.body.get("stream_options")
        return options if isinstance(options, dict) else {}

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options.get("include_usage"))

    @property
    def max_tokens(self) -> int | None:
        """``max_tokens``, or ``max_completion_tokens`` (the newer name), as sent."""
        value = self.body.get("max_tokens", self.body.get("max_completion_tokens"))
        return value if isinstance(value, int) else None

    @property
    def response_format(self) -> dict[str, Any] | None:
        value = self.body.get("response_format")
        return value if isinstance(value, dict) else None

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        value = self.body.get("tools")
        return value if isinstance(value, list) else None

    @property
    def content_parts(self) -> list[dict[str, Any]]:
        """Every content part of every message, in order; a string content is one text part."""
        parts: list[dict[str, Any]] = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                parts.append({"type": "text", "text": content})
            elif isinstance(content, list):
                parts.extend(p for p in content if isinstance(p, dict))
        return parts

    @property
    def tool_results(self) -> list[tuple[str, str]]:
        """(call id, content) of the tool results the request carried, in its order."""
        return [
            (str(m["tool_call_id"]), str(m["content"]))
            for m in self.messages
            if m.get("role") == "tool"
        ]

    @property
    def tool_contents(self) -> list[str]:
        """The content of each tool result the request carried, in its order."""
        return [content for _, content in self.tool_results]

    @property
    def last_user(self) -> str:
        for m in reversed(self.messages):
            if m.get("role") == "user":
                content = m.get("content")
                return content if isinstance(content, str) else json.dumps(content)
        return ""


@dataclass(frozen=True)
class Transcription:
    """One ``/v1/audio/transcriptions`` call as the fake received it."""

    model: str
    api_key: str
    filename: str
    data: bytes


@dataclass(frozen=True)
class SentChunk:
    """One streamed chunk as written: ``request`` indexes ``FakeModel.requests``."""

    request: int
    index: int
    text: str
    at: float


class FakeModel:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.default: Callable[[Request], Outcome] = lambda r: Ok(f"echo: {r.last_user}")
        self.session_of: Callable[[Request], str] = lambda r: "all"
        self.max_concurrency: dict[str, int] = defaultdict(int)
        self.active: dict[str, int] = defaultdict(int)
        self.in_flight: dict[str, list[tuple[Request, web.Request]]] = defaultdict(list)
        #: (the request that arrived, those of its session still running): what overlapped
        self.overlaps: list[tuple[Request, list[Request]]] = []
        self.completed: list[Request] = []
        self._any: deque[Outcome] = deque()
        self._by_model: dict[str, deque[Outcome]] = defaultdict(deque)
        self._release = asyncio.Event()
        self.usage_of: Callable[[Request, str], Usage] = lambda r, text: DEFAULT_USAGE
        self.chunks_sent: list[SentChunk] = []
        #: streams cut by ``cut_after`` / finished, by request index
        self.streams_cut: list[int] = []
        self.streams_done: list[int] = []
        self._stream_release = asyncio.Event()
        #: requests (by index) whose client closed the connection before the answer was
        #: written: the handler was cancelled (a turn stopped or interrupted, a client timeout)
        self.closed: list[int] = []
        self._changed = asyncio.Condition()
        self.base_url = ""
        self.transcriptions: list[Transcription] = []
        self.transcript = "the words of the voice note"
        self._transcribe_any: deque[Ok | Fail] = deque()
        self._transcribe_by_model: dict[str, deque[Ok | Fail]] = defaultdict(deque)
        self.context_limit: int | None = None
        self.chars_per_token = 4
        self.overflowed: list[int] = []

    def enforce_context(self, limit: int, *, chars_per_token: int = 4) -> None:
        """Refuse requests over ``limit`` tokens (prompt + ``max_tokens``), as OpenAI does,
        and report ``prompt_tokens`` by the same count on the others."""
        self.context_limit, self.chars_per_token = limit, chars_per_token
        self.usage_of = lambda r, text: Usage(self.prompt_tokens(r), max(1, len(text) // 4))

    def prompt_tokens(self, request: Request) -> int:
        """The deterministic prompt count: text characters / ``chars_per_token``, rounded up."""
        chars = sum(len(str(p.get("text") or "")) for p in request.content_parts)
        return -(-chars // self.chars_per_token)

    def _over_limit(self, request: Request) -> Fail | None:
        if self.context_limit is None:
            return None
        prompt = self.prompt_tokens(request)
        wanted = prompt + (request.max_tokens or 0)
        if wanted <= self.context_limit:
            return None
        return error(
            400,
            f"This model's maximum context length is {self.context_limit} tokens. However, you"
            f" requested {wanted} tokens ({prompt} in the messages, {request.max_tokens or 0}"
            " in the completion). Please reduce the length of the messages or completion.",
            code="context_length_exceeded",
            type="invalid_request_error",
        )

    def script(self, *outcomes: Outcome, model: str | None = None) -> None:
        """Queue outcomes for the next calls (of ``model`` only, when given)."""
        (self._by_model[model] if model else self._any).extend(outcomes)

    def script_transcription(self, *outcomes: Ok | Fail, model: str | None = None) -> None:
        """Queue answers for the next transcription calls (of ``model`` only, when given)."""
        (self._transcribe_by_model[model] if model else self._transcribe_any).extend(outcomes)

    async def handle_transcriptions(self, http: web.Request) -> web.Response:
        form = await http.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response(error(400, "no file").body, status=400)
        call = Transcription(
            model=str(form.get("model", "")),
            api_key=http.headers.get("Authorization", "").removeprefix("Bearer ").strip(),
            filename=upload.filename,
            data=upload.file.read(),
        )
        self.transcriptions.append(call)
        await self._notify()
        queue = self._transcribe_by_model.get(call.model) or self._transcribe_any
        outcome = queue.popleft() if queue else Ok(self.transcript)
        if isinstance(outcome, Fail):
            return web.json_response(outcome.body, status=outcome.status, headers=outcome.headers)
        return web.json_response({"text": outcome.text})

    def release(self) -> None:
        """Let every ``Hold`` (now and later) answer."""
        self._release.set()

    def release_streams(self) -> None:
        """Let every stream held by ``hold_after`` (now and later) go on."""
        self._stream_release.set()

    def first_chunk(self, request: int) -> SentChunk | None:
        """The first chunk streamed to ``requests[request]``: its ``at`` minus the request's
        ``started`` is the model's own time to first token."""
        return next((c for c in self.chunks_sent if c.request == request), None)

    async def wait_for_chunks(self, count: int) -> list[SentChunk]:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.chunks_sent) >= count)
        return list(self.chunks_sent)

    def calls(self) -> list[tuple[str, str]]:
        """(model, api key) of every request, in order."""
        return [(r.model, r.api_key) for r in self.requests]

    async def wait_for_requests(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.requests) >= count)

    async def wait_for_closed(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.closed) >= count)

    async def wait_for_completed(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.completed) >= count)

    def _next(self, request: Request) -> Outcome:
        queue = self._by_model.get(request.model)
        if queue:
            return queue.popleft()
        if self._any:
            return self._any.popleft()
        return self.default(request)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def handle_completions(self, http: web.Request) -> web.StreamResponse:
        body = await http.json()
        auth = http.headers.get("Authorization", "")
        request = Request(
            model=str(body.get("model", "")),
            messages=list(body.get("messages", [])),
            api_key=auth.removeprefix("Bearer ").strip(),
            stream=bool(body.get("stream", False)),
            started=time.monotonic(),
            body=body,
            headers=dict(http.headers),
        )
        number = len(self.requests)
        self.requests.append(request)
        session = self.session_of(request)
        self.active[session] += 1
        self.max_concurrency[session] = max(self.max_concurrency[session], self.active[session])
        # A call still running here whose client has hung up (its connection's end is already
        # waiting to be read: this loop had not got to it) was given up before this one was
        # sent: that is no overlap.
        running = [r for r, h in self.in_flight[session] if not _client_gone(h)]
        if running:
            self.overlaps.append((request, running))
        self.in_flight[session].append((request, http))
        await self._notify()
        try:
            refused = self._over_limit(request)
            if refused is not None:
                self.overflowed.append(number)
            outcome = refused or self._next(request)
            return await self._answer(http, request, outcome)
        except asyncio.CancelledError:
            self.closed.append(next(i for i, r in enumerate(self.requests) if r is request))
            raise
        finally:
            self.active[session] -= 1
            self.in_flight[session].remove((request, http))
            self.completed.append(request)
            await self._notify()

    async def _answer(
        self, http: web.Request, request: Request, outcome: Outcome
    ) -> web.StreamResponse:
        match outcome:
            case Sleep(seconds=seconds, then=then):
                await asyncio.sleep(seconds)
                return await self._answer(http, request, then or self.default(request))
            case Hold(then=then):
                await self._release.wait()
                return await self._answer(http, request, then or self.default(request))
            case Drop():
                transport = http.transport
                if transport is not None:
                    transport.abort()
                raise ConnectionResetError("dropped by the fake")
            case Fail(status=status, body=body, headers=headers):
                return web.json_response(body, status=status, headers=headers)
            case Ok(text=text, usage=usage):
                usage = usage or self.usage_of(request, text)
                if request.stream:
                    pieces = tuple(text[i : i + 16] for i in range(0, len(text), 16)) or ("",)
                    return await self._stream(http, request, Stream(pieces, usage=usage))
                return web.json_response(_completion(request.model, text, usage))
            case Calls(calls=called, text=text, usage=usage):
                usage = usage or self.usage_of(request, text)
                if request.stream:
                    return await self._stream_calls(http, request, called, text, usage)
                return web.json_response(_completion(request.model, text, usage, called))
            case Stream() as stream:
                if request.stream:
                    return await self._stream(http, request, stream)
                await asyncio.sleep(stream.first_delay_s + stream.interval_s * len(stream.chunks))
                if stream.cut_after is not None:
                    return await self._answer(http, request, Drop())
                usage = stream.usage or self.usage_of(request, stream.text)
                return web.json_response(_completion(request.model, stream.text, usage))
        raise AssertionError(outcome)

    async def _stream(
        self, http: web.Request, request: Request, stream: Stream
    ) -> web.StreamResponse:
        number = next(i for i, r in enumerate(self.requests) if r is request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(http)

        async def write(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": request.model,
                "choices": choices,
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        for i, piece in enumerate(stream.chunks):
            if stream.cut_after is not None and i >= stream.cut_after:
                break
            if stream.hold_after is not None and i == stream.hold_after:
                await self._stream_release.wait()
            delay = stream.interval_s if i else stream.first_delay_s
            if delay > 0:
                await asyncio.sleep(delay)
            delta = {"content": piece} if i else {"role": "assistant", "content": piece}
            await write([{"index": 0, "delta": delta, "finish_reason": None}])
            self.chunks_sent.append(SentChunk(number, i, piece, time.monotonic()))
            await self._notify()
        if stream.cut_after is not None:
            self.streams_cut.append(number)
            await self._notify()
            return await self._answer(http, request, Drop())
        await write([{"index": 0, "delta": {}, "finish_reason": stream.finish_reason}])
        if request.include_usage:
            usage = stream.usage or self.usage_of(request, stream.text)
            await write([], usage=usage.as_json())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.streams_done.append(number)
        return response

    async def _stream_calls(
        self,
        http: web.Request,
        request: Request,
        called: tuple[tuple[str, str, str], ...],
        text: str,
        usage: Usage,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(http)

        async def write(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0}
            chunk |= {"model": request.model, "choices": choices, **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await write([{"index": 0, "delta": {"role": "assistant", "content": text or None}}])
        for i, (name, arguments, call_id) in enumerate(called):
            head = {"index": i, "id": call_id, "type": "function"}
            head["function"] = {"name": name, "arguments": ""}
            await write([{"index": 0, "delta": {"tool_calls": [head]}}])
            for at in range(0, len(arguments), 8):
                piece = {"index": i, "function": {"arguments": arguments[at : at + 8]}}
                await write([{"index": 0, "delta": {"tool_calls": [piece]}}])
        await write([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])
        if request.include_usage:
            await write([], usage=usage.as_json())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def handle_streams(self, http: web.Request) -> web.Response:
        """``GET /v1/fake/streams``, for benchmarks with the model in its own process: each
        request's last user text and the monotonic times of its first and last chunk."""
        times: dict[int, list[float]] = {}
        for chunk in self.chunks_sent:
            times.setdefault(chunk.request, []).append(chunk.at)
        streams = [
            {"last_user": self.requests[i].last_user, "first_at": at[0], "last_at": at[-1]}
            for i, at in sorted(times.items())
        ]
        return web.json_response(streams)

    async def handle_models(self, http: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "fake"}],
            }
        )


def _completion(
    model: str,
    text: str,
    usage: Usage = DEFAULT_USAGE,
    called: tuple[tuple[str, str, str], ...] = (),
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if called else "")}
    if called:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": n, "arguments": a}}
            for n, a, call_id in called
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if called else "stop",
            }
        ],
        "usage": usage.as_json(),
    }


@asynccontextmanager
async def open_fake_model(port: int = 0) -> AsyncIterator[FakeModel]:
    fake = FakeModel()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle_completions)
    app.router.add_get("/v1/models", fake.handle_models)
    app.router.add_get("/v1/fake/streams", fake.handle_streams)
    app.router.add_post("/v1/audio/transcriptions", fake.handle_transcriptions)
    # A call the client gave up on (its timeout) stops counting as active when it hangs up.
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=0.1, handler_cancellation=True
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
    fake.base_url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/v1"
    try:
        yield fake
    finally:
        fake.release()
        await runner.cleanup()


def bench_stream(chunks: int, interval_s: float, first_delay_s: float = 0.0) -> Stream:
    """What benchmarks stream: ``chunks`` words ``interval_s`` apart, the first after
    ``first_delay_s`` (the model's own time to first token)."""
    words = tuple(f"w{i} " for i in range(chunks))
    return Stream(words, interval_s=interval_s, first_delay_s=first_delay_s)


async def _serve_forever(port: int, latency: float, chunks: int, interval_s: float) -> None:
    async with open_fake_model(port) as fake:
        if latency > 0:
            fake.default = lambda r: Sleep(latency, Ok(f"echo: {r.last_user}"))
        if chunks > 0:
            plain = fake.default
            stream = bench_stream(chunks, interval_s, latency)
            fake.default = lambda r: stream if r.stream else plain(r)
        print(f"fake model listening on {fake.base_url}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    # For benchmarks: python -m tests.fakes.openai_server PORT [LATENCY_S [CHUNKS [INTERVAL_S]]]
    # With CHUNKS, streaming requests get CHUNKS words INTERVAL_S apart, the first after
    # LATENCY_S; other requests answer as without it.
    import sys

    args = [*sys.argv[1:], "0", "0", "0", "0"]
    asyncio.run(_serve_forever(int(args[0]), float(args[1]), int(args[2]), float(args[3])))
