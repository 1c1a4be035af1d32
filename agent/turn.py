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

import dataclasses
import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel

from agent._completion import (
    Completion,
    StreamedCalls,
    content,
    delta_text,
    message_calls,
    message_text,
    usage_of,
)
from agent._wire import WireClient
from agent.clients import ClientPool
from agent.context import SUMMARY_PREFIX, Calibration, Window, fit, prompt_budget, prompt_chars
from agent.tool_loop import AgentTools, Answered, Limits, ToolLoop
from agent.tool_loop import Outcome as LoopOutcome
from gateway.config import AgentConfig, ModelConfig, ModelEndpoint, NamedModels
from gateway.config_tools import ResolvedProfile
from gateway.errors import GatewayError, ModelNotConfigured
from gateway.events import ModelTokensUsed, PolicyDecided
from gateway.messages import (
    AttemptFailed,
    ChatMessage,
    Failure,
    Image,
    ReplyDelta,
    TurnResult,
    Usage,
    platform_of,
)
from gateway.ports import ReplyStream, TurnTools, Watch
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
#: How long a turn with tools waits for servers still on their first try (``ToolBox.started``).
FIRST_TRY_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class _Chain:
    """One model chain (``[model]``, or a ``[[models]]`` one) and its policy."""

    model: ModelConfig
    chain: tuple[ModelEndpoint, ...]
    policy: ModelPolicy


@dataclass(frozen=True, slots=True)
class _Generation:
    """One config's model side: a turn keeps the one it started with to its end, so a reload
    (:meth:`Agent.reconfigure`) changes the next turn and never a running one. ``chains``:
    by name, ``""`` being ``[model]``."""

    model: ModelConfig | None
    config: AgentConfig
    chains: Mapping[str, _Chain]

    @property
    def primary(self) -> _Chain | None:
        return self.chains.get("")

    def of(self, model: ModelConfig | None) -> _Chain | None:
        """The chain a profile names (``[model]`` for ``model`` None or ``[model]`` itself)."""
        name = model.name if isinstance(model, NamedModels) else ""
        return self.chains.get(name)


class Agent:
    def __init__(
        self,
        model: ModelConfig | None,
        config: AgentConfig,
        clients: ClientPool,
        *,
        observe: Observe = lambda event: None,
        clock: Callable[[], float] = time.monotonic,
        models: Sequence[NamedModels] = (),
        profile: Callable[[str], ResolvedProfile] | None = None,
        tools: AgentTools | None = None,
    ) -> None:
        """``models``: the named chains profiles may choose; ``profile``: which profile a
        conversation gets (read at each turn: a reload may change it); ``tools``: what the
        tool loop calls and where its steps go (SPEC 15)."""
        self._clients = clients
        self._observe = observe
        self._clock = clock
        self._profile = profile
        self._tools = tools
        self.calibration = Calibration()
        # conversation -> (estimated prompt tokens of its last request, that endpoint's window)
        self._context: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._gen = self._generation(model, config, models)

    def _generation(
        self, model: ModelConfig | None, config: AgentConfig, models: Sequence[NamedModels]
    ) -> _Generation:
        chains: dict[str, _Chain] = {}
        for name, chosen in [("", model), *((m.name, m) for m in models)]:
            if chosen is None:
                continue
            policy = ModelPolicy(
                chosen.chain,
                backoff=Backoff(chosen.backoff_base_s, chosen.backoff_cap_s),
                retry_after_cap=chosen.retry_after_cap_s,
                observe=self._observe,
                clock=self._clock,
            )
            chains[name] = _Chain(chosen, chosen.chain, policy)
        return _Generation(model, config, chains)

    async def reconfigure(
        self, model: ModelConfig | None, config: AgentConfig, models: Sequence[NamedModels] = ()
    ) -> None:
        """Use these model chains and agent config from the next turn on (a reload). Running
        turns finish on the chain they started with; the clients of keys no longer configured
        are closed once no call borrows them. Benched keys start unbenched (a new policy)."""
        self._gen = self._generation(model, config, models)
        await self._clients.retire_except(
            {
                (e.base_url, key, e.timeout_s)
                for c in self._gen.chains.values()
                for e in c.chain
                for key in e.api_keys
            }
        )

    def __repr__(self) -> str:
        model = self._gen.model
        return f"<Agent model={model.model if model else None!r}>"

    @property
    def chain(self) -> tuple[ModelEndpoint, ...]:
        primary = self._gen.primary
        return primary.chain if primary else ()

    @property
    def policy(self) -> ModelPolicy | None:
        primary = self._gen.primary
        return primary.policy if primary else None

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
        extra: Sequence[dict[str, Any]] = (),
    ) -> tuple[Messages, Window]:
        """The request to ``endpoint``: what of ``history`` fits its window (``share`` of it:
        compaction asks what would fit in part of it), and the window as built.
        ``instructions``: this turn's extra system message (``/v1/responses``); ``config``:
        the turn's agent config (else the current one). ``images``: the new message's, sent
        as ``image_url`` parts (with the history's resolved ones) to a model that sees them.
        ``extra``: the turn's tool steps so far, after the new message (SPEC 15)."""
        config = config or self._config
        vision = endpoint.sees_images
        system = config.system_prompt
        budget = prompt_budget(endpoint)
        ratio = self.calibration.ratio(endpoint)
        fixed = len(system) + len(text) + len(instructions or "") + prompt_chars(extra)
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
                {"role": m.role, "content": content(m.content, m.images)}
                if vision and m.images
                else {"role": m.role, "content": m.content}
                for m in history[len(history) - kept :]
            ]
        )
        messages.append({"role": "user", "content": content(text, images if vision else ())})
        messages.extend(extra)
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
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> Completion:
        """One model call, its errors translated; no retries here. ``before_call`` runs
        last before the request is sent; if it cancelled the turn, nothing is sent. With
        ``stream``, the model streams and each piece is put there as it arrives. ``tools``:
        the functions offered (OpenAI's ``tools``), whose calls the answer may carry.

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
        if tools:
            body["tools"] = list(tools)
        async with self._clients.wire(endpoint, api_key, rebuild=rebuild) as wire:
            if before_call is not None:
                before_call()
                await anyio.lowlevel.checkpoint_if_cancelled()
            if stream is not None:
                done = await self._streamed(wire, endpoint.model, body, stream, attempt)
            else:
                reply = await wire.chat(body, endpoint.model)
                choices = reply.get("choices")
                text, usage = message_text(choices), usage_of(reply.get("usage")) or Usage()
                done = Completion(text, usage, message_calls(choices))
        usage = done.usage
        self._observe(ModelTokensUsed(endpoint.model, usage.prompt_tokens, usage.completion_tokens))
        return done

    async def _streamed(
        self,
        wire: WireClient,
        model: str,
        body: dict[str, Any],
        stream: ReplyStream,
        attempt: int,
    ) -> Completion:
        """A streamed call: pieces to ``stream`` as they arrive; the text and usage at the end.
        A cut stream raises ProviderUnreachable (a stall, ProviderTimeout), like any call.

        The events are read off aiohttp by :mod:`agent._sse`: openai's ``AsyncStream`` was
        most of the agent's CPU per chunk, and its ``httpx2`` layer over aiohttp half of what
        was left after that."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        pieces: list[str] = []
        usage = Usage()
        calls = StreamedCalls()
        try:
            async with wire.stream(body, model) as events:
                async for chunks in events:
                    for chunk in chunks:  # one delta each (a peer client sees each)
                        if not isinstance(chunk, dict):
                            continue
                        choices = chunk.get("choices")
                        text = delta_text(choices)
                        if text:
                            pieces.append(text)
                            stream.put(ReplyDelta(text, attempt))
                        calls.add(choices)
                        usage = usage_of(chunk.get("usage")) or usage
        except GatewayError as exc:
            stream.put(AttemptFailed(attempt, classify(exc).reason))
            if stream.binding:
                raise AnswerShown(exc) from exc
            raise
        return Completion("".join(pieces), usage, calls.done())

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
        tools: TurnTools | None = None,
    ) -> TurnResult:
        """``summary``: the conversation's compaction summary, sent before the history.
        ``images``: a turn with images skips the models that cannot see them; when none
        can, the text is answered and the reply says so (SPEC 9). ``tools``: the turn's part
        in the tool loop (SPEC 15), when the conversation's profile offers tools."""
        gen = self._gen  # this turn's, whatever a reload does meanwhile
        profile = self._profile(conversation) if self._profile is not None else None
        chosen = gen.of(profile.model) if profile is not None else gen.primary
        if chosen is None:
            failure = classify(ModelNotConfigured("no model is configured"))
            return TurnResult(reply=failure_reply(failure), failure=failure)
        config = gen.config
        if profile is not None and profile.system_prompt != config.system_prompt:
            config = dataclasses.replace(config, system_prompt=profile.system_prompt)
        loop = await self._loop(conversation, turn, profile, tools, watch, config)
        request = _Request(
            conversation, history, text, summary, images, config, watch, before_call, loop
        )
        windows = [
            self.build(e, (), text, instructions=request.instructions, config=config)[1]
            for e in chosen.chain
        ]
        if not any(w.fits for w in windows):
            return self._too_long(conversation, turn, windows[0], chosen.chain[0])
        sees = [e.sees_images for e in chosen.chain]
        unseen = bool(images) and not any(sees)
        usable = sees if images and not unseen else None
        step = partial(self._step, chosen, request, itertools.count(1), turn, usable)
        try:
            outcome = await loop.run(step) if loop is not None else await _plain(step)
        except TurnFailed as exc:
            return TurnResult(
                reply=failure_reply(exc.failure),
                failure=exc.failure,
                fell_back=exc.fell_back,
                shown=isinstance(exc.__cause__, AnswerShown),
            )
        reply = outcome.reply or "(the model returned an empty reply)"
        return TurnResult(
            reply=f"{IMAGES_UNSEEN}\n\n{reply}" if unseen else reply,
            model=outcome.model,
            usage=outcome.usage,
            fell_back=outcome.fell_back,
        )

    async def _step(
        self,
        chosen: _Chain,
        request: _Request,
        attempts: Iterator[int],
        turn: int,
        usable: Sequence[bool] | None,
        extra: Messages,
    ) -> Answered:
        """One model call of the turn under the policy (retries, rotation, fallback), with
        the tool steps so far (``extra``)."""

        async def call(index: int, api_key: str, *, rebuild: bool, trimmed: bool) -> Completion:
            endpoint = chosen.chain[index]
            messages, window = self.build(
                endpoint,
                request.history,
                request.text,
                summary=request.summary,
                instructions=request.instructions,
                halve=trimmed,
                config=request.config,
                images=request.images,
                extra=extra,
            )
            self._sent(request.conversation, window)
            done = await self.complete(
                endpoint,
                api_key,
                messages,
                rebuild=rebuild,
                before_call=request.before_call,
                stream=request.stream,
                attempt=next(attempts),
                response_format=request.response_format,
                tools=request.loop.tools if request.loop is not None else (),
            )
            self.calibration.learn(endpoint, prompt_chars(messages), done.usage.prompt_tokens)
            return done

        answer = await chosen.policy.run(request.conversation, call, turn=turn, usable=usable)
        done = answer.value
        return Answered(done.text, done.usage, done.calls, answer.model, answer.fell_back)

    async def _loop(
        self,
        conversation: str,
        turn: int,
        profile: ResolvedProfile | None,
        tools: TurnTools | None,
        watch: Watch | None,
        config: AgentConfig,
    ) -> ToolLoop | None:
        """The turn's tool loop, when its profile names tools: it offers those available now
        (those that need an approval only when someone can be asked), and it is there even
        when that is none, as a re-run replays the steps it stored (SPEC 15)."""
        agent_tools = self._tools
        if agent_tools is None or tools is None or profile is None or not profile.tools:
            return None
        # A turn resumed at a start must find its stored calls' tools: their servers are still
        # connecting then, and would offer nothing.
        with anyio.move_on_after(FIRST_TRY_WAIT_S):
            await agent_tools.box.started()
        specs = agent_tools.box.offered(profile.tools)
        if tools.asker is None:
            specs = [s for s in specs if not s.approval]
        limits = Limits(
            max_parallel_tools=config.max_parallel_tools,
            max_tool_steps=config.max_tool_steps,
            max_turn_s=config.max_turn_s,
            max_tool_result_chars=config.max_tool_result_chars,
            approval_timeout_s=agent_tools.approval_timeout_s(),
        )
        return ToolLoop(
            conversation,
            turn,
            tools.first_row,
            box=agent_tools.box,
            ledger=agent_tools.ledger,
            specs=specs,
            asker=tools.asker,
            limits=limits,
            stream=watch.stream if watch is not None else None,
            observe=self._observe,
            wall=agent_tools.wall,
            clock=self._clock,
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
        return [key for c in self._gen.chains.values() for key in c.policy.benched_keys()]

    def status(self) -> dict[str, Any]:
        policy = self.policy
        if policy is None:
            return {"model": None}
        return {**policy.status(), "context": self._context}


@dataclass(frozen=True, slots=True)
class _Request:
    """What every model call of one turn sends (each endpoint gets a request built for it)."""

    conversation: str
    history: Sequence[ChatMessage]
    text: str
    summary: str | None
    images: Sequence[Image]
    config: AgentConfig
    watch: Watch | None
    before_call: Callable[[], None] | None
    loop: ToolLoop | None

    @property
    def instructions(self) -> str | None:
        return self.watch.instructions if self.watch is not None else None

    @property
    def stream(self) -> ReplyStream | None:
        """Where the model's pieces go, if it streams: a tool loop's steps set apart."""
        if self.watch is None or self.watch.stream is None or not self.config.stream:
            return None
        return self.loop.stream if self.loop is not None else self.watch.stream

    @property
    def response_format(self) -> Mapping[str, Any] | None:
        return self.watch.response_format if self.watch is not None else None


async def _plain(step: Callable[[Messages], Awaitable[Answered]]) -> LoopOutcome:
    """A turn without tools: one model call."""
    answered = await step([])
    return LoopOutcome(answered.text, answered.model, answered.usage, answered.fell_back)
