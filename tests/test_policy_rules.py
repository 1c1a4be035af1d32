"""The policy's pure parts: classification, Retry-After, backoff and the decision table.

Property-based where the input space is wide (status codes, bodies, headers, attempts).
"""

from __future__ import annotations

import email.utils
import random

import httpx2
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.errors import translate_openai_errors
from gateway.errors import ProviderError, ProviderTimeout, ProviderUnreachable
from gateway.messages import Failure
from policy import REASONS, TRANSIENT, classify, parse_retry_after
from policy.backoff import Backoff
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

QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached")


@given(
    status=st.integers(100, 599),
    code=st.one_of(st.none(), st.text(max_size=30)),
    message=st.text(max_size=200),
)
def test_every_status_and_body_gets_one_known_class(
    status: int, code: str | None, message: str
) -> None:
    failure = classify(ProviderError(message, status=status, code=code))
    assert failure.reason in REASONS
    assert failure.retryable == (failure.reason in TRANSIENT)
    if status >= 500:
        assert failure.reason == "server"
    if status in (401, 403):
        assert failure.reason == "auth"
    if status == 402:
        assert failure.reason == "quota"
    if status == 404:
        assert failure.reason == "model_not_found"


@given(code=st.sampled_from(QUOTA_CODES), message=st.text(max_size=100))
def test_a_quota_429_is_never_a_rate_limit(code: str, message: str) -> None:
    assert classify(ProviderError(message, status=429, code=code)).reason == "quota"


@given(message=st.text(alphabet="abcdefghijklmnoprstuvwxyz ", max_size=80))
def test_a_plain_429_is_a_rate_limit(message: str) -> None:
    failure = classify(
        ProviderError(message, status=429, code="rate_limit_exceeded", headers={"retry-after": "7"})
    )
    assert failure.reason == "rate_limit" and failure.retry_after == 7.0 and failure.retryable


def test_context_and_filter_400s() -> None:
    assert (
        classify(ProviderError("x", status=400, code="context_length_exceeded")).reason
        == "context_overflow"
    )
    assert (
        classify(ProviderError("This model's maximum context length is 8k", status=400)).reason
        == "context_overflow"
    )
    assert (
        classify(ProviderError("no", status=400, code="content_filter")).reason == "content_filter"
    )
    assert classify(ProviderError("no", status=422)).reason == "bad_request"
    assert classify(ProviderTimeout("t")).reason == "timeout"
    assert classify(ProviderUnreachable("c")).reason == "connection"
    assert classify(ValueError("?")) == Failure("unknown", False, detail="ValueError")


def _request() -> httpx2.Request:
    return httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (openai.APITimeoutError(request=_request()), "timeout"),  # a subclass of the next one
        (openai.APIConnectionError(request=_request()), "connection"),
        (
            openai.RateLimitError(
                "x",
                response=httpx2.Response(429, request=_request()),
                body={"code": "insufficient_quota", "message": "quota"},
            ),
            "quota",
        ),
        (
            openai.RateLimitError(
                "x",
                response=httpx2.Response(
                    429, request=_request(), headers={"retry-after-ms": "1500"}
                ),
                body=None,
            ),
            "rate_limit",
        ),
        (
            openai.AuthenticationError(
                "x", response=httpx2.Response(401, request=_request()), body=None
            ),
            "auth",
        ),
        (
            openai.PermissionDeniedError(
                "x", response=httpx2.Response(403, request=_request()), body=None
            ),
            "auth",
        ),
        (
            openai.NotFoundError("x", response=httpx2.Response(404, request=_request()), body=None),
            "model_not_found",
        ),
        (
            openai.InternalServerError(
                "x", response=httpx2.Response(529, request=_request()), body=None
            ),
            "server",
        ),
        (
            openai.APIStatusError(
                "x", response=httpx2.Response(418, request=_request()), body=None
            ),
            "bad_request",
        ),
        (openai.OpenAIError("odd"), "unknown"),
    ],
)
def test_openai_exceptions_are_translated_then_classified(exc: Exception, reason: str) -> None:
    with pytest.raises(ProviderError) as caught, translate_openai_errors("m"):
        raise exc
    failure = classify(caught.value)
    assert failure.reason == reason
    if reason == "rate_limit":
        assert failure.retry_after == 1.5


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = email.utils.formatdate(1000.0 + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=lambda: 1000.0) == 30.0
    assert parse_retry_after({"retry-after": date}, now=lambda: 2000.0) == 0.0
    for junk in ("soon", "-3", "nan", "inf", ""):
        assert parse_retry_after({"retry-after": junk}) is None
    assert parse_retry_after({}) is None


@given(
    base=st.floats(0, 10, allow_nan=False),
    cap=st.floats(0, 120, allow_nan=False),
    attempt=st.integers(0, 10_000),
    seed=st.integers(0, 2**32),
)
def test_backoff_stays_within_its_bounds(base: float, cap: float, attempt: int, seed: int) -> None:
    backoff = Backoff(base, cap)
    delay = backoff.delay(attempt, random.Random(seed))
    ceiling = backoff.ceiling(attempt)
    assert 0 <= ceiling / 2 <= delay <= ceiling <= cap + 1e-9
    assert backoff.ceiling(attempt + 1) >= ceiling


VIEW_ALONE = PoolView(has_other_key=False, next_model=None, max_retries=2)
VIEW_FALLBACK = PoolView(has_other_key=False, next_model=1, max_retries=2)


def test_recovery_resets_stale_chain_state_so_a_429_still_falls_back() -> None:
    """The reference bug: chain state left past the end survives recovery, no fallback."""
    state = TurnState(index=0, calls=2, fell_back=True)  # stale: as if the chain were walked
    timeout = Failure("timeout", True)
    decision = decide(timeout, state, VIEW_FALLBACK, retry_after_cap=60, backoff=0.1)
    assert decision.action == Recover()
    apply(state, decision.action, max_retries=2)
    assert (state.index, state.fell_back, state.recovered) == (0, False, True)
    state.calls += 1  # the one more try on the rebuilt primary...
    decision = decide(
        Failure("rate_limit", True), state, VIEW_FALLBACK, retry_after_cap=60, backoff=0.1
    )
    assert decision.action == FallBack(1)  # ...gets a 429: fall back at once


def test_a_context_overflow_is_trimmed_once_then_given_up() -> None:
    state = TurnState(index=0, calls=1)
    overflow = Failure("context_overflow", False)
    decision = decide(overflow, state, VIEW_FALLBACK, retry_after_cap=60, backoff=0.1)
    assert decision == Decision(Trim(), None)
    apply(state, decision.action, max_retries=2)
    assert state.trimmed and state.index == 0
    state.calls += 1
    again = decide(overflow, state, VIEW_FALLBACK, retry_after_cap=60, backoff=0.1)
    assert again == Decision(GiveUp(overflow), None)  # still too long: no retry, no fallback


def test_recovery_happens_once_per_turn() -> None:
    state = TurnState(index=0, calls=2, recovered=True)
    decision = decide(Failure("timeout", True), state, VIEW_ALONE, retry_after_cap=60, backoff=0.1)
    assert isinstance(decision.action, GiveUp)


@given(
    reason=st.sampled_from(REASONS),
    calls=st.integers(1, 5),
    other_key=st.booleans(),
    next_model=st.sampled_from([None, 1]),
    retry_after=st.one_of(st.none(), st.floats(0, 7200)),
)
def test_decisions_follow_the_table(
    reason: str, calls: int, other_key: bool, next_model: int | None, retry_after: float | None
) -> None:
    failure = Failure(reason, reason in TRANSIENT, retry_after=retry_after)
    view = PoolView(has_other_key=other_key, next_model=next_model, max_retries=3)
    decision = decide(
        failure, TurnState(index=0, calls=calls), view, retry_after_cap=60, backoff=0.5
    )
    action = decision.action
    if reason in ("bad_request", "content_filter", "unknown"):
        assert isinstance(action, GiveUp) and decision.bench_s is None
    if reason == "context_overflow":  # trimmed and tried once more, on the same model (SPEC 11)
        assert action == Trim() and decision.bench_s is None
    if isinstance(action, Retry) and not action.rotate:
        assert reason in TRANSIENT and action.delay <= 60
    if isinstance(action, Retry) and action.rotate:
        assert other_key and reason in ("rate_limit", "auth", "quota")
    if reason == "auth":
        assert decision.bench_s == float("inf")
    if reason == "quota":
        assert decision.bench_s == 3600
    if reason == "rate_limit" and (other_key or next_model is not None):
        assert not isinstance(action, Retry) or action.rotate  # never waits with somewhere to go
