"""Approvals on Slack (SPEC 15, 17): the request as a message with Block Kit Approve and Deny
buttons, and the answer to a click on one (a ``block_actions`` interaction).

The request is posted where the turn answers (its thread, its DM) like a direct answer: not
through the outbox, as it is not the turn's answer, and tried under the notices' rule
(``platforms._notices``); one that cannot be shown is logged, and the turn waits out its
timeout, a denial the model is told of. Each button's ``value`` names the stored call
(``platforms._approvals``), so a click is decided from the store alone, on any node, after a
restart too.

A click arrives as an ``interactive`` envelope (Socket Mode) or a form post of the
Interactivity URL (the Events API), through the adapter's actor like a message: it is
acknowledged once ``Intake.decide`` committed the decision (or refused it). A decision updates
the request message to say who decided, its buttons gone; a refusal (not the turn's user nor
an approver, or the store failed) is an ephemeral message to the clicker alone; a click on a
request no longer waiting is told so and its buttons are removed. Those calls leave through
the adapter's notice actor, never holding up the next envelope.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from gateway.errors import GatewayError
from gateway.messages import StoredMessage
from gateway.ports import ApprovalRequest, Intake
from platforms._approvals import (
    APPROVE,
    DENY,
    Asking,
    answered_text,
    button_data,
    read_click,
    request_text,
)
from platforms._preview import Previews
from platforms.slack import convert
from platforms.slack._notice import Ephemeral, Notice, UpdateMessage
from platforms.slack._statistics import Counts
from platforms.slack._stream import escaped
from platforms.slack.convert import Target
from platforms.slack.errors import TRANSLATED, translate

log = logging.getLogger(__name__)

STORE_BUSY = "I could not record that just now: please click again in a moment."


def fenced(arguments: str) -> str:
    """The arguments in a code block, escaped, so Slack shows them as they are (a fence
    inside them is broken up, so it cannot end the block)."""
    return "```" + escaped(arguments).replace("```", "`\u200b``") + "```"


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def blocks(text: str, call_row: int) -> list[dict[str, Any]]:
    """The request: its text, then one row of buttons, each naming the call."""

    def button(label: str, approve: bool, style: str) -> dict[str, Any]:
        return {
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "style": style,
            "action_id": f"botmux_approval_{'yes' if approve else 'no'}",
            "value": button_data(call_row, approve),
        }

    buttons = [button(APPROVE, True, "primary"), button(DENY, False, "danger")]
    return [section(text), {"type": "actions", "elements": buttons}]


class SlackAsker:
    """Asks in one turn's conversation (an ``Asker``). ``client``: the running Web API
    client, looked up at each request; ``asking``: the adapter's ``Asking``, which shows it."""

    def __init__(
        self,
        client: Callable[[], AsyncWebClient],
        target: Target,
        *,
        asking: Asking,
    ) -> None:
        self._client = client
        self._target = target
        self._asking = asking

    def __repr__(self) -> str:
        return f"<SlackAsker {self._target.key}>"

    async def ask(self, request: ApprovalRequest) -> None:
        text = request_text(request, fenced)
        args: dict[str, Any] = {
            "channel": self._target.channel,
            "text": text,  # what notifications and screen readers show
            "blocks": blocks(text, request.call_row),
            "unfurl_links": False,
        }
        if self._target.thread_ts is not None:
            args["thread_ts"] = self._target.thread_ts

        async def post() -> Any:
            return await self._client().chat_postMessage(**args)

        await self._asking.show(request, post, errors=TRANSLATED, translate=translate)


class ChatApprovals:
    """The adapter's part in approvals: an asker for each turn, the waits that keep the
    adapter's activity quiet, and the clicks."""

    def __init__(
        self,
        client: Callable[[], AsyncWebClient],
        previews: Previews,
        counts: Counts,
        notify: Callable[[Notice], None],
    ) -> None:
        self._client = client
        self._counts = counts
        self._notify = notify
        self.asking = Asking(previews, counts)
        self.waits = self.asking.waits

    def __repr__(self) -> str:
        return f"<ChatApprovals {self.waits!r}>"

    def asker(self, row: StoredMessage) -> SlackAsker:
        target = convert.parse_key(row.conversation)
        return SlackAsker(self._client, target, asking=self.asking)

    async def clicked(self, intake: Intake, click: convert.Clicked) -> None:
        """A button of ours was clicked: decided through the store (a store failure raises
        nothing: the clicker is told to click again). The answer leaves through the notices."""
        found = read_click(click.value)
        if found is None:  # none of ours, or garbage
            self._counts.ignored += 1
            return
        self._counts.clicks += 1
        try:
            decided = await intake.decide(
                convert.PLATFORM, found.call_row, click.user, found.approve
            )
            told, verdict = decided.text, decided.verdict
        except GatewayError as exc:
            log.warning("slack approval click not decided: the store", extra={"error": repr(exc)})
            told, verdict = STORE_BUSY, None
        if verdict in ("approved", "denied"):
            self.waits.answered(found.call_row)
            text = answered_text(click.message_text, found.approve, f"<@{click.user}>")
            self._notify(UpdateMessage(click.channel, click.message_ts, text, (section(text),)))
            return
        self._notify(Ephemeral(click.channel, click.user, told))
        if verdict in ("decided", "unknown"):  # its buttons do nothing any more
            text = click.message_text
            self._notify(UpdateMessage(click.channel, click.message_ts, text, (section(text),)))
