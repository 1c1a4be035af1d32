"""The model turn: build the context, call the model, return the reply.

The context is the configured system prompt, the compaction summary if any, the conversation's
answered history, and the new user message (once: the pending row is never also in the
history). It is built per endpoint of the chain (:mod:`agent.context`, SPEC section 11): the
oldest rows are left out until it fits the endpoint's ``context_tokens`` (estimated, calibrated
by the ``prompt_tokens`` each answered call reports) and ``[agent] history_chars``, so one huge
message is not billed again on every later turn; every request carries the endpoint's
``max_output_tokens`` as ``max_tokens``. A new message that alone cannot fit any endpoint is
answered honestly without a model call. Calls go through ``policy``'s caller, which owns
retries, credential rotation, fallback and the one trimmed retry after a context overflow.

When someone watches the turn with a stream (SPEC 8) and ``[agent] stream`` is on, the model
streams (``stream_options.include_usage``) and each piece goes to that stream as it arrives.
A failure before any piece was shown is the policy's as ever; once a piece of an attempt is
binding (a peer client has it), a failure of that attempt ends the turn (``AnswerShown``).

A reload (SPEC 13) hands the agent a new model chain and agent config
(:meth:`Agent.reconfigure`): a turn reads both once, at its start, so running turns finish on
what they started with and the next turn uses the new ones.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from agent._wire import WireClient
from agent.clients import ClientPool
from agent.context import SUMMARY_PREFIX, Calibration, Window, fit, prompt_budget, prompt_chars
from gateway.config import AgentConfig, ModelConfig, ModelEndpoint
from gateway.errors import GatewayError, ModelNotConfigured
from gateway.events import ModelTokensUsed, PolicyDecided
from gateway.messages import (
    AttemptFailed,
    ChatMessage,
    DataUrl,
    Failure,
    Image,
    ReplyDelta,
    TurnResult,
    Usage,
    platform_of,
)
from gateway.ports import ReplyStream, Watch
from policy import classify, failure_reply
from policy.backoff import Backoff
from policy.classify import CONTEXT_OVERFLOW
from policy.engine import AnswerShown, ModelPolicy, Observe, TurnFailed
from policy.replies import too_long_reply

#: Conversations whose last request ``/status`` can show (the least recent are forgotten).
CONTEXT_SEEN = 4096
Messages = list[dict[str, Any]]  # content: a string, or text and image_url parts (SPEC 9)
#: What the reply says when a turn had images and no model of the chain can see them.
IMAGES_UNSEEN = "(this model cannot see images; the image was not used)"


@dataclass(frozen=True, slots=True)
class _Generation:
    """One config's model side: a turn keeps the one it started with to its end, so a reload
    (:meth:`Agent.reconfigure`) changes the next turn and never a running one."""

    model: ModelConfig | None
    config: AgentConfig
    chain: tuple[ModelEndpoint, ...]
    policy: ModelPolicy | None


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
        self._clients = clients
        self._observe = observe
        self._clock = clock
        self.calibration = Calibration()
        # conversation -> (estimated prompt tokens of its last request, that endpoint's window)
        self._context: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._gen = self._generation(model, config)

    def _generation(self, model: ModelConfig | None, config: AgentConfig) -> _Generation:
        chain: tuple[ModelEndpoint, ...] = model.chain if model else ()
        policy = None
        if model is not None:
            policy = ModelPolicy(
                chain,
                backoff=Backoff(model.backoff_base_s, model.backoff_cap_s),
                retry_after_cap=model.retry_after_cap_s,
                observe=self._observe,
                clock=self._clock,
            )
        return _Generation(model, config, chain, policy)

    async def reconfigure(self, model: ModelConfig | None, config: AgentConfig) -> None:
        """Use this model chain and agent config from the next turn on (a reload). Running
        turns finish on the chain they started with; the clients of keys no longer configured
        are closed once no call borrows them. Benched keys start unbenched (a new policy)."""
        self._gen = self._generation(model, config)
        await self._clients.retire_except(
            {(e.base_url, key, e.timeout_s) for e in self._gen.chain for key in e.api_keys}
        )

    def __repr__(self) -> str:
        model = self._gen.model
        return f"<Agent model={model.model if model else None!r}>"

    @property
    def chain(self) -> tuple[ModelEndpoint, ...]:
        return self._gen.chain

    @property
    def policy(self) -> ModelPolicy | None:
        return self._gen.policy

    @property
    def _config(self) -> AgentConfig:
        return self._gen.config

    def build(
        self,
        endpoint: ModelEndpoint,
        history: Sequence[ChatMessage],
        text: str,
        *,
        summary: str | None = None,
        instructions: str | None = None,
        halve: bool = False,
        share: float = 1.0,
        config: AgentConfig | None = None,
        images: Sequence[Image] = (),
    ) -> tuple[Messages, Window]:
        """The request to ``endpoint``: what of ``history`` fits its window (``share`` of it:
        compaction asks what would fit in part of it), and the window as built.
        ``instructions``: this turn's extra system message (``/v1/responses``); ``config``:
        the turn's agent config (else the current one). ``images``: the new message's, sent
        as ``image_url`` parts (with the history's resolved ones) to a model that sees them."""
        config = config or self._config
        vision = endpoint.sees_images
        system = config.system_prompt
        budget = prompt_budget(endpoint)
        ratio = self.calibration.ratio(endpoint)
        fixed = len(system) + len(text) + len(instructions or "")
        fits = not budget or math.ceil(fixed / ratio) <= budget
        note = SUMMARY_PREFIX + summary if summary else None
        if note and budget and math.ceil((fixed + len(note)) / ratio) > budget:
            note = None  # it cannot fit beside the message: left out of this request
        if note:
            fixed += len(note)
        kept, tokens = fit(
            history,
            fixed_chars=fixed,
            history_chars=int(config.history_chars * share),
            budget=int(budget * share),
            ratio=ratio,
            halve=halve,
        )
        messages: Messages = [{"role": "system", "content": system}]
        if instructions:
            messages.append({"role": "system", "content": instructions})
        if note:
            messages.append({"role": "system", "content": note})
        messages.extend(
            [
                {"role": m.role, "content": _content(m.content, m.images)}
                if vision and m.images
                else {"role": m.role, "content": m.content}
                for m in history[len(history) - kept :]
            ]
        )
        messages.append({"role": "user", "content": _content(text, images if vision else ())})
        return messages, Window(kept, len(history), tokens, budget, note is not None, fits)

    def _sent(self, conversation: str, window: Window) -> None:
        self._context[conversation] = (window.tokens, window.budget)
        self._context.move_to_end(conversation)
        while len(self._context) > CONTEXT_SEEN:
            self._context.popitem(last=False)

    async def complete(
        self,
        endpoint: ModelEndpoint,
        api_key: str,
        messages: Messages,
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

        The call goes through :mod:`agent._wire` (aiohttp itself, plain JSON): openai's
        ``chat.completions.create`` walks every message through its TypedDict transformer
        (over half of botmux's CPU per turn with a 40-message history), and even its bare
        ``post`` cost four times the CPU of the same request on aiohttp.
        """
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": messages,
            "max_tokens": endpoint.max_output_tokens,
        }
        if response_format is not None:
            body["response_format"] = dict(response_format)
        async with self._clients.wire(endpoint, api_key, rebuild=rebuild) as wire:
            if before_call is not None:
                before_call()
                await anyio.lowlevel.checkpoint_if_cancelled()
            if stream is not None:
                text, usage = await self._streamed(wire, endpoint.model, body, stream, attempt)
            else:
                reply = await wire.chat(body, endpoint.model)
                text = _message_text(reply.get("choices"))
                usage = _usage(reply.get("usage")) or Usage()
        self._observe(ModelTokensUsed(endpoint.model, usage.prompt_tokens, usage.completion_tokens))
        return text, usage

    async def _streamed(
        self,
        wire: WireClient,
        model: str,
        body: dict[str, Any],
        stream: ReplyStream,
        attempt: int,
    ) -> tuple[str, Usage]:
        """A streamed call: pieces to ``stream`` as they arrive; the text and usage at the end.
        A cut stream raises ProviderUnreachable (a stall, ProviderTimeout), like any call.

        The events are read off aiohttp by :mod:`agent._sse`: openai's ``AsyncStream`` was
        most of the agent's CPU per chunk, and its ``httpx2`` layer over aiohttp half of what
        was left after that."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        pieces: list[str] = []
        usage = Usage()
        try:
            async with wire.stream(body, model) as events:
                async for chunks in events:
                    for chunk in chunks:  # one delta each (a peer client sees each)
                        if not isinstance(chunk, dict):
                            continue
                        piece = _piece(chunk.get("choices"))
                        if piece:
                            pieces.append(piece)
                            stream.put(ReplyDelta(piece, attempt))
                        usage = _usage(chunk.get("usage")) or usage
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
        summary: str | None = None,
        images: Sequence[Image] = (),
    ) -> TurnResult:
        """``summary``: the conversation's compaction summary, sent before the history.
        ``images``: a turn with images skips the models that cannot see them; when none
        can, the text is answered and the reply says so (SPEC 9)."""
        gen = self._gen  # this turn's, whatever a reload does meanwhile
        if gen.policy is None:
            failure = classify(ModelNotConfigured("no model is configured"))
            return TurnResult(reply=failure_reply(failure), failure=failure)
        instructions = watch.instructions if watch is not None else None
        windows = [
            self.build(e, (), text, instructions=instructions, config=gen.config)[1]
            for e in gen.chain
        ]
        if not any(w.fits for w in windows):
            return self._too_long(conversation, turn, windows[0], gen.chain[0])
        sees = [e.sees_images for e in gen.chain]
        unseen = bool(images) and not any(sees)
        usable = sees if images and not unseen else None
        stream = watch.stream if watch is not None and gen.config.stream else None
        response_format = watch.response_format if watch is not None else None
        attempts = itertools.count(1)

        async def call(
            index: int, api_key: str, *, rebuild: bool, trimmed: bool
        ) -> tuple[str, Usage]:
            endpoint = gen.chain[index]
            messages, window = self.build(
                endpoint,
                history,
                text,
                summary=summary,
                instructions=instructions,
                halve=trimmed,
                config=gen.config,
                images=images,
            )
            self._sent(conversation, window)
            reply, usage = await self.complete(
                endpoint,
                api_key,
                messages,
                rebuild=rebuild,
                before_call=before_call,
                stream=stream,
                attempt=next(attempts),
                response_format=response_format,
            )
            self.calibration.learn(endpoint, prompt_chars(messages), usage.prompt_tokens)
            return reply, usage

        try:
            answer = await gen.policy.run(conversation, call, turn=turn, usable=usable)
        except TurnFailed as exc:
            return TurnResult(
                reply=failure_reply(exc.failure),
                failure=exc.failure,
                fell_back=exc.fell_back,
                shown=isinstance(exc.__cause__, AnswerShown),
            )
        reply, usage = answer.value
        reply = reply or "(the model returned an empty reply)"
        return TurnResult(
            reply=f"{IMAGES_UNSEEN}\n\n{reply}" if unseen else reply,
            model=answer.model,
            usage=usage,
            fell_back=answer.fell_back,
        )

    def _too_long(
        self, conversation: str, turn: int, window: Window, endpoint: ModelEndpoint
    ) -> TurnResult:
        """The message alone does not fit any model's window: an honest reply, no call."""
        self._observe(
            PolicyDecided(
                conversation,
                platform_of(conversation),
                turn,
                "give_up",
                endpoint.model,
                CONTEXT_OVERFLOW,
            )
        )
        failure = Failure(CONTEXT_OVERFLOW, False, detail="the message alone exceeds the window")
        return TurnResult(reply=too_long_reply(window.tokens, window.budget), failure=failure)

    def benched_keys(self) -> list[tuple[str, str, str, float]]:
        policy = self._gen.policy
        return policy.benched_keys() if policy else []

    def status(self) -> dict[str, Any]:
        policy = self._gen.policy
        if policy is None:
            return {"model": None}
        return {**policy.status(), "context": self._context}


def _content(text: str, images: Sequence[Image]) -> str | list[dict[str, Any]]:
    """A message's content: its text, or with images the text part and one ``image_url``
    part each (only resolved ones: a ``sha256:`` reference is an image not re-sent)."""
    urls = [
        u
        for u in images
        if isinstance(u, DataUrl) or u.startswith(("data:", "https://", "http://"))
    ]
    if not urls:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts.extend({"type": "image_url", "image_url": {"url": u}} for u in urls)
    return parts


def _message_text(choices: Any) -> str:
    """The text of a plain completion's first choice ("" when it has none)."""
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


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
    """The usage of a reply, or of a streamed chunk (the last one, with ``include_usage``), if
    it has one."""
    if not isinstance(value, dict):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt, completion)
