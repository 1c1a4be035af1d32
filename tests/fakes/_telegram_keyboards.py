"""Inline keyboards and callback queries for the fake Bot API, as the Bot API defines them.

Why apart: the rules of ``reply_markup`` (an ``InlineKeyboardMarkup`` is rows of buttons,
each with a non-empty ``text`` and exactly one action; ``callback_data`` 1-64 bytes) and the
life of a callback query (made by a user's click on a button of a bot message, answered at
most once by ``answerCallbackQuery``, whose text is at most 200 characters) are pure
bookkeeping that ``telegram_server`` registers as methods and re-exports.

Telegram's semantics kept here: a message keeps its inline keyboard until an edit changes
it, and ``editMessageText`` or ``editMessageReplyMarkup`` without ``reply_markup`` removes it
(so a bot that edits a message's text must send the keyboard again to keep it). A click is
only possible on a button the message shows now.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from tests.fakes._telegram_text import ApiError

JSON = dict[str, Any]

MAX_CALLBACK_DATA = 64  # bytes
MAX_ANSWER_TEXT = 200  # characters
#: A button's action: exactly one of these (``text`` alone is a reply keyboard's button).
ACTIONS = frozenset(
    ["url", "callback_data", "web_app", "login_url", "switch_inline_query",
     "switch_inline_query_current_chat", "switch_inline_query_chosen_chat", "copy_text",
     "callback_game", "pay"]
)  # fmt: skip
#: Update types Telegram leaves out when ``allowed_updates`` is empty (or never given).
NOT_BY_DEFAULT = frozenset(["chat_member", "message_reaction", "message_reaction_count"])
QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"


def inline_keyboard(params: JSON, *, inline_only: bool) -> JSON | None:
    """The inline keyboard ``params["reply_markup"]`` gives the message (None: none), or
    ApiError(400) as Telegram refuses it. Other markups (a reply keyboard, its removal, a
    forced reply) are accepted and change nothing on the message; edits take only inline
    ones (``inline_only``)."""
    markup = params.get("reply_markup")
    if markup is None or markup == {}:
        return None
    if not isinstance(markup, dict):
        raise ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    if "inline_keyboard" not in markup:
        if inline_only or not markup.keys() & {"keyboard", "remove_keyboard", "force_reply"}:
            raise ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
        return None
    rows = markup["inline_keyboard"]
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise ApiError(400, 'Bad Request: field "inline_keyboard" must be an Array of Arrays')
    for row in rows:
        for button in row:
            _check_button(button)
    return {"inline_keyboard": copy.deepcopy(rows)}


def _check_button(button: object) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise ApiError(400, "Bad Request: can't parse inline keyboard button: field text missing")
    if not button["text"]:
        raise ApiError(400, "Bad Request: text buttons are unallowed in the inline keyboard")
    actions = button.keys() & ACTIONS
    if len(actions) != 1:
        raise ApiError(
            400,
            "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the"
            " inline keyboard",
        )
    if "callback_data" in actions:
        data = button["callback_data"]
        if not isinstance(data, str) or not 1 <= len(data.encode()) <= MAX_CALLBACK_DATA:
            raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


def callback_data(message: JSON) -> list[str]:
    """The ``callback_data`` of the buttons the message shows now, row by row."""
    rows = (message.get("reply_markup") or {}).get("inline_keyboard") or []
    return [b["callback_data"] for row in rows for b in row if "callback_data" in b]


def wanted(update_type: str, allowed: list[str] | None) -> bool:
    """Whether Telegram makes an update of this type for a bot that asked for ``allowed``
    (its last ``getUpdates`` or ``setWebhook`` that gave ``allowed_updates``; None: never)."""
    if not allowed:
        return update_type not in NOT_BY_DEFAULT
    return update_type in allowed


@dataclass(frozen=True, slots=True)
class CallbackAnswer:
    """One ``answerCallbackQuery`` Telegram accepted: what the user was shown."""

    query_id: str
    text: str
    show_alert: bool
    at: float


class CallbackQueries:
    """The callback queries users made, and the bot's answers to them."""

    def __init__(self) -> None:
        self._next = 1
        self._open: dict[str, JSON] = {}  # query id -> its callback_query, until answered
        self.made: list[JSON] = []
        self.answers: list[CallbackAnswer] = []

    def make(self, user: JSON, message: JSON, data: str) -> JSON:
        """A user clicked the button with ``data`` on the bot's ``message`` (as it is now)."""
        if data not in callback_data(message):
            raise LookupError(f"message {message['message_id']} shows no button with {data!r}")
        query_id = f"{4_000_000_000 + self._next}"
        self._next += 1
        chat_instance = str(abs(hash(("chat", message["chat"]["id"]))) % 10**18)
        query = {
            "id": query_id,
            "from": copy.deepcopy(user),
            "message": copy.deepcopy(message),
            "chat_instance": chat_instance,
            "data": data,
        }
        self._open[query_id] = query
        self.made.append(query)
        return query

    async def answer(self, params: JSON) -> bool:
        """answerCallbackQuery: once per query, a text of at most 200 characters."""
        query_id = str(params.get("callback_query_id") or "")
        if query_id not in self._open:
            raise ApiError(400, QUERY_INVALID)
        text = params.get("text")
        text = "" if text is None else str(text)
        if len(text) > MAX_ANSWER_TEXT:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        del self._open[query_id]
        alert = params.get("show_alert") in (True, "true", "True")
        self.answers.append(CallbackAnswer(query_id, text, alert, time.monotonic()))
        return True
