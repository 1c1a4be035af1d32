"""``POST /api/sessions/{session_id}/approvals/{call_id}``: a peer client's answer to a tool
call that waits for a yes (SPEC 15).

The session chat stream announces the wait (``event: approval``, naming the model's call id);
the transcript lists it too (a ``tool`` row in state ``awaiting``). The wait is stored, so a
client whose stream dropped, or that answers after a restart or on another node, answers the
same way: the newest call of the session with that id that still awaits
(``CallReads.awaiting_call``) is decided through ``Intake.decide`` as its owner (the token
already proved it may use the session: a session outside its globs is 404, as if absent).

200 with the verdict (``approved``, ``denied``); 409 when the call was answered already (by
an earlier request, or by its timeout); 404 when the session has no such call waiting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from gateway.messages import CallState
from gateway.ports import CallReads, Intake
from platforms.peer import convert
from platforms.peer.errors import json_error

#: A model's call id as the route takes it (OpenAI's ``call_...``, Anthropic's ``toolu_...``
#: and the like); the OpenAPI document says the same.
CALL_ID = r"^[A-Za-z0-9._:|+=~-]{1,256}$"
_CALL_ID = re.compile(CALL_ID)
PATH = "/api/sessions/{session_id}/approvals/{call_id}"


class Host(Protocol):
    """What the route uses of the peer adapter: its intake, its reads and its access rules."""

    _intake: Intake
    _calls: CallReads

    def _session(self, request: web.Request, session_id: str) -> str: ...

    async def _read_json(self, request: web.Request) -> Any: ...


def add_approvals_route(
    app: web.Application, host: Host, *, who: Callable[[web.Request], str]
) -> None:
    """``who``: the name of the request's token ("" without tokens), stored as who decided."""

    async def handle(request: web.Request) -> web.Response:
        session_id = host._session(request, request.match_info["session_id"])
        call_id = request.match_info["call_id"]
        if not _CALL_ID.fullmatch(call_id):
            raise convert.BadRequest(
                "call_id must be 1-256 of A-Z a-z 0-9 . _ : | + = ~ -", param="call_id"
            )
        approve = approval_request(await host._read_json(request))
        conversation = convert.conversation_key(session_id)
        row = await host._calls.awaiting_call(conversation, call_id)
        if row is None:
            if await _answered(host._calls, conversation, call_id):
                return _already(call_id)
            return _unknown(call_id, session_id)
        decided = await host._intake.decide("peer", row, who(request), approve, owner=True)
        verdict = decided.verdict
        if verdict == "decided":  # another answer won the race
            return _already(call_id)
        if verdict not in ("approved", "denied"):  # deleted meanwhile
            return _unknown(call_id, session_id)
        body = {"session_id": session_id, "call_id": call_id, "verdict": verdict}
        return web.json_response(body)

    app.router.add_post(PATH, handle)


def approval_request(body: Any) -> bool:
    """``{"approve": true|false}``, exactly: anything else is 400 and decides nothing."""
    if not isinstance(body, dict) or set(body) != {"approve"}:
        raise convert.BadRequest('the body must be {"approve": true} or {"approve": false}')
    approve = body["approve"]
    if not isinstance(approve, bool):
        raise convert.BadRequest("approve must be a boolean", param="approve")
    return approve


async def _answered(calls: CallReads, conversation: str, call_id: str) -> bool:
    """Whether the newest call of ``conversation`` with ``call_id`` was asked for an approval
    and is no longer waiting (answered, or timed out). Only a miss reads this far: the call's
    row, then its turn's steps (never the whole transcript: L-8)."""
    found = await calls.tool_row(conversation, call_id)
    if found is None or found.user_row_id is None:
        return False
    for step in await calls.steps(found.user_row_id):
        for call in step.stored:
            if call.row_id == found.id:
                return call.requested_at is not None and call.state != CallState.AWAITING
    return False


def _already(call_id: str) -> web.Response:
    return json_error(409, f"the call {call_id} was answered already", "already_answered")


def _unknown(call_id: str, session_id: str) -> web.Response:
    return json_error(
        404, f"no call {call_id} awaits an approval in session {session_id}", "not_found"
    )
