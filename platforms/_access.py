"""Who may talk to a chat bot: the allow lists and DM pairing, shared by the chat platforms.

Every chat platform asks the same questions in the same order: is the user on
``allow_users``; is the place open to everyone (a Telegram group on ``allow_chats``, a Discord
guild with ``guild_access = "everyone"``, a Slack channel on ``allow_channels``); has the
operator approved the user through pairing (Slack's user ids are strings, the others' ints). A
stranger writing privately (``may_pair``) is given a pairing code, once: the store answers
None while a code already waits, or when too many do. What counts as "open" is the
platform's rule; the order and the store calls are this module's. A store failure raises
(``GatewayError``): the caller leaves the message unacknowledged and tries it again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gateway.ports import Access as Pairing


@dataclass(frozen=True, slots=True)
class Access:
    """The verdict on one sender: allowed, or not (with a fresh pairing code to send)."""

    allowed: bool
    pairing_code: str | None = None


async def check_access(
    pairing: Pairing,
    platform: str,
    user_id: int | str,
    *,
    allow_users: Collection[int | str],
    open_here: bool,
    may_pair: bool,
    label: str,
) -> Access:
    if user_id in allow_users or open_here:
        return Access(True)
    if await pairing.is_approved(platform, str(user_id)):
        return Access(True)
    if not may_pair:
        return Access(False)
    return Access(False, await pairing.request_pairing(platform, str(user_id), label))
