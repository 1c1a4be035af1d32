"""A person's answer to a tool call's approval (SPEC 15): who may give it, and storing it.

Only the user whose message started the turn, or one listed in ``[tools] approvers``
(``"<platform>:<user id>"``), may answer; a peer client or an A2A peer that reached the
conversation with its token is its owner. The first answer wins and is stored
(``DecideCall``); the turn waiting for it here is woken at once, one on another node finds it
in the store (``gateway.steps``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gateway.events import Observe
from gateway.events_tools import ApprovalDecided, ApprovalRefused
from gateway.messages import APPROVAL_ANSWERS, ApprovalVerdict, CallState
from gateway.steps import Decisions
from gateway.store import CallRow, DecideCall, Store

Verdict = ApprovalVerdict
#: What the person who clicked is told, by verdict.
ANSWERS = APPROVAL_ANSWERS


@dataclass(frozen=True, slots=True)
class Decided:
    verdict: Verdict

    @property
    def text(self) -> str:
        return ANSWERS[self.verdict]


class Approvals:
    def __init__(
        self,
        store: Store,
        decisions: Decisions,
        *,
        approvers: Callable[[], tuple[str, ...]],
        observe: Observe = lambda event: None,
    ) -> None:
        self._store = store
        self._decisions = decisions
        self._approvers = approvers  # [tools] approvers, read at use (a reload)
        self._observe = observe

    def __repr__(self) -> str:
        return f"<Approvals {self._decisions!r}>"

    async def decide(
        self, platform: str, call_row: int, user_id: str, approve: bool, *, owner: bool = False
    ) -> Decided:
        """Take ``user_id``'s answer on ``platform`` to the approval of ``call_row``.
        ``owner``: the caller proved it owns the conversation (a peer token's session)."""
        by = f"{platform}:{user_id}" if user_id else platform
        found = await self._store.read(CallRow(call_row))
        if found is None:
            return self._refused(by, "unknown")
        call, turn = found
        mine = turn.platform == platform and bool(turn.sender) and turn.sender == user_id
        if not (owner or mine or by in self._approvers()):
            return self._refused(by, "not_allowed")
        if call.state != CallState.AWAITING or not await self._store.submit(
            DecideCall(call_row, approve, by)
        ):
            return self._refused(by, "decided")
        self._decisions.decided(call_row)
        decision: Literal["approved", "denied"] = "approved" if approve else "denied"
        self._observe(ApprovalDecided(turn.conversation, call.call_id, call.tool, decision, by))
        return Decided(decision)

    def _refused(self, by: str, reason: Literal["not_allowed", "decided", "unknown"]) -> Decided:
        self._observe(ApprovalRefused(by, reason))
        return Decided(reason)
