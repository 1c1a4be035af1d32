"""The shared retry and fallback policy for model calls (SPEC section 4), with its I/O.

:class:`ModelPolicy` is long-lived: it holds the credential pools (benches outlast turns) and
the knobs. Each turn gets a fresh :class:`~policy.decide.TurnState`. The loop is: pick the
model and key, call, and on failure classify once, let :func:`~policy.decide.decide` choose,
log and count the decision, then act (bench, wait, rotate, recover, fall back, give up).
Waits are plain ``anyio.sleep`` calls inside the turn, so ``/stop`` or shutdown ends them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import anyio

from gateway.errors import GatewayError
from gateway.events import Decision as DecisionName
from gateway.events import ModelCalled, PolicyDecided
from gateway.events import Observe as Observe  # re-exported: the agent builds a ModelPolicy
from gateway.messages import Failure, platform_of
from policy.backoff import Backoff
from policy.classify import TRANSIENT, classify
from policy.credentials import CredentialPool
from policy.decide import (
    Decision,
    FallBack,
    GiveUp,
    PoolView,
    Recover,
    Retry,
    Trim,
    TurnState,
    apply,
    decide,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Endpoint(Protocol):
    """What the policy needs to know of a model in the chain."""

    @property
    def model(self) -> str: ...

    @property
    def api_keys(self) -> Sequence[str]: ...

    @property
    def max_retries(self) -> int: ...


class CallFn(Protocol[T_co]):
    """One model call; ``rebuild``: replace the client's transport before calling;
    ``trimmed``: a context overflow was seen this turn, send half the history (SPEC 11)."""

    def __call__(
        self, index: int, api_key: str, *, rebuild: bool, trimmed: bool
    ) -> Awaitable[T_co]: ...


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    value: T
    index: int
    model: str
    fell_back: bool


class AnswerShown(GatewayError):
    """A call failed after part of its answer reached a viewer who cannot be shown a
    correction (a peer client's stream, SPEC 8): no retry, no fallback, the turn fails with
    the class of ``cause``. Raised by the call; the policy gives up at once."""

    def __init__(self, cause: GatewayError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class TurnFailed(GatewayError):
    """Every option of the policy is used up; ``failure`` is the class to report."""

    def __init__(self, failure: Failure, fell_back: bool) -> None:
        super().__init__(failure.reason)
        self.failure = failure
        self.fell_back = fell_back


@dataclass(frozen=True, slots=True)
class Where:
    """On every decision's log line: the conversation, its platform, the turn (user row)."""

    conversation: str
    platform: str
    turn: int


class ModelPolicy:
    def __init__(
        self,
        chain: Sequence[Endpoint],
        *,
        backoff: Backoff,
        retry_after_cap: float,
        observe: Observe = lambda event: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not chain:
            raise ValueError("the model chain is empty")
        self._chain = list(chain)
        self._pools = [CredentialPool(e.model, e.api_keys) for e in chain]
        self._backoff = backoff
        self._cap = retry_after_cap
        self._observe = observe
        self._clock = clock

    def __repr__(self) -> str:
        return f"<ModelPolicy chain={[e.model for e in self._chain]}>"

    def statistics(self) -> dict[str, Any]:
        now = self._clock()
        return {pool.model: pool.benched(now) for pool in self._pools}

    def benched_keys(self) -> list[tuple[str, str, str, float]]:
        """(model, key name, reason, seconds left) of every benched key."""
        now = self._clock()
        return [
            (pool.model, name, reason, until - now)
            for pool in self._pools
            for name, until, reason in pool.benched(now)
        ]

    def status(self) -> dict[str, Any]:
        """For ``/status``: the model a turn would start on, and every benched key."""
        now = self._clock()
        first = self._first_healthy(now, 0)
        lines = []
        for pool in self._pools:
            for name, until, reason in pool.benched(now):
                when = "until restart" if until == float("inf") else f"for {until - now:.0f} s"
                lines.append(f"Benched: {pool.model} {name} ({reason}) {when}")
        model = self._chain[first].model if first is not None else self._chain[0].model
        return {"model": model, "lines": lines}

    def _first_healthy(self, now: float, start: int) -> int | None:
        for index in range(start, len(self._chain)):
            if self._pools[index].pick(now) is not None:
                return index
        return None

    def _emit(
        self,
        decision: DecisionName,
        where: Where,
        index: int,
        *,
        reason: str,
        delay_s: float | None = None,
        to: str | None = None,
        seconds: float | None = None,
        key: str | None = None,
        benched_for_s: float | None = None,
    ) -> None:
        self._observe(
            PolicyDecided(
                where.conversation,
                where.platform,
                where.turn,
                decision,
                self._chain[index].model,
                reason,
                delay_s=delay_s,
                to=to,
                seconds=seconds,
                key=key,
                benched_for_s=benched_for_s,
            )
        )

    async def _wait_for_any(self, where: Where) -> int:
        """No model has a healthy key: wait for the first bench to end, if within the cap."""
        now = self._clock()
        returns = [p.earliest_return(now) for p in self._pools]
        soonest = min((r for r in returns if r is not None), key=lambda r: r[0])
        wait = soonest[0] - now
        index = returns.index(soonest)
        if wait > self._cap:
            reason = soonest[1] or "rate_limit"
            failure = Failure(reason, reason in TRANSIENT)
            self._emit("give_up", where, index, reason=failure.reason, benched_for_s=wait)
            raise TurnFailed(failure, fell_back=False)
        self._emit("wait_bench", where, index, reason=soonest[1], seconds=round(wait, 3))
        await anyio.sleep(wait)
        return index

    async def run(self, conversation: str, call: CallFn[T], *, turn: int = 0) -> Answer[T]:
        """Run one model call to success under the policy, or raise :class:`TurnFailed`.

        ``turn`` (the user row's id) goes into every decision's log line with the conversation.
        """
        where = Where(conversation, platform_of(conversation), turn)
        state = TurnState()
        first = self._first_healthy(self._clock(), 0)
        state.index = first if first is not None else await self._wait_for_any(where)
        key: str | None = None
        rebuild = False
        while True:
            pool, endpoint = self._pools[state.index], self._chain[state.index]
            if key is None:
                key = pool.pick(self._clock())
                if key is None:  # benched since we chose this model (another turn's failure)
                    following = self._first_healthy(self._clock(), state.index + 1)
                    target = following if following is not None else await self._wait_for_any(where)
                    apply(state, FallBack(target), endpoint.max_retries)
                    continue
            pool.used(key, self._clock())
            state.calls += 1
            try:
                value = await call(state.index, key, rebuild=rebuild, trimmed=state.trimmed)
            except AnswerShown as exc:
                final = classify(exc.cause)
                self._observe(ModelCalled(endpoint.model, "error", final.reason))
                self._emit("give_up", where, state.index, reason=final.reason)
                raise TurnFailed(final, state.fell_back) from exc
            except GatewayError as exc:
                failure = classify(exc)
            else:
                pool.succeeded(key)
                self._observe(ModelCalled(endpoint.model, "ok", ""))
                return Answer(value, state.index, endpoint.model, state.fell_back)
            finally:
                rebuild = False
            self._observe(ModelCalled(endpoint.model, "error", failure.reason))
            decision = self._decide(failure, state, key)
            if decision.bench_s is not None:
                self._bench(where, state.index, key, failure, decision.bench_s)
            match decision.action:
                case Retry(delay=delay, rotate=rotate):
                    self._emit(
                        "rotate" if rotate else "retry",
                        where,
                        state.index,
                        reason=failure.reason,
                        delay_s=round(delay, 3),
                    )
                    if rotate:
                        key = None
                    if delay > 0:
                        await anyio.sleep(delay)
                case FallBack(to_index=target):
                    self._emit(
                        "fallback",
                        where,
                        state.index,
                        reason=failure.reason,
                        to=self._chain[target].model,
                    )
                    key = None
                case Recover():
                    self._emit("recover", where, state.index, reason=failure.reason)
                    rebuild = True
                case Trim():
                    self._emit("trim", where, state.index, reason=failure.reason)
                case GiveUp(failure=final):
                    self._emit("give_up", where, state.index, reason=final.reason)
                    raise TurnFailed(final, state.fell_back)
            apply(state, decision.action, endpoint.max_retries)

    def _decide(self, failure: Failure, state: TurnState, key: str) -> Decision:
        now = self._clock()
        pool = self._pools[state.index]
        view = PoolView(
            has_other_key=pool.pick(now, excluding=key) is not None,
            next_model=self._first_healthy(now, state.index + 1),
            max_retries=self._chain[state.index].max_retries,
        )
        return decide(
            failure,
            state,
            view,
            retry_after_cap=self._cap,
            backoff=self._backoff.delay(max(0, state.calls - 1)),
        )

    def _bench(self, where: Where, index: int, key: str, failure: Failure, seconds: float) -> None:
        pool = self._pools[index]
        pool.bench(key, self._clock() + seconds, failure.reason)
        name = pool.name(key)
        self._emit("bench", where, index, reason=failure.reason, seconds=seconds, key=name)
