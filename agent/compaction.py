"""Compaction (SPEC section 11, ``[agent] compaction = "summary"``): rows that leave the context
window are folded by the model into one stored summary per conversation, which later requests
send (as a system message) before the history that still fits.

:class:`CompactingRunner` is the turn runner in that mode: it wraps the :class:`Agent`. Before
the turn's own call it reads the stored summary and the history after it; when rows fall out of
the primary's window (or past ``history_messages``), it asks the model for a new summary (the
old one and the rows that left) and stores it, then runs the turn with the new summary and the
rows after it.

Why before the turn and not after the answer commit: the rows that left are needed by this very
turn (summarised later, they would vanish from its context); it runs inside the session actor's
turn, so it is serialised with the conversation's turns and ``/new``, ``/stop`` cancels it like
the turn, and a crash leaves nothing half-done (the summary is stored only once made, and the
next turn makes it again). It folds down to what fits in half the window (and half of
``history_messages``), so a summary call comes every few turns, not every turn.

The summary call is a model call under the failure policy. When it fails (or the store does),
the turn still answers, without the new summary (the rows that left are just left out, and the
next turn tries to fold them again): it is logged and counted (:class:`ContextCompacted`). A
fallback model with a smaller window trims its own request further, without a summary of that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.context import prompt_budget, prompt_chars
from agent.turn import Agent, Messages
from gateway.config import ModelEndpoint
from gateway.errors import StoreError
from gateway.events import ContextCompacted, Observe
from gateway.messages import (
    ChatMessage,
    ConversationSummary,
    Failure,
    Image,
    StoredMessage,
    TurnResult,
)
from gateway.ports import TurnTools, Watch
from policy.engine import TurnFailed

#: Rows read past ``history_messages``: those leave the history by count, and are folded too.
SLACK = 16
INSTRUCTION = (
    "You keep the running summary of a conversation between a user and an assistant. Write"
    " the new summary: the summary so far updated with the new messages. Keep every fact,"
    " name, number, decision and open question a later answer may need; drop greetings and"
    " repetition. Write plain sentences, at most about 300 words, and nothing but the summary."
)


class SummaryStore(Protocol):
    """What compaction needs of the store (:class:`~gateway.store.base.Store` has it)."""

    async def history(self, conversation: str, limit: int) -> list[StoredMessage]: ...

    async def summary(self, conversation: str) -> ConversationSummary | None: ...

    async def save_summary(self, conversation: str, content: str, through: int) -> bool: ...


def _chat(rows: Sequence[StoredMessage]) -> list[ChatMessage]:
    return [ChatMessage(r.role, r.content) for r in rows]


@dataclass(frozen=True, slots=True)
class CompactionStatistics:
    """What the runner summarised (``CompactingRunner.statistics()``)."""

    compactions: int  # summaries saved
    failed: int  # summaries not made or not saved (the turn went on without one)
    rows: int  # rows the saved summaries cover


class CompactingRunner:
    """The agent's turns, with the rows that left the window summarised first."""

    def __init__(
        self,
        agent: Agent,
        store: SummaryStore,
        history_messages: int,
        *,
        history_chars: int,
        observe: Observe = lambda event: None,
    ) -> None:
        self._agent = agent
        self._store = store
        self._limit = history_messages
        self._history_chars = history_chars
        self._observe = observe
        self._compactions = self._failures = self._rows = 0

    def __repr__(self) -> str:
        return f"<CompactingRunner {self._agent!r} compactions={self._compactions}>"

    def statistics(self) -> CompactionStatistics:
        return CompactionStatistics(self._compactions, self._failures, self._rows)

    def status(self) -> dict[str, Any]:
        return self._agent.status()

    async def run_turn(
        self,
        conversation: str,
        history: Sequence[ChatMessage],
        text: str,
        *,
        turn: int = 0,
        before_call: Callable[[], None] | None = None,
        watch: Watch | None = None,
        images: Sequence[Image] = (),
        tools: TurnTools | None = None,
    ) -> TurnResult:
        summary: str | None = None
        if self._agent.chain and self._limit > 0:
            try:
                summary, history = await self._prepare(conversation, text, turn, before_call)
            except StoreError:
                self._failed(conversation, "store")  # the session's own history, as without
        return await self._agent.run_turn(
            conversation,
            history,
            text,
            turn=turn,
            before_call=before_call,
            watch=watch,
            summary=summary,
            images=images,
            tools=tools,
        )

    async def _prepare(
        self, conversation: str, text: str, turn: int, before_call: Callable[[], None] | None
    ) -> tuple[str | None, list[ChatMessage]]:
        """The summary to send and the history after it, folding what left the window."""
        stored = await self._store.summary(conversation)
        rows = await self._store.history(conversation, self._limit + SLACK)
        summary = stored.content if stored else None
        fresh = [r for r in rows if r.id > (stored.through if stored else 0)]
        fold = self._to_fold(fresh, text, summary)
        if fold:
            summary, covered = await self._compact(
                conversation, summary, fresh[:fold], turn, before_call
            )
            fresh = fresh[covered:]
        return summary, _chat(fresh[-self._limit :])

    def _to_fold(self, fresh: Sequence[StoredMessage], text: str, summary: str | None) -> int:
        """How many of the oldest ``fresh`` rows to fold now (0: all still fit)."""
        primary = self._agent.chain[0]
        recent = _chat(fresh[-self._limit :])
        _, window = self._agent.build(primary, recent, text, summary=summary)
        if window.dropped == 0 and len(fresh) <= self._limit:
            return 0
        half = recent[-max(1, self._limit // 2) :]
        _, kept = self._agent.build(primary, half, text, summary=summary, share=0.5)
        return len(fresh) - kept.kept

    async def _compact(
        self,
        conversation: str,
        summary: str | None,
        rows: Sequence[StoredMessage],
        turn: int,
        before_call: Callable[[], None] | None,
    ) -> tuple[str | None, int]:
        """The new summary and how many of ``rows`` it covers (0: it failed)."""
        try:
            content, covered = await self.summarise(
                conversation, summary, _chat(rows), turn=turn, before_call=before_call
            )
        except TurnFailed as exc:
            self._failed(conversation, exc.failure.reason)
            return summary, 0
        if not content or not covered:
            self._failed(conversation, "empty")
            return summary, 0
        try:
            await self._store.save_summary(conversation, content, rows[covered - 1].id)
        except StoreError:
            self._failed(conversation, "store")  # this turn still sends it
            return content, covered
        self._compactions += 1
        self._rows += covered
        self._observe(ContextCompacted(conversation, "ok", covered, ""))
        return content, covered

    def _failed(self, conversation: str, reason: str) -> None:
        self._failures += 1
        self._observe(ContextCompacted(conversation, "failed", 0, reason))

    async def summarise(
        self,
        conversation: str,
        previous: str | None,
        rows: Sequence[ChatMessage],
        *,
        turn: int = 0,
        before_call: Callable[[], None] | None = None,
    ) -> tuple[str, int]:
        """The model's new summary (``previous`` updated with the oldest ``rows`` that fit
        one request), and how many of ``rows`` it covers. Raises :class:`TurnFailed`."""
        agent, policy = self._agent, self._agent.policy
        if policy is None:
            raise TurnFailed(Failure("model_not_found", False), fell_back=False)
        covered = 0

        async def call(index: int, api_key: str, *, rebuild: bool, trimmed: bool) -> str:
            nonlocal covered
            endpoint = agent.chain[index]
            messages, covered = self._request(endpoint, previous, rows, halve=trimmed)
            done = await agent.complete(
                endpoint, api_key, messages, rebuild=rebuild, before_call=before_call
            )
            agent.calibration.learn(endpoint, prompt_chars(messages), done.usage.prompt_tokens)
            return done.text.strip()

        answer = await policy.run(conversation, call, turn=turn)
        return answer.value, covered

    def _request(
        self,
        endpoint: ModelEndpoint,
        previous: str | None,
        rows: Sequence[ChatMessage],
        *,
        halve: bool,
    ) -> tuple[Messages, int]:
        """The summary request to ``endpoint``: the oldest of ``rows`` that fit its window
        (each row cut to a quarter of it, so one huge row cannot stop compaction)."""
        budget = prompt_budget(endpoint)
        ratio = self._agent.calibration.ratio(endpoint)
        room = min(self._history_chars, math.floor(budget * ratio) if budget else math.inf)
        room = int(room)
        earlier = (previous or "(none yet)")[: room // 2]
        head = f"The summary so far:\n{earlier}\n\nThe new messages, oldest first:\n"
        cap = max(1, room // 4)
        lines = [ChatMessage(m.role, f"{m.role.capitalize()}: {m.content[:cap]}\n") for m in rows]
        used, count = len(INSTRUCTION) + len(head), 0
        for line in lines:
            if used + len(line.content) > room:
                break
            used += len(line.content)
            count += 1
        if halve:
            count //= 2
        if 1 < count < len(rows) and rows[count - 1].role == "user":
            count -= 1  # end on an answer: the kept history starts with a question
        count = max(1, count) if rows else 0
        body = head + "".join(m.content for m in lines[:count])
        messages = [
            {"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": body},
        ]
        return messages, count
