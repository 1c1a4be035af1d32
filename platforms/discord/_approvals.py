"""Approvals on Discord (SPEC 15): the request as a message with Approve and Deny buttons
(message components), and the answer to a click on one (a component interaction).

The request is posted in the turn's channel (a reply to the user's message, as the answer
is) like a direct answer: not through the outbox, as it is not the turn's answer, tried
under the notices' rule (``platforms._notices``) with a nonce Discord enforces, so a repeat
cannot post it twice. It is posted as raw components, not a discord.py ``View``: a view lives
in one process's memory and times out, while a button here must work after a restart, on
any node. Each button's ``custom_id`` names the stored call (``platforms._approvals``).

A click arrives as INTERACTION_CREATE (type 3, a message component) and is decided through
``Intake.decide`` from the raw interaction. A decision answers with UPDATE_MESSAGE (type 7):
the message says who decided, its buttons gone. A refusal (not the turn's user nor an
approver, or the store failed) is an ephemeral message to that person alone; a click on a
request no longer waiting is told so and its buttons are removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import discord
from discord.http import Route

from gateway.errors import GatewayError, PlatformError
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
from platforms.discord import convert
from platforms.discord._client import BotClient
from platforms.discord._statistics import Counts
from platforms.discord.errors import TRANSLATED, translate

log = logging.getLogger(__name__)

STORE_BUSY = "I could not record that just now: please click again in a moment."
ACTION_ROW, BUTTON, SUCCESS, DANGER = 1, 2, 3, 4  # Discord's component types and styles
NO_MENTIONS: dict[str, Any] = {"parse": []}  # a tool's arguments never ping anyone


def components(call_row: int) -> list[dict[str, Any]]:
    """One action row: Approve (green) and Deny (red), each naming the call."""
    buttons = [
        {
            "type": BUTTON,
            "style": SUCCESS,
            "label": APPROVE,
            "custom_id": button_data(call_row, True),
        },
        {"type": BUTTON, "style": DANGER, "label": DENY, "custom_id": button_data(call_row, False)},
    ]
    return [{"type": ACTION_ROW, "components": buttons}]


def fenced(arguments: str) -> str:
    """The arguments in a code block, so Discord's Markdown shows them as they are (a fence
    inside them is broken up, so it cannot end the block)."""
    return "```json\n" + arguments.replace("```", "`\u200b``") + "\n```"


class DiscordAsker:
    """Asks in one turn's channel (an ``Asker``). ``client``: the running REST client, looked
    up at each request; ``asking``: the adapter's ``Asking``, which shows it."""

    def __init__(
        self,
        client: Callable[[], BotClient],
        channel_id: int,
        reply_to: int | None,
        *,
        asking: Asking,
    ) -> None:
        self._client = client
        self._channel_id = channel_id
        self._reply_to = reply_to
        self._asking = asking

    def __repr__(self) -> str:
        return f"<DiscordAsker channel={self._channel_id}>"

    async def ask(self, request: ApprovalRequest) -> None:
        payload: dict[str, Any] = {
            "content": request_text(request, fenced),
            "components": components(request.call_row),
            "allowed_mentions": NO_MENTIONS,
            "nonce": f"botmux-ap-{request.call_row}"[:25],
            "enforce_nonce": True,  # a repeated POST returns the message already made
        }
        if self._reply_to is not None:
            payload["message_reference"] = {
                "message_id": str(self._reply_to),
                "channel_id": str(self._channel_id),
                "fail_if_not_exists": False,
            }

        async def post() -> Any:
            route = Route("POST", "/channels/{channel_id}/messages", channel_id=self._channel_id)
            return await self._client().http.request(route, json=payload)

        def translated(exc: BaseException) -> PlatformError:
            return translate(exc, idempotent=True)

        await self._asking.show(request, post, errors=TRANSLATED, translate=translated)


class ChatApprovals:
    """The adapter's part in approvals: an asker for each turn, the waits that keep typing
    quiet, and the clicks."""

    def __init__(
        self,
        client: Callable[[], BotClient],
        previews: Previews,
        counts: Counts,
        *,
        reply: Callable[[], bool],
    ) -> None:
        self._client = client
        self._counts = counts
        self._reply = reply  # [discord] reply_to is not "none", now
        self.asking = Asking(previews, counts)
        self.waits = self.asking.waits

    def __repr__(self) -> str:
        return f"<ChatApprovals {self.waits!r}>"

    def asker(self, row: StoredMessage) -> DiscordAsker:
        reply_to = None
        if self._reply() and row.reply_target.isdigit():
            reply_to = int(row.reply_target)
        channel_id = convert.channel_of(row.conversation)
        return DiscordAsker(self._client, channel_id, reply_to, asking=self.asking)

    async def clicked(
        self, intake: Intake, interaction: discord.Interaction[discord.Client]
    ) -> None:
        """A component interaction: ours when its ``custom_id`` names a call. Whoever clicked
        is checked by ``decide`` (the turn's user or an approver), not by the allow lists."""
        data: dict[str, Any] = dict(interaction.data) if isinstance(interaction.data, dict) else {}
        click = read_click(data.get("custom_id"))
        user = interaction.user
        if click is None or user is None:  # none of ours, or garbage
            self._counts.ignored += 1
            return
        try:
            decided = await intake.decide(
                convert.PLATFORM, click.call_row, str(user.id), click.approve
            )
            told, verdict = decided.text, decided.verdict
        except GatewayError as exc:  # the store failed: nothing decided, they may click again
            log.warning("discord approval click not decided: the store", extra={"error": repr(exc)})
            told, verdict = STORE_BUSY, None
        self._counts.clicks += 1
        message = interaction.message
        try:
            if verdict in ("approved", "denied"):
                self.waits.answered(click.call_row)
            if verdict in ("approved", "denied") and message is not None:
                content = answered_text(message.content, click.approve, f"<@{user.id}>")
                await interaction.response.edit_message(
                    content=content, view=None, allowed_mentions=discord.AllowedMentions.none()
                )
                return
            await interaction.response.send_message(told, ephemeral=True)
            if verdict in ("decided", "unknown") and message is not None and message.components:
                await message.edit(view=None)  # its buttons do nothing any more
        except TRANSLATED as exc:
            log.warning("discord approval click not answered", extra={"error": str(translate(exc))})
