"""Message components and interactions for the fake Discord, as the API v10 defines them.

Why apart: the rules of ``components`` on a message (at most 5 action rows of at most 5
buttons; a button's style, label of at most 80 characters, and a ``custom_id`` of 1-100
characters, unique in the message, or a ``url`` for a link button), the INTERACTION_CREATE
payloads discord.py parses (a slash command, type 2, and a button click, type 3
MESSAGE_COMPONENT, which carries the message as it is now), and what each interaction
callback type does: 4 answers with a message (flag 64: ephemeral, seen by the clicker only),
6 acknowledges a click and changes nothing, 7 updates the clicked message in place. One
callback per interaction, as on Discord; a click can only be on a button the message shows.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.fakes._discord_payloads import (
    EVERYONE_PERMISSIONS,
    FakeChannel,
    FakeUser,
    RestError,
    World,
    form_error,
    member_payload,
    timestamp_of,
    user_payload,
)

JSON = dict[str, Any]

ACTION_ROW, BUTTON = 1, 2
LINK = 5
APPLICATION_COMMAND, MESSAGE_COMPONENT = 2, 3  # interaction types
MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 4, 6, 7  # callback types handled
EPHEMERAL = 64


def checked_components(body: JSON) -> list[JSON] | None:
    """The ``components`` a create or edit gives the message (None: not given), or the 400
    Discord answers."""
    if "components" not in body:
        return None
    rows = body["components"]
    if rows is None:
        return []
    if not isinstance(rows, list) or len(rows) > 5:
        raise form_error("components", "BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
    seen: set[str] = set()
    for row in rows:
        buttons = row.get("components") if isinstance(row, dict) else None
        if (
            row.get("type") != ACTION_ROW
            or not isinstance(buttons, list)
            or not 1 <= len(buttons) <= 5
        ):
            raise form_error("components", "COMPONENT_LAYOUT_WIDTH_EXCEEDED", "Invalid action row.")
        for button in buttons:
            _check_button(button, seen)
    return copy.deepcopy(rows)


def _check_button(button: object, seen: set[str]) -> None:
    if not isinstance(button, dict) or button.get("type") != BUTTON:
        raise form_error(
            "components", "UNION_TYPE_CHOICES", "Value of field type must be one of (2,)."
        )
    style, label = button.get("style"), button.get("label")
    if style not in (1, 2, 3, 4, 5, 6):
        raise form_error(
            "components", "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4, 5, 6}."
        )
    if label is not None and (not isinstance(label, str) or len(label) > 80):
        raise form_error("components", "BASE_TYPE_MAX_LENGTH", "Must be 80 or fewer in length.")
    custom_id = button.get("custom_id")
    if style == LINK:
        if custom_id is not None or not isinstance(button.get("url"), str):
            raise form_error("components", "BUTTON_COMPONENT_INVALID_URL", "A link needs a url.")
        return
    if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
        raise form_error("components", "BASE_TYPE_REQUIRED", "custom_id: 1-100 characters.")
    if custom_id in seen:
        raise form_error(
            "components",
            "COMPONENT_CUSTOM_ID_DUPLICATED",
            "Component custom id cannot be duplicated",
        )
    seen.add(custom_id)


def custom_ids(message: JSON) -> list[str]:
    """The ``custom_id`` of the buttons the message shows now, row by row."""
    return [
        str(button["custom_id"])
        for row in message.get("components") or []
        for button in row.get("components") or []
        if "custom_id" in button
    ]


def interaction(
    world: World,
    channel: FakeChannel,
    user: FakeUser,
    kind: int,
    data: JSON,
    *,
    message: JSON | None = None,
) -> JSON:
    """INTERACTION_CREATE's payload: ``user`` did ``kind`` (a command, a click) in the
    channel; with the clicked ``message``, as it is now, for a component."""
    interaction_id = world.ids.next()
    payload: JSON = {
        "id": str(interaction_id),
        "application_id": str(world.app_id),
        "type": kind,
        "data": data,
        "channel_id": str(channel.id),
        "channel": world.channel_json(channel),
        "token": f"interaction-token-{interaction_id}",
        "version": 1,
        "app_permissions": EVERYONE_PERMISSIONS,
        "locale": "en-US",
        "attachment_size_limit": 8 * 1024 * 1024,
        "entitlements": [],
        "authorizing_integration_owners": {},
    }
    if message is not None:
        payload["message"] = copy.deepcopy(message)
    if channel.guild_id is not None:
        world.add_member(channel.guild_id, user.id)
        member = member_payload(user, joined_at=timestamp_of(channel.guild_id))
        payload |= {
            "guild_id": str(channel.guild_id),
            "member": member | {"permissions": EVERYONE_PERMISSIONS},
            "context": 0,
        }
    else:
        payload |= {"user": user_payload(user), "context": 1}
    return payload


def update_message(world: World, pending: JSON, body: JSON) -> JSON:
    """Callback type 7: the clicked message takes the response's content, embeds and
    components (those given); returns it as it is now."""
    if pending["type"] != MESSAGE_COMPONENT:
        raise RestError(400, 50035, "Invalid Form Body: UPDATE_MESSAGE needs a component")
    data = body.get("data") or {}
    message = world.message_in(pending["channel_id"], pending["message_id"])
    changes = {k: data[k] for k in ("content", "embeds") if k in data}
    components = checked_components(data)
    if components is not None:
        changes["components"] = components
    edited = message | changes
    world.messages[int(pending["message_id"])] = edited
    return edited


def is_ephemeral(body: JSON) -> bool:
    return bool(int((body.get("data") or {}).get("flags") or 0) & EPHEMERAL)
