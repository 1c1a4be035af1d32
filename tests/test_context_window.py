"""The context window (SPEC section 11) against a fake model that enforces one.

The fake refuses, as OpenAI does, a request whose prompt tokens (its deterministic count:
characters / 4) plus ``max_tokens`` exceed its limit, with a 400 ``context_length_exceeded``,
and reports that count as ``prompt_tokens`` on the others. Long conversations run through the
real gateway's peer API; what is asserted is what the fake received, the replies, the rows
and the summary in the store, and ``/status``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent import Agent, ClientPool
from agent.compaction import INSTRUCTION, CompactingRunner, CompactionStatistics
from agent.context import DEFAULT_CHARS_PER_TOKEN, Calibration, fit
from gateway.config import ModelEndpoint
from gateway.errors import ProviderError
from gateway.events import ContextCompacted, Event, PolicyDecided
from gateway.messages import (
    AttemptFailed,
    ChatMessage,
    Inbound,
    ReplyDelta,
    StreamEvent,
    TurnResult,
)
from gateway.ports import Watch
from gateway.store import AdmitRow, AnswerTurn, History, SummaryOf
from gateway.store.sqlite import open_sqlite_store
from gateway.summaries import StoredSummaries
from policy import classify
from tests.fakes.openai_server import (
    FakeModel,
    Ok,
    Request,
    open_fake_model,
    rate_limited,
    server_error,
)
from tests.harness import FAST, make_config, running_gateway

pytestmark = pytest.mark.anyio

LIMIT = 4000  # the fake's window, and the config's context_tokens
OUT = 500  # max_output_tokens: the prompt gets LIMIT - OUT


def window_config(
    tmp_path: Path, fake: FakeModel, *, limit: int = LIMIT, out: int = OUT, agent: str = ""
) -> Any:
    return make_config(
        tmp_path / "b.db",
        fake.base_url,
        model_extra=f"{FAST}context_tokens = {limit}\nmax_output_tokens = {out}\n",
        extra=f"[agent]\nhistory_messages = 40\n{agent}",
    )


def is_summary(request: Request) -> bool:
    return request.messages[0].get("content") == INSTRUCTION


def summarising(fake: FakeModel) -> None:
    """The fake answers summary requests with a short numbered summary, others with echo."""
    count = iter(range(1, 1_000_000))
    fake.default = lambda r: (
        Ok(f"summary {next(count)}: the user sent numbered long messages")
        if is_summary(r)
        else Ok(f"echo: {r.last_user[:40]}")
    )


async def chat(http: aiohttp.ClientSession, url: str, text: str) -> dict[str, Any]:
    async with http.post(f"{url}/api/sessions/long/chat", json={"message": text}) as r:
        assert r.status == 200
        body: dict[str, Any] = await r.json()
        return body


def long_text(i: int) -> str:
    return f"turn {i}: " + ("lorem ipsum dolor sit amet " * 45)  # ~1,200 chars, ~300 tokens


@pytest.mark.gateway
@pytest.mark.parametrize("compaction", ["off", "summary"])
async def test_500_long_turns_never_overflow_the_window(tmp_path: Path, compaction: str) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(LIMIT)
        summarising(fake)
        config = window_config(tmp_path, fake, agent=f'compaction = "{compaction}"\n')
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            for i in range(500):
                body = await chat(http, url, long_text(i))
                assert body["failure"] is None, (i, body)
                assert body["message"]["content"].startswith("echo: turn")
            status = (await chat(http, url, "/status"))["message"]["content"]
    assert fake.overflowed == []
    assert all(fake.prompt_tokens(r) + OUT <= LIMIT for r in fake.requests)
    turns = [r for r in fake.requests if not is_summary(r)]
    assert len(turns) == 500  # one call per turn: none was refused and retried
    # The window was used, not left empty: late turns still carry several history rows.
    assert min(len(r.messages) for r in turns[100:]) >= 4
    # ...and it was full: the requests came close to the limit without passing it.
    assert max(fake.prompt_tokens(r) for r in turns) > 0.8 * (LIMIT - OUT)
    assert "Context: ~" in status and f"of {LIMIT - OUT} prompt tokens" in status
    async with open_sqlite_store(str(tmp_path / "b.db")) as store:
        summary = await store.read(SummaryOf("peer:long"))
    summaries = [r for r in fake.requests if is_summary(r)]
    if compaction == "off":
        assert summary is None and summaries == []
        return
    assert summary is not None and summary.content.startswith("summary ")
    # Folding to half the window: a summary call every few turns, not every turn.
    assert 0 < len(summaries) < 250
    # Each summary request carried the previous summary; each turn after one sent it.
    assert "summary 1:" in summaries[1].messages[1]["content"]
    last = turns[-1].messages
    assert last[1]["role"] == "system" and summary.content in last[1]["content"]


@pytest.mark.gateway
async def test_a_forced_overflow_is_trimmed_and_tried_once_more(tmp_path: Path) -> None:
    limit, out = 1500, 100
    async with open_fake_model() as fake:
        config = window_config(tmp_path, fake, limit=limit, out=out)
        text = "x" * 400
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            for _ in range(4):
                assert (await chat(http, url, text))["failure"] is None
            # Now the provider counts 2 characters a token: the estimate (4) underrates it.
            fake.enforce_context(limit, chars_per_token=2)
            before = len(fake.requests)
            body = await chat(http, url, text)
            async with http.get(f"{url}/metrics") as r:
                metrics = await r.text()
    assert body["failure"] is None
    first, second = fake.requests[before:]  # exactly two calls for that turn
    assert fake.overflowed == [before]
    assert len(second.messages) < len(first.messages)
    assert second.messages[-1] == first.messages[-1] == {"role": "user", "content": text}
    assert fake.prompt_tokens(second) + out <= limit
    assert 'botmux_policy_decisions_total{decision="trim",reason="context_overflow"} 1.0' in (
        metrics
    )


@pytest.mark.gateway
async def test_each_endpoint_gets_a_request_built_for_its_own_window(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = (
            f"{FAST}context_tokens = {LIMIT}\nmax_output_tokens = {OUT}\n"
            f'\n[[model.fallbacks]]\nbase_url = "{fake.base_url}"\nmodel = "gpt-small"\n'
            "context_tokens = 1200\nmax_output_tokens = 200\n"
        )
        config = make_config(tmp_path / "b.db", fake.base_url, model_extra=extra)
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            for i in range(8):
                await chat(http, url, long_text(i))
            fake.script(rate_limited(retry_after=120), model="gpt-test")
            before = len(fake.requests)
            body = await chat(http, url, long_text(8))
    assert body["failure"] is None
    primary, small = fake.requests[before:]
    assert (primary.model, small.model) == ("gpt-test", "gpt-small")
    assert len(small.messages) < len(primary.messages)
    assert fake.prompt_tokens(small) + 200 <= 1200 < fake.prompt_tokens(primary) + 200
    assert small.max_tokens == 200


@pytest.mark.gateway
async def test_a_message_that_alone_cannot_fit_gets_an_honest_reply(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(1000)
        config = window_config(tmp_path, fake, limit=1000, out=100)
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            body = await chat(http, url, "y" * 5000)
            assert (await chat(http, url, "short"))["failure"] is None  # and it goes on
    assert body["failure"] == {"reason": "context_overflow", "retryable": False}
    assert "too long for the model" in body["message"]["content"]
    assert "900" in body["message"]["content"]  # what it takes, honestly
    assert [r.last_user for r in fake.requests] == ["short"]  # no call for the long one


@pytest.mark.gateway
async def test_new_clears_the_summary(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(LIMIT)
        summarising(fake)
        config = window_config(tmp_path, fake, agent='compaction = "summary"\n')
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            for i in range(20):
                await chat(http, url, long_text(i))
            assert any(is_summary(r) for r in fake.requests)
            await chat(http, url, "/new")
            before = len(fake.requests)
            await chat(http, url, "fresh start")
        async with open_sqlite_store(str(tmp_path / "b.db")) as store:
            assert await store.read(SummaryOf("peer:long")) is None
    (fresh,) = fake.requests[before:]
    assert [m["role"] for m in fresh.messages] == ["system", "user"]  # no summary, no history


@pytest.mark.parametrize(
    ("status", "code", "kind", "message"),
    [
        (400, "context_length_exceeded", "invalid_request_error", "maximum context length"),
        (400, None, None, "This model's maximum context length is 4096 tokens. However, ..."),
        (400, None, "invalid_request_error", "prompt is too long: 210000 tokens > 200000"),
        (400, None, "exceed_context_size_error", "the request exceeds the available context"),
        (400, None, None, "The input token count (1200000) exceeds the maximum number of tokens"),
        (413, None, None, "Please reduce the length of the messages."),
    ],
)
def test_providers_context_errors_are_context_overflow(
    status: int, code: str | None, kind: str | None, message: str
) -> None:
    failure = classify(ProviderError(message, status=status, code=code, type=kind))
    assert (failure.reason, failure.retryable) == ("context_overflow", False)


def test_a_tokens_per_minute_limit_is_not_an_overflow() -> None:
    message = "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000."
    failure = classify(ProviderError(message, status=429, code="rate_limit_exceeded"))
    assert failure.reason == "rate_limit"


# -- the parts, on a real store and the real agent --------------------------------------------


def test_calibration_moves_the_estimate_toward_the_providers_count() -> None:
    endpoint = ModelEndpoint(model="m", context_tokens=1000)
    calibration = Calibration()
    chars = 6000
    assert calibration.tokens(endpoint, chars) == chars / DEFAULT_CHARS_PER_TOKEN
    reported = 3000  # the provider counts 2 characters a token
    errors = []
    for _ in range(4):
        errors.append(abs(calibration.tokens(endpoint, chars) - reported))
        calibration.learn(endpoint, chars, reported)
    assert errors == sorted(errors, reverse=True) and errors[0] > errors[-1]
    assert abs(calibration.tokens(endpoint, chars) - reported) < 0.1 * reported
    calibration.learn(endpoint, chars, 1)  # nonsense (6,000 a token) is not learnt
    assert abs(calibration.tokens(endpoint, chars) - reported) < 0.1 * reported
    other = ModelEndpoint(model="fallback")
    assert calibration.ratio(other) == DEFAULT_CHARS_PER_TOKEN  # per endpoint


async def test_the_agent_learns_from_prompt_tokens_and_fits_the_next_request(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(3000, chars_per_token=2)
        config = window_config(tmp_path, fake, limit=3000, out=100)
        clients = ClientPool()
        agent = Agent(config.model, config.agent, clients)
        history = [ChatMessage("user" if i % 2 == 0 else "assistant", "z" * 1000) for i in range(8)]
        try:
            # At 4 characters a token all eight rows seem to fit; the provider says otherwise.
            first = await agent.run_turn("peer:c", history, "q" * 100)
            assert first.failure is None and fake.overflowed == [0]  # trimmed, answered
            second = await agent.run_turn("peer:c", history, "q" * 100)
        finally:
            await clients.aclose()
    assert second.failure is None
    assert len(fake.requests) == 3 and fake.overflowed == [0]  # learnt: no second overflow
    assert agent.calibration.ratio(config.model.chain[0]) < 3.0
    assert agent.status()["context"]["peer:c"][1] == 2900


class Shown:
    """A viewer that can be shown a correction (a chat preview): never binding."""

    binding = False

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    def put(self, event: StreamEvent) -> None:
        self.events.append(event)


async def test_a_streamed_overflow_is_trimmed_and_streams_the_retry(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(3000, chars_per_token=2)
        config = window_config(tmp_path, fake, limit=3000, out=100)
        clients = ClientPool()
        agent = Agent(config.model, config.agent, clients)
        history = [ChatMessage("user" if i % 2 == 0 else "assistant", "z" * 1000) for i in range(8)]
        shown = Shown()
        try:
            result = await agent.run_turn("peer:s", history, "q" * 10, watch=Watch(shown))
        finally:
            await clients.aclose()
    assert result.failure is None and fake.overflowed == [0] and len(fake.requests) == 2
    assert all(r.stream for r in fake.requests)
    assert shown.events[0] == AttemptFailed(1, "context_overflow")
    assert {e.attempt for e in shown.events[1:] if isinstance(e, ReplyDelta)} == {2}
    assert "".join(e.text for e in shown.events if isinstance(e, ReplyDelta)) == result.reply


async def seed(store: Any, key: str, turns: int = 12) -> None:
    """Answered turns of ~2,400 characters each: too many for the window."""
    for i in range(turns):
        row = (await store.submit(AdmitRow(Inbound("peer", key, f"m{i}", long_text(i))))).row
        await store.submit(AnswerTurn(row, TurnResult(reply="r" * 1200, model="m"), tuple(["r"])))


async def test_a_failed_summary_never_fails_the_turn(
    tmp_path: Path, open_store: Callable[[], Any]
) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(LIMIT)
        config = window_config(tmp_path, fake)
        events: list[Event] = []
        clients = ClientPool()
        agent = Agent(config.model, config.agent, clients, observe=events.append)
        key = "peer:f"
        async with open_store() as store:
            runner = CompactingRunner(
                agent, StoredSummaries(store), 40, history_chars=200_000, observe=events.append
            )
            await seed(store, key)
            fake.script(server_error())  # the summary call (max_retries = 1: no retry)
            try:
                result = await runner.run_turn(key, [], "the question")
            finally:
                await clients.aclose()
            assert await store.read(SummaryOf(key)) is None
    assert result.failure is None and result.reply == "echo: the question"
    assert [is_summary(r) for r in fake.requests] == [True, False]
    assert ContextCompacted(key, "failed", 0, "server") in events
    assert runner.statistics().failed == 1
    assert fake.prompt_tokens(fake.requests[-1]) + OUT <= LIMIT  # the turn still fit


async def test_a_summary_folds_the_rows_that_left_and_is_sent_first(
    tmp_path: Path, open_store: Callable[[], Any]
) -> None:
    async with open_fake_model() as fake:
        fake.enforce_context(LIMIT)
        summarising(fake)
        config = window_config(tmp_path, fake)
        events: list[Event] = []
        clients = ClientPool()
        agent = Agent(config.model, config.agent, clients, observe=events.append)
        key = "peer:g"
        async with open_store() as store:
            runner = CompactingRunner(
                agent, StoredSummaries(store), 40, history_chars=200_000, observe=events.append
            )
            await seed(store, key)
            try:
                await runner.run_turn(key, [], "the question")
            finally:
                await clients.aclose()
            summary = await store.read(SummaryOf(key))
            history = await store.read(History(key, 100))
    assert summary is not None
    summarised, turn = fake.requests
    assert is_summary(summarised) and "turn 0:" in summarised.messages[1]["content"]
    folded = [r for r in history if r.id <= summary.through]
    assert folded and folded[0].content.startswith("turn 0:") and folded[-1].role == "assistant"
    assert turn.messages[1]["content"].endswith(summary.content)
    sent = [m["content"] for m in turn.messages[2:-1]]
    assert sent == [r.content for r in history if r.id > summary.through][-len(sent) :]
    assert not any(r.content in sent for r in folded if r.role == "user")  # folded: not resent
    assert [e for e in events if isinstance(e, ContextCompacted)] == [
        ContextCompacted(key, "ok", len(folded), "")
    ]
    assert not [e for e in events if isinstance(e, PolicyDecided)]


def test_fit_keeps_the_newest_rows_from_a_question() -> None:
    rows = [ChatMessage("user" if i % 2 == 0 else "assistant", "a" * 100) for i in range(10)]
    kept, tokens = fit(rows, fixed_chars=50, history_chars=10_000, budget=100, ratio=4.0)
    assert kept == 2 and rows[-kept].role == "user"  # 3 would fit: an answer is not the start
    assert tokens == 63  # (50 + 200) / 4, rounded up
    halved, _ = fit(rows, fixed_chars=50, history_chars=10_000, budget=1000, ratio=4.0, halve=True)
    assert halved == 4  # of the ten that fit, the newer half from a question
    assert fit(rows, fixed_chars=50, history_chars=10_000, budget=0, ratio=4.0)[0] == 10
    assert fit(rows, fixed_chars=50, history_chars=250, budget=0, ratio=4.0)[0] == 2


async def test_without_a_token_bound_rows_past_history_messages_are_folded(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        summarising(fake)
        config = make_config(tmp_path / "b.db", fake.base_url, model_extra=FAST)
        clients = ClientPool()
        agent = Agent(config.model, config.agent, clients)
        key = "peer:h"
        async with open_sqlite_store(str(tmp_path / "s.db")) as store:
            runner = CompactingRunner(agent, StoredSummaries(store), 6, history_chars=200_000)
            await seed(store, key)  # 24 rows, 6 may be sent
            try:
                await runner.run_turn(key, [], "one")
                await runner.run_turn(key, [], "two")  # nothing more left: no summary call
            finally:
                await clients.aclose()
            summary = await store.read(SummaryOf(key))
    assert summary is not None
    assert [is_summary(r) for r in fake.requests] == [True, False, False]
    assert summary.content in fake.requests[1].messages[1]["content"]
    # Folded down to half of history_messages, from a question.
    roles = [m["role"] for m in fake.requests[1].messages]
    assert roles == ["system", "system", "user", "assistant", "user"]
    # The read reaches history_messages + SLACK (16) rows back: the two oldest of these 24,
    # stored before compaction was on, are beyond it and left out of the summary.
    assert runner.statistics() == CompactionStatistics(compactions=1, failed=0, rows=20)
