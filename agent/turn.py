"""The model turn: build the context, call the model, return the reply.

The context is the configured system prompt, the conversation's answered history, and the new
user message (once: the pending row is never also in the history). The history is bounded by
``[agent] history_chars`` (SPEC section 11): the oldest rows are left out until its content
fits, so one huge message is not billed again on every later turn; and every request carries
the endpoint's ``max_output_tokens`` as ``max_tokens``. Calls go through
``policy``'s caller, which owns retries, credential rotation and fallback.

When someone watches the turn with a stream (SPEC 8) and ``[agent] stream`` is on, the model
streams (``stream_options.include_usage``) and each piece goes to that stream as it arrives.
A failure before any piece was shown is the policy's as ever; once a piece of an attempt is
binding (a peer client has it), a failure of that attempt ends the turn (``AnswerShown``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
import openai
from openai.types.chat import ChatCompletion

from agent import _sse
from agent.clients import ClientPool
from agent.errors import translate_openai_errors
from gateway.config import AgentConfig, ModelConfig, ModelEndpoint
from gateway.errors import GatewayError, ModelNotConfigured
from gateway.events import ModelTokensUsed
from gateway.messages import AttemptFailed, ChatMessage, ReplyDelta, TurnResult, Usage
from gateway.ports import ReplyStream, Watch
from policy import classify, failure_reply
from policy.backoff import Backoff
from policy.engine import AnswerShown, ModelPolicy, Observe, TurnFailed

_OPTIONS: Any = {"security": {"bearer_auth": True}}


def fit_history(history: Sequence[ChatMessage], budget: int) -> Sequence[ChatMessage]:
    """The newest rows whose content fits in ``budget`` characters, starting with a user
    message (an answer without its question would mislead the model)."""
    used = 0
    start = len(history)
    while start > 0 and used + len(history[start - 1].content) <= budget:
        start -= 1
        used += len(history[start].content)
    while start < len(history) and history[start].role != "user":
        start += 1
    return history[start:]


class Agent:
    def __init__(
        self,
        model: ModelConfig | None,
        config: AgentConfig,
        clients: ClientPool,
        *,
        observe: Observe = lambda event: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._model = model
        self._config = config
        self._clients = clients
        self._observe = observe
        self._chain: tuple[ModelEndpoint, ...] = model.chain if model else ()
        self._policy: ModelPolicy | None = None
        if model is not None:
            self._policy = ModelPolicy(
                self._chain,
                backoff=Backoff(model.backoff_base_s, model.backoff_cap_s),
                retry_after_cap=model.retry_after_cap_s,
                observe=observe,
                clock=clock,
            )

    def __repr__(self) -> str:
        return f"<Agent model={self._model.model if self._model else None!r}>"

    def build_messages(self, history: Sequence[ChatMessage], text: str) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self._config.system_prompt}]
        kept = fit_history(history, self._config.history_chars)
        messages.extend({"role": m.role, "content": m.content} for m in kept)
        messages.append({"role": "user", "content": text})
        return messages

    async def complete(
        self,
        endpoint: ModelEndpoint,
        api_key: str,
        messages: list[dict[str, str]],
        *,
        rebuild: bool = False,
        before_call: Callable[[], None] | None = None,
        stream: ReplyStream | None = None,
        attempt: int = 1,
        response_format: Mapping[str, Any] | None = None,
    ) -> tuple[str, Usage]:
        """One model call, its errors translated; no retries here. ``before_call`` runs
        last before the request is sent; if it cancelled the turn, nothing is sent. With
        ``stream``, the model streams and each piece is put there as it arrives.

        The body goes through ``client.post`` as plain JSON: ``chat.completions.create`` first
        walks every message through openai's TypedDict transformer, which was over half of
        botmux's CPU per turn (profiled with a 40-message history), and our messages are
        plain strings that need no transforming.
        """
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": messages,
            "max_tokens": endpoint.max_output_tokens,
        }
        if response_format is not None:
            body["response_format"] = dict(response_format)
        async with self._clients.use(endpoint, api_key, rebuild=rebuild) as client:
            if before_call is not None:
                before_call()
                await anyio.lowlevel.checkpoint_if_cancelled()
            if stream is not None:
                text, usage = await self._streamed(client, endpoint.model, body, stream, attempt)
            else:
                with translate_openai_errors(endpoint.model):
                    response = await client.post(
                        "/chat/completions", body=body, cast_to=ChatCompletion, options=_OPTIONS
                    )
                choice = response.choices[0] if response.choices else None
                text = (choice.message.content if choice else None) or ""
                usage = Usage()
                if response.usage is not None:
                    usage = Usage(response.usage.prompt_tokens, response.usage.completion_tokens)
        self._observe(ModelTokensUsed(endpoint.model, usage.prompt_tokens, usage.completion_tokens))
        return text, usage

    async def _streamed(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        body: dict[str, Any],
        stream: ReplyStream,
        attempt: int,
    ) -> tuple[str, Usage]:
        """A streamed call: pieces to ``stream`` as they arrive; the text and usage at the end.
        A cut stream raises openai's connection error, translated like any other.

        The response comes raw (``cast_to=httpx2.Response``: openai still sends the request
        and raises its status errors) and its events are read by :mod:`agent._sse`: openai's
        ``AsyncStream`` was most of the agent's CPU per chunk; before that, ``cast_to=object``
        had already skipped its model construction (a third of a streamed turn's CPU)."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        pieces: list[str] = []
        usage = Usage()
        try:
            with translate_openai_errors(model):
                response = await client.post(
                    "/chat/completions",
                    body=body,
                    cast_to=httpx2.Response,
                    options=_OPTIONS,
                    stream=True,
                )
                try:
                    async for chunks in _sse.batches(response):
                        for chunk in chunks:  # one delta each (a peer client sees each)
                            if not isinstance(chunk, dict):
                                continue
                            piece = _piece(chunk.get("choices"))
                            if piece:
                                pieces.append(piece)
                                stream.put(ReplyDelta(piece, attempt))
                            usage = _usage(chunk.get("usage")) or usage
                finally:
                    await response.aclose()
        except GatewayError as exc:
            stream.put(AttemptFailed(attempt, classify(exc).reason))
            if stream.binding:
                raise AnswerShown(exc) from exc
            raise
        return "".join(pieces), usage

    async def run_turn(
        self,
        conversation: str,
        history: Sequence[ChatMessage],
        text: str,
        *,
        turn: int = 0,
        before_call: Callable[[], None] | None = None,
        watch: Watch | None = None,
    ) -> TurnResult:
        if self._policy is None:
            failure = classify(ModelNotConfigured("no model is configured"))
            return TurnResult(reply=failure_reply(failure), failure=failure)
        messages = self.build_messages(history, text)
        if watch is not None and watch.instructions:
            messages.insert(1, {"role": "system", "content": watch.instructions})
        stream = watch.stream if watch is not None and self._config.stream else None
        response_format = watch.response_format if watch is not None else None
        attempts = itertools.count(1)

        async def call(index: int, api_key: str, *, rebuild: bool) -> tuple[str, Usage]:
            return await self.complete(
                self._chain[index],
                api_key,
                messages,
                rebuild=rebuild,
                before_call=before_call,
                stream=stream,
                attempt=next(attempts),
                response_format=response_format,
            )

        try:
            answer = await self._policy.run(conversation, call, turn=turn)
        except TurnFailed as exc:
            return TurnResult(
                reply=failure_reply(exc.failure),
                failure=exc.failure,
                fell_back=exc.fell_back,
                shown=isinstance(exc.__cause__, AnswerShown),
            )
        reply, usage = answer.value
        return TurnResult(
            reply=reply or "(the model returned an empty reply)",
            model=answer.model,
            usage=usage,
            fell_back=answer.fell_back,
        )

    def benched_keys(self) -> list[tuple[str, str, str, float]]:
        return self._policy.benched_keys() if self._policy else []

    def status(self) -> dict[str, Any]:
        if self._policy is None:
            return {"model": None}
        return self._policy.status()


def _piece(choices: Any) -> str:
    """The text of a streamed chunk's choices' deltas."""
    text = ""
    for choice in choices or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        piece = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(piece, str):
            text += piece
    return text


def _usage(value: Any) -> Usage | None:
    """The usage of a streamed chunk (the last one, with ``include_usage``), if it has one."""
    if not isinstance(value, dict):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt, completion)
