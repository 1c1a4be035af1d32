"""The context window (SPEC section 11): which history rows a request can carry.

A request to an endpoint holds the system prompt, the compaction summary if there is one, the
history and the new user message; with ``[model] context_tokens`` set it must fit in
``context_tokens - max_output_tokens`` tokens (the provider counts ``max_tokens`` against the
window too). The oldest history rows are left out until it does, and the history is still
bounded by ``[agent] history_chars`` (and, by the caller's read, ``history_messages``).

Tokens are estimated from characters: each endpoint has a characters-per-token ratio,
:data:`DEFAULT_CHARS_PER_TOKEN` until the provider has reported the ``prompt_tokens`` of an
answered call, then moved toward each report's ratio (:class:`Calibration`). Fitting is
plain arithmetic over the rows, newest first, with no I/O: the agent decides, then calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config import ModelEndpoint
from gateway.messages import ChatMessage

DEFAULT_CHARS_PER_TOKEN = 4.0
#: How far each later report moves the ratio toward its own (1.0: trust the last one only).
LEARN_RATE = 0.5
#: Ratios outside these are not text (a provider reporting nonsense) and are not learnt.
MIN_RATIO, MAX_RATIO = 0.5, 16.0
SUMMARY_PREFIX = "Summary of the earlier conversation (older messages are not shown):\n"


@dataclass(frozen=True, slots=True)
class Window:
    """One request's context, as built: ``kept`` history rows of ``offered`` (the oldest
    ``offered - kept`` left out), its estimated prompt ``tokens`` and the endpoint's prompt
    ``budget`` (0: no token bound). ``fits``: the system prompt and the new message alone fit
    (else no history can help, and no call is made)."""

    kept: int
    offered: int
    tokens: int
    budget: int
    summary: bool = False  # the summary was sent
    fits: bool = True

    @property
    def dropped(self) -> int:
        return self.offered - self.kept


def endpoint_key(endpoint: ModelEndpoint) -> tuple[str, str]:
    return (endpoint.base_url, endpoint.model)


class Calibration:
    """Each endpoint's characters-per-token ratio, learnt from answered calls."""

    __slots__ = ("_ratios", "_reports")

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, str], float] = {}
        self._reports = 0

    def __repr__(self) -> str:
        return f"<Calibration endpoints={len(self._ratios)} reports={self._reports}>"

    def ratio(self, endpoint: ModelEndpoint) -> float:
        return self._ratios.get(endpoint_key(endpoint), DEFAULT_CHARS_PER_TOKEN)

    def tokens(self, endpoint: ModelEndpoint, chars: int) -> int:
        """The estimated token count of ``chars`` characters of text sent to ``endpoint``."""
        return math.ceil(chars / self.ratio(endpoint))

    def learn(self, endpoint: ModelEndpoint, chars: int, prompt_tokens: int) -> None:
        """An answered call sent ``chars`` characters, which the provider counted as
        ``prompt_tokens``: move the ratio toward theirs."""
        if chars <= 0 or prompt_tokens <= 0:
            return
        seen = chars / prompt_tokens
        if not MIN_RATIO <= seen <= MAX_RATIO:
            return
        key = endpoint_key(endpoint)
        current = self._ratios.get(key)
        # The first report replaces the default (a guess, not a measurement).
        self._ratios[key] = seen if current is None else current + LEARN_RATE * (seen - current)
        self._reports += 1

    def statistics(self) -> dict[tuple[str, str], float]:
        return dict(self._ratios)


def prompt_chars(messages: Sequence[dict[str, Any]]) -> int:
    """The characters of text a request's messages carry (what the estimate counts); of a
    message given as parts (SPEC 9), its text parts; of a tool step (SPEC 15), its text and
    its calls' names and arguments."""
    total = 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            total += len(c)
        elif c is not None:
            total += sum(len(p.get("text", "")) for p in c)
        for call in m.get("tool_calls") or ():
            total += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return total


def fit(
    history: Sequence[ChatMessage],
    *,
    fixed_chars: int,
    history_chars: int,
    budget: int,
    ratio: float,
    halve: bool = False,
) -> tuple[int, int]:
    """How many of the newest ``history`` rows to send, and the request's estimated tokens.

    ``fixed_chars``: what is sent whatever the history (system prompt, summary, new message).
    ``budget``: prompt tokens (0: no token bound). The kept rows start with a user message (an
    answer without its question would mislead the model). ``halve``: after a context overflow,
    only the newer half of what fits (SPEC 11).
    """
    used = 0
    start = len(history)
    limit = budget * ratio if budget else math.inf  # in characters, the whole prompt
    while start > 0:
        size = len(history[start - 1].content)
        if used + size > history_chars or fixed_chars + used + size > limit:
            break
        start -= 1
        used += size
    if halve:
        kept = len(history) - start
        start = len(history) - kept // 2
    while start < len(history) and history[start].role != "user":
        start += 1
    chars = fixed_chars + sum(len(m.content) for m in history[start:])
    return len(history) - start, math.ceil(chars / ratio)


def prompt_budget(endpoint: ModelEndpoint) -> int:
    """The prompt tokens a request to ``endpoint`` may carry; 0: no token bound."""
    if endpoint.context_tokens <= 0:
        return 0
    return max(1, endpoint.context_tokens - endpoint.max_output_tokens)
