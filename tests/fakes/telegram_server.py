"""A loopback Telegram Bot API server that the real python-telegram-bot talks to in tests.

Why: the Telegram adapter's behaviour (offsets, retries, HTML limits, webhooks) lives in how
python-telegram-bot (PTB) speaks HTTP to Telegram; mocking PTB would only test our guesses about
it. This fake serves ``/bot<token>/<method>`` on 127.0.0.1 with the Bot API envelope, so tests
assert on what Telegram received and what a user saw::

    async with open_fake_telegram() as tg:
        app = (Application.builder().token(tg.token)
               .base_url(tg.base_url).base_file_url(tg.base_file_url).build())
        tg.inject_message(42, "hi")
        with anyio.fail_after(5):
            assert await tg.wait_for_sent(1) == ["echo: hi"]

Run PTB with ``PTB_TIMEDELTA=true``: otherwise PTB 22 emits a deprecation warning (an error
under ``filterwarnings=error``) while building ``RetryAfter`` for a 429.

- Files (``_telegram_files``): ``files.photo(*sizes, caption=)`` / ``files.document(...)`` /
  ``files.voice(...)`` / ``files.audio(...)`` register bytes and give the ``extra=`` that
  carries them; getFile and ``/file/bot<token>/<file_path>`` serve them; ``files.too_big``,
  ``files.fail_next_download``, ``files.downloads`` (bytes written, complete or not).
- Updates: ``inject_message(chat_id, text, ...)`` (``photo_extra()`` / ``voice_extra()`` /
  ``sticker_extra()`` for ``extra=``: placeholders no file stands behind), ``inject_update(raw)``, ``redeliver(update_id)``,
  ``pending_updates()``, ``is_confirmed(update_id)``. ``getUpdates`` long-polls for real and
  its ``offset`` confirms (drops) lower updates, so a redelivered update reaches only a poller
  whose offset is not past it (a restarted bot). A newer concurrent ``getUpdates`` makes the
  older one answer 409, as Telegram does.
- Several clients (the nodes of a cluster): each may use a path prefix of its own as its API
  origin (``f"{fake.origin}/n1"``, served as ``/n1/bot<token>/<method>``); its calls carry
  ``client="n1"``. ``polls`` records every getUpdates as a ``Poll`` (client, start, end,
  status), ``polling_clients()`` those running now, ``overlapping_polls()`` any two clients'
  getUpdates that ran at the same time (Telegram would have answered one of them 409).
- Scripted outcomes per method, consumed in order before the method runs: ``fail_next(method,
  status=, description=, retry_after=)``, ``drop_next(method)`` (connection closed, no
  response), ``hang_next(method)`` (no answer until the client gives up or the fake closes).
- Records: ``calls`` / ``calls_to(method)`` (every request as a ``Call``; params decoded;
  ``Call.port`` is the client's port, shared by the calls of one kept-alive connection),
  ``sent_messages(chat_id)`` (texts as the user saw them), ``bot_messages(chat_id)`` (Message
  objects as they are now, after edits), ``chat_actions(chat_id)``, ``commands(...)``,
  ``webhook_url`` / ``webhook_secret``, ``polls``, ``statistics()``.
- Waiting, event-driven (wrap in ``anyio.fail_after``): ``wait_until(predicate)``,
  ``wait_for_calls(method, count)``, ``wait_for_sent(count, chat_id)``,
  ``wait_for_drafts(count, chat_id)``, ``wait_for_poller()``,
  ``wait_for_confirmed(update_id)``.
- Webhooks: ``post_webhook(url, update, secret_token=)`` posts like Telegram;
  ``deliver_webhook()`` pushes pending updates to the ``setWebhook`` URL with its secret.
- Streaming: ``sendMessageDraft`` (chat_id, draft_id, text, message_thread_id, parse_mode,
  entities; private chats only, the refusal's wording being the fake's; a non-zero draft_id;
  an empty text is Telegram's "Thinking..." placeholder) is recorded as ``Draft``s:
  ``drafts(chat_id)``, ``draft_texts(chat_id, draft_id)``; a draft never becomes a message.
  ``deleteMessage`` removes a message: ``bot_messages`` then leaves it out,
  ``deleted_messages()`` lists it, and ``visible_messages(chat_id)`` gives the texts of the
  bot's messages as the chat shows them.
- Inline keyboards and callback queries (``_telegram_keyboards``): ``reply_markup`` on
  sendMessage, editMessageText and editMessageReplyMarkup is checked as the Bot API defines
  it (rows of buttons, each with a text and one action; ``callback_data`` 1-64 bytes) and
  kept on the message (``keyboard(chat_id, message_id)``); an edit without it removes the
  keyboard, as on Telegram. ``inject_callback_query(chat_id, message_id, data, user_id=)``
  is a user's click on a button the message shows now: a ``callback_query`` update with
  ``id``, ``from``, ``message`` (as it is now), ``chat_instance`` and ``data``.
  ``answerCallbackQuery`` (once per query, text up to 200 characters) is recorded:
  ``callback_answers()``.
- ``allowed_updates``: the last one a getUpdates or setWebhook gave is kept
  (``allowed_updates``), and an ``inject_message`` or ``inject_callback_query`` of a type it
  leaves out makes no update (Telegram does not create it; ``unwanted`` lists them).
  ``inject_update(raw)`` queues whatever it is given (hostile input).
- Rate limits, off unless given (``open_fake_telegram(limits=TELEGRAM_LIMITS)`` or
  ``fake.limits = TelegramLimits(...)``): sliding windows per chat, per group (a negative chat
  id) and overall over ``TelegramLimits.methods``, plus ``draft_per_chat`` for drafts
  (Telegram documents no draft limit: none by default). A call past a limit answers 429
  ``Too Many Requests: retry after N`` with ``parameters.retry_after`` N (whole seconds, as
  Telegram) and is not counted; its ``Call.retry_after`` says so, ``rate_limited()`` lists
  them. ``fake.clock`` (``time.monotonic``) times the windows and ``Call.at``; ``answers``
  records each call's HTTP status (``Answer``).

Served: getMe, getUpdates, sendMessage, sendMessageDraft, editMessageText, deleteMessage,
sendChatAction, set/get/deleteMyCommands, setWebhook, deleteWebhook, getWebhookInfo, getFile,
editMessageReplyMarkup, answerCallbackQuery, logOut, close; add more with
``register(name, handler)``. Names are case-insensitive, as in the Bot API; a wrong token is
401, an unknown method 404. HTML is parsed into entities with Telegram's error texts;
MarkdownV2 is only checked for unescaped reserved characters.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from aiohttp import ClientSession, web

from tests.fakes._file_server import client_port
from tests.fakes._rate_limits import Limit, Windows
from tests.fakes._telegram_files import Download as Download
from tests.fakes._telegram_files import FakeFiles
from tests.fakes._telegram_keyboards import CallbackAnswer as CallbackAnswer
from tests.fakes._telegram_keyboards import CallbackQueries, callback_data, inline_keyboard, wanted
from tests.fakes._telegram_text import MAX_TEXT_UTF16 as MAX_TEXT_UTF16
from tests.fakes._telegram_text import ApiError as ApiError
from tests.fakes._telegram_text import checked_text
from tests.fakes._telegram_text import parse_html as parse_html
from tests.fakes._telegram_text import parse_text as parse_text
from tests.fakes._telegram_text import utf16_len as utf16_len

JSON = dict[str, Any]
Handler = Callable[[JSON], Awaitable[Any]]

DEFAULT_TOKEN = "123456789:AAFakeTelegramTokenForBotmuxTests"
DEFAULT_USER_ID = 4242
CONFLICT_POLL = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
CONFLICT_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden: bot was blocked by the user",
    404: "Not Found", 409: "Conflict", 500: "Internal Server Error", 502: "Bad Gateway",
}  # fmt: skip
# Form values arrive as strings; PTB JSON-encodes every non-string parameter. These stay text.
_STRING_PARAMS = frozenset(
    ["text", "caption", "parse_mode", "url", "secret_token", "action", "language_code"]
)
_CHAT_ACTIONS = frozenset(
    ["typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
     "upload_document", "choose_sticker", "find_location", "record_video_note",
     "upload_video_note"]
)  # fmt: skip
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are"
    " exactly the same as a current content and reply markup of the message"
)
_COMMAND_RE = re.compile(r"^[a-z0-9_]{1,32}$")
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_BOT_COMMAND_RE = re.compile(r"^/[A-Za-z0-9_]+(?:@\w+)?")


@dataclass(frozen=True, slots=True)
class Call:
    """One request the fake received for its bot: method name, decoded params, monotonic time,
    and the client's path prefix ("" without one)."""

    method: str
    params: dict[str, Any]
    at: float
    client: str = ""
    retry_after: int | None = None  # refused with this by the fake's rate limits
    port: int = 0  # the client's TCP port: calls on one kept-alive connection share it


@dataclass(frozen=True, slots=True)
class Answer:
    """A call and the HTTP status it was answered with."""

    call: Call
    status: int


@dataclass(frozen=True, slots=True)
class Draft:
    """One sendMessageDraft that Telegram accepted: what the user's draft showed then."""

    chat_id: int
    draft_id: int
    text: str
    at: float
    message_thread_id: int | None = None


PER_CHAT, PER_GROUP, OVERALL = Limit(3, 3.0), Limit(20, 60.0), Limit(30, 1.0)


@dataclass(frozen=True, slots=True)
class TelegramLimits:
    """Telegram's flood limits (its FAQ: about 1 message per second in a chat, short bursts
    allowed; 20 per minute in a group; about 30 per second overall), as sliding windows."""

    per_chat: Limit | None = PER_CHAT
    per_group: Limit | None = PER_GROUP
    overall: Limit | None = OVERALL
    draft_per_chat: Limit | None = None
    methods: frozenset[str] = frozenset(
        ["sendmessage", "editmessagetext", "sendphoto", "senddocument", "sendvoice",
         "sendaudio", "sendvideo", "sendsticker", "sendanimation", "copymessage",
         "forwardmessage"]
    )  # fmt: skip


TELEGRAM_LIMITS = TelegramLimits()


@dataclass(slots=True)
class Poll:
    """One getUpdates, from its arrival to its answer (``ended`` None while it runs). A client
    that went away ends it too, with ``status`` None."""

    client: str
    started: float
    ended: float | None = None
    status: int | None = None

    def overlaps(self, other: Poll) -> bool:
        def end(poll: Poll) -> float:
            return float("inf") if poll.ended is None else poll.ended

        return self.started < end(other) and other.started < end(self)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A scripted answer to the next call of a method, given instead of running it."""

    kind: Literal["error", "drop", "hang"]
    status: int = 500
    description: str = ""
    retry_after: int | None = None


@dataclass(frozen=True, slots=True)
class FakeTelegramStatistics:
    calls: int
    pending_updates: int
    waiting_pollers: int
    sent_messages: int
    rate_limited: int = 0
    drafts: int = 0


def photo_extra(*, caption: str | None = None, file_id: str = "photo-1") -> JSON:
    size = {"file_id": file_id, "file_unique_id": f"u-{file_id}", "width": 90, "height": 90}
    return {"photo": [size], **({"caption": caption} if caption is not None else {})}


def voice_extra(*, duration: int = 2, file_id: str = "voice-1") -> JSON:
    voice = {"file_id": file_id, "file_unique_id": f"u-{file_id}", "duration": duration}
    return {"voice": {**voice, "mime_type": "audio/ogg"}}


def sticker_extra(*, emoji: str = "👍", file_id: str = "sticker-1") -> JSON:
    sticker = {"file_id": file_id, "file_unique_id": f"u-{file_id}", "type": "regular"}
    flags = {"is_animated": False, "is_video": False}
    return {"sticker": {**sticker, **flags, "width": 512, "height": 512, "emoji": emoji}}


class FakeTelegram:
    """One bot's view of the Bot API, served on 127.0.0.1 while started (see module docs)."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        first_update_id: int = 1,
        limits: TelegramLimits | None = None,
    ) -> None:
        self.token = token
        self.limits = limits
        self.clock: Callable[[], float] = time.monotonic
        self.answers: list[Answer] = []
        self._windows: dict[tuple[str, Limit], Windows] = {}
        self._drafts: list[Draft] = []
        self._deleted: list[tuple[int, int]] = []
        prefix = token.split(":", 1)[0]
        self.bot_user: JSON = {
            "id": int(prefix) if prefix.isdigit() else 1, "is_bot": True,
            "first_name": "botmux test", "username": "botmux_test_bot", "can_join_groups": True,
            "can_read_all_group_messages": False, "supports_inline_queries": False,
        }  # fmt: skip
        self.calls: list[Call] = []
        self.polls: list[Poll] = []
        self.origin = ""
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        self._runner: web.AppRunner | None = None
        self._closing = False
        self._changed = asyncio.Event()  # set and replaced on every change: see wait_until
        self._scripts: dict[str, deque[Outcome]] = {}
        self._methods: dict[str, tuple[str, Handler]] = {}
        self._next_update_id = first_update_id
        self._updates: dict[int, JSON] = {}  # every update ever injected
        self._pending: list[JSON] = []  # not yet confirmed, ordered by update_id
        self._poll_generation = 0
        self._waiting_pollers = 0
        self._chats: dict[int, JSON] = {}
        self._next_message_id: dict[int, int] = {}
        self._messages: dict[tuple[int, int], JSON] = {}
        self._sent: list[tuple[int, str, JSON]] = []  # chat, text when sent, the live message
        self._actions: list[tuple[int, str]] = []
        self._commands: dict[tuple[str, str], list[JSON]] = {}
        self.files = FakeFiles(self._notify)  # getFile and /file/bot<token>/<path>
        self.callbacks = CallbackQueries()
        self.allowed_updates: list[str] | None = None  # the bot's last allowed_updates
        self.unwanted: list[JSON] = []  # a user's action allowed_updates left without update
        for name, handler in {
            "getMe": self._get_me, "getUpdates": self._get_updates,
            "sendMessage": self._send_message, "editMessageText": self._edit_message_text,
            "sendMessageDraft": self._send_message_draft, "deleteMessage": self._delete_message,
            "sendChatAction": self._send_chat_action, "setMyCommands": self._set_my_commands,
            "getMyCommands": self._get_my_commands, "deleteMyCommands": self._delete_my_commands,
            "setWebhook": self._set_webhook, "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._get_webhook_info, "logOut": self._true, "close": self._true,
            "getFile": self.files.get_file,
            "editMessageReplyMarkup": self._edit_message_reply_markup,
            "answerCallbackQuery": self.callbacks.answer,
        }.items():  # fmt: skip
            self.register(name, handler)

    def __repr__(self) -> str:
        stats = self.statistics()
        where = self.origin or "stopped"
        return f"<FakeTelegram {where} calls={stats.calls} pending={stats.pending_updates}>"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/bot"

    @property
    def base_file_url(self) -> str:
        return f"{self.origin}/file/bot"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_route("*", "/{client}/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        # handler_cancellation: a long poll whose client went away must not outlive it.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.origin = f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def aclose(self) -> None:
        self._closing = True
        self._notify()  # parked long polls answer [] and hung calls end
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def register(self, method: str, handler: Handler) -> None:
        """Serve `method` with `handler(params) -> result`; raising ApiError answers an error."""
        self._methods[method.lower()] = (method, handler)

    def inject_update(self, update: Mapping[str, Any]) -> JSON:
        """Queue a raw (possibly malformed) update; an ``update_id`` is assigned if missing."""
        stored = copy.deepcopy(dict(update))
        stored.setdefault("update_id", self._next_update_id)
        self._next_update_id = max(self._next_update_id, int(stored["update_id"]) + 1)
        self._updates[stored["update_id"]] = stored
        self._enqueue(stored)
        return copy.deepcopy(stored)

    def inject_message(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        user_id: int | None = None,
        first_name: str = "Alice",
        username: str | None = None,
        chat_type: Literal["private", "group", "supergroup", "channel"] | None = None,
        chat_title: str = "botmux test group",
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        entities: list[JSON] | None = None,
        reply_to_message: Mapping[str, Any] | int | None = None,
        extra: Mapping[str, Any] | None = None,
        update_type: str = "message",
    ) -> JSON:
        """Queue a user's message as a Telegram client sends it; returns the update.

        A positive chat id is a private chat with that user; a negative one a supergroup, its
        sender DEFAULT_USER_ID. A text starting with ``/cmd`` gets its ``bot_command`` entity
        (PTB's CommandHandler needs it). ``reply_to_message`` may be a message id in this chat.
        """
        kind = chat_type or ("private" if chat_id > 0 else "supergroup")
        uid = chat_id if user_id is None and kind == "private" else user_id or DEFAULT_USER_ID
        user: JSON = {"id": uid, "is_bot": False, "first_name": first_name, "language_code": "en"}
        chat: JSON = {"id": chat_id, "type": kind}
        chat.update({"first_name": first_name} if kind == "private" else {"title": chat_title})
        if username:
            user["username"] = username
        if is_topic_message:
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        message = self._new_message(chat, user, message_thread_id, is_topic_message)
        if text is not None:
            message["text"] = text
            if entities is None and (command := _BOT_COMMAND_RE.match(text)):
                entities = [{"type": "bot_command", "offset": 0, "length": command.end()}]
        if entities:
            message["entities"] = entities
        if isinstance(reply_to_message, int):
            reply_to_message = self._messages[(chat_id, reply_to_message)]
        if reply_to_message is not None:
            message["reply_to_message"] = _without_reply(reply_to_message)
        message.update(extra or {})
        return self._made({update_type: message})

    def inject_callback_query(
        self,
        chat_id: int,
        message_id: int,
        data: str,
        *,
        user_id: int | None = None,
        first_name: str = "Alice",
        username: str | None = None,
    ) -> JSON:
        """A user clicked the button with ``data`` on the bot's message ``message_id``, as the
        message is now (LookupError: it shows no such button, or is gone); returns the
        ``callback_query`` update. The user: in a private chat its owner, else
        DEFAULT_USER_ID, unless ``user_id`` says."""
        message = self._messages.get((chat_id, message_id))
        if message is None:
            raise LookupError(f"no message {message_id} in chat {chat_id}")
        chat = message["chat"]
        uid = user_id or (chat_id if chat["type"] == "private" else DEFAULT_USER_ID)
        user: JSON = {"id": uid, "is_bot": False, "first_name": first_name, "language_code": "en"}
        if username:
            user["username"] = username
        return self._made({"callback_query": self.callbacks.make(user, message, data)})

    def _made(self, update: JSON) -> JSON:
        """A user's action: an update, unless the bot's ``allowed_updates`` leaves its type
        out (Telegram then makes none: it is kept in ``unwanted``, never delivered)."""
        (update_type,) = update.keys()
        if not wanted(update_type, self.allowed_updates):
            self.unwanted.append(copy.deepcopy(update))
            self._notify()
            return copy.deepcopy(update)
        return self.inject_update(update)

    def redeliver(self, update_id: int) -> JSON:
        """Put a confirmed update back, as if the offset had never advanced past it."""
        update = self._updates[update_id]
        if update not in self._pending:
            self._enqueue(update)
        return copy.deepcopy(update)

    def pending_updates(self) -> list[JSON]:
        return copy.deepcopy(self._pending)

    def is_confirmed(self, update_id: int) -> bool:
        return update_id in self._updates and self._updates[update_id] not in self._pending

    def fail_next(
        self,
        method: str,
        *,
        status: int = 500,
        description: str | None = None,
        retry_after: int | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` calls of `method` answer this error (a 429 has retry_after, 1 s)."""
        if status == 429:
            retry_after = 1 if retry_after is None else retry_after
            description = description or f"Too Many Requests: retry after {retry_after}"
        text = description or _DEFAULT_DESCRIPTIONS.get(status, "Error")
        self._script(method, Outcome("error", status, text, retry_after), times)

    def drop_next(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls of `method` get their connection closed, with no response."""
        self._script(method, Outcome("drop"), times)

    def hang_next(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls of `method` never answer (until the client gives up)."""
        self._script(method, Outcome("hang"), times)

    def _script(self, method: str, outcome: Outcome, times: int) -> None:
        self._scripts.setdefault(method.lower(), deque()).extend([outcome] * times)

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method.lower() == method.lower()]

    def sent_messages(self, chat_id: int | None = None) -> list[str]:
        """Texts of successful sendMessage calls in order, as the user saw them when sent."""
        return [text for chat, text, _ in self._sent if chat_id in (None, chat)]

    def bot_messages(self, chat_id: int | None = None) -> list[JSON]:
        """The Message objects the bot sent, in order, as they are now (after edits; deleted
        ones left out)."""
        return [
            copy.deepcopy(msg)
            for chat, _, msg in self._sent
            if chat_id in (None, chat) and (chat, msg["message_id"]) in self._messages
        ]

    def visible_messages(self, chat_id: int | None = None) -> list[str]:
        """Texts of the bot's messages as the chat shows them now (edited, not deleted)."""
        return [str(message.get("text", "")) for message in self.bot_messages(chat_id)]

    def deleted_messages(self, chat_id: int | None = None) -> list[tuple[int, int]]:
        """(chat id, message id) of every message deleted through deleteMessage, in order."""
        return [(chat, mid) for chat, mid in self._deleted if chat_id in (None, chat)]

    def keyboard(self, chat_id: int, message_id: int) -> list[str]:
        """The ``callback_data`` of the buttons the message shows now (none: [])."""
        message = self._messages.get((chat_id, message_id))
        return [] if message is None else callback_data(message)

    def callback_answers(self) -> list[CallbackAnswer]:
        """Every answerCallbackQuery Telegram accepted, in order."""
        return list(self.callbacks.answers)

    def drafts(self, chat_id: int | None = None) -> list[Draft]:
        return [d for d in self._drafts if chat_id in (None, d.chat_id)]

    def draft_texts(self, chat_id: int | None = None, draft_id: int | None = None) -> list[str]:
        """What the draft showed after each accepted sendMessageDraft, in order."""
        return [d.text for d in self.drafts(chat_id) if draft_id in (None, d.draft_id)]

    def rate_limited(self, method: str | None = None) -> list[Call]:
        """Calls the fake's rate limits refused (429), of one method or all."""
        return [
            call
            for call in self.calls
            if call.retry_after is not None and method in (None, call.method)
        ]

    def chat_actions(self, chat_id: int | None = None) -> list[str]:
        return [action for chat, action in self._actions if chat_id in (None, chat)]

    def commands(self, *, scope: JSON | None = None, language_code: str = "") -> list[JSON]:
        return copy.deepcopy(self._commands.get(_command_key(scope, language_code), []))

    def polling_clients(self) -> set[str]:
        """The clients with a getUpdates running now."""
        return {poll.client for poll in self.polls if poll.ended is None}

    def overlapping_polls(self) -> list[tuple[Poll, Poll]]:
        """Pairs of getUpdates from different clients that ran at the same time."""
        return [
            (a, b)
            for i, a in enumerate(self.polls)
            for b in self.polls[i + 1 :]
            if a.client != b.client and a.overlaps(b)
        ]

    def statistics(self) -> FakeTelegramStatistics:
        return FakeTelegramStatistics(
            len(self.calls),
            len(self._pending),
            self._waiting_pollers,
            len(self._sent),
            len(self.rate_limited()),
            len(self._drafts),
        )

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once `predicate()` holds; re-checked after every request and injection."""
        while not predicate():
            changed = self._changed  # taken before awaiting, so no change can be missed
            await changed.wait()

    async def wait_for_calls(self, method: str, count: int = 1) -> list[Call]:
        await self.wait_until(lambda: len(self.calls_to(method)) >= count)
        return self.calls_to(method)

    async def wait_for_sent(self, count: int, chat_id: int | None = None) -> list[str]:
        await self.wait_until(lambda: len(self.sent_messages(chat_id)) >= count)
        return self.sent_messages(chat_id)

    async def wait_for_drafts(self, count: int, chat_id: int | None = None) -> list[str]:
        await self.wait_until(lambda: len(self.drafts(chat_id)) >= count)
        return self.draft_texts(chat_id)

    async def wait_for_poller(self) -> None:
        """Return once a getUpdates long poll is parked, waiting for an update."""
        await self.wait_until(lambda: self._waiting_pollers > 0)

    async def wait_for_confirmed(self, update_id: int) -> None:
        await self.wait_until(lambda: self.is_confirmed(update_id))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def post_webhook(
        self, url: str, update: Mapping[str, Any], *, secret_token: str | None = None
    ) -> int:
        """POST an update as Telegram's webhook delivery does; returns the HTTP status."""
        headers = {} if secret_token is None else {"X-Telegram-Bot-Api-Secret-Token": secret_token}
        async with ClientSession() as session, session.post(url, json=update, headers=headers) as r:
            await r.read()
            return r.status

    async def deliver_webhook(self) -> list[int]:
        """Push pending updates to the webhook in order; a 2xx confirms one, else it stops."""
        statuses: list[int] = []
        while self._pending and self.webhook_url:
            update = self._pending[0]
            status = await self.post_webhook(
                self.webhook_url, update, secret_token=self.webhook_secret
            )
            statuses.append(status)
            if not 200 <= status < 300:
                break
            if update in self._pending:
                self._pending.remove(update)
                self._notify()
        return statuses

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error(404, "Not Found")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        return await self.files.serve(request, request.match_info["path"])

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["method"].lower() != "getupdates":
            return await self._answered(request)
        poll = Poll(request.match_info.get("client", ""), time.monotonic())
        self.polls.append(poll)
        try:
            response = await self._answered(request)
            poll.status = response.status
            return response
        finally:
            poll.ended = time.monotonic()
            self._notify()

    async def _answered(self, request: web.Request) -> web.StreamResponse:
        calls = len(self.calls)
        response = await self._answer(request)
        if len(self.calls) > calls:
            self.answers.append(Answer(self.calls[calls], response.status))
        return response

    def _rate_limit(self, method: str, params: JSON, now: float) -> int | None:
        """Decide: None admits (and counts) the call; else the whole seconds to wait."""
        limits = self.limits
        if limits is None:
            return None
        raw = params.get("chat_id")
        chat = int(raw) if isinstance(raw, int | str) and str(raw).lstrip("-").isdigit() else None
        checks: list[tuple[str, Limit | None, object]] = []
        if method in limits.methods:
            checks.append(("overall", limits.overall, "all"))
            if chat is not None:
                checks.append(("chat", limits.per_chat, chat))
                if chat < 0:
                    checks.append(("group", limits.per_group, chat))
        if method == "sendmessagedraft" and chat is not None:
            checks.append(("draft", limits.draft_per_chat, chat))
        windows = [
            (self._windows.setdefault((name, limit), Windows(limit)), key)
            for name, limit, key in checks
            if limit is not None
        ]
        wait = max((w.wait(key, now) for w, key in windows), default=0.0)
        if wait > 0:
            return max(1, math.ceil(wait))
        for w, key in windows:
            w.add(key, now)
        return None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        try:
            params = await _read_params(request)
        except ValueError:
            return _error(400, "Bad Request: can't parse request body")
        requested = request.match_info["method"]
        name, handler = self._methods.get(requested.lower(), (requested, None))
        script = self._scripts.get(requested.lower())
        outcome = script.popleft() if script else None
        now = self.clock()
        limited = None if outcome else self._rate_limit(requested.lower(), params, now)
        client = request.match_info.get("client", "")
        self.calls.append(Call(name, params, now, client, limited, client_port(request)))
        self._notify()
        if limited is not None:
            return _error(429, f"Too Many Requests: retry after {limited}", limited)
        if outcome is not None and outcome.kind == "drop":
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPInternalServerError  # never reaches the client: the socket is gone
        if outcome is not None and outcome.kind == "hang":
            await self.wait_until(lambda: self._closing)
            return _error(500, "Internal Server Error")
        if outcome is not None:
            return _error(outcome.status, outcome.description, outcome.retry_after)
        if handler is None:
            return _error(404, "Not Found: method not found")
        try:
            result = await handler(params)
        except ApiError as exc:
            return _error(exc.status, exc.description, exc.retry_after)
        return web.json_response({"ok": True, "result": result})

    async def _true(self, params: JSON) -> bool:
        return True

    async def _get_me(self, params: JSON) -> JSON:
        return dict(self.bot_user)

    async def _get_updates(self, params: JSON) -> list[JSON]:
        if self.webhook_url:
            raise ApiError(409, CONFLICT_WEBHOOK)
        self._allow(params)
        offset = _int(params, "offset", 0)
        limit = min(max(_int(params, "limit", 100), 1), 100)
        timeout = max(_int(params, "timeout", 0), 0)
        self._poll_generation += 1
        generation = self._poll_generation
        self._notify()  # an older parked poll now answers 409

        def ready() -> bool:
            self._confirm(offset)
            return self._closing or generation != self._poll_generation or bool(self._pending)

        if not ready() and timeout > 0:
            self._waiting_pollers += 1
            self._notify()
            try:
                with suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self.wait_until(ready)
            finally:
                self._waiting_pollers -= 1
        if generation != self._poll_generation:
            raise ApiError(409, CONFLICT_POLL)
        self._confirm(offset)
        return [] if self._closing else copy.deepcopy(self._pending[:limit])

    async def _send_message(self, params: JSON) -> JSON:
        chat_id = _chat_id(params)
        text, entities = checked_text(params)
        keyboard = inline_keyboard(params, inline_only=False)
        thread = params.get("message_thread_id")
        message = self._new_message(self._chat(chat_id), self.bot_user, thread, thread is not None)
        message["text"] = text
        if entities:
            message["entities"] = entities
        if keyboard is not None:
            message["reply_markup"] = keyboard
        reply = params.get("reply_parameters")
        if isinstance(reply, dict) and (chat_id, reply.get("message_id")) in self._messages:
            message["reply_to_message"] = _without_reply(
                self._messages[chat_id, reply["message_id"]]
            )
        self._sent.append((chat_id, text, message))
        return copy.deepcopy(message)

    async def _edit_message_text(self, params: JSON) -> JSON:
        message = self._messages.get((_chat_id(params), _int(params, "message_id", 0)))
        if message is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if message["from"]["id"] != self.bot_user["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        text, entities = checked_text(params)
        keyboard = inline_keyboard(params, inline_only=True)
        if (text, entities, keyboard) == (
            message.get("text"),
            message.get("entities", []),
            message.get("reply_markup"),
        ):
            raise ApiError(400, NOT_MODIFIED)
        message.update(text=text, entities=entities, edit_date=int(time.time()))
        _set_keyboard(message, keyboard)
        return copy.deepcopy(message)

    async def _edit_message_reply_markup(self, params: JSON) -> JSON:
        """Only the inline keyboard changes; without ``reply_markup`` it is removed."""
        message = self._messages.get((_chat_id(params), _int(params, "message_id", 0)))
        if message is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if message["from"]["id"] != self.bot_user["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        keyboard = inline_keyboard(params, inline_only=True)
        if keyboard == message.get("reply_markup"):
            raise ApiError(400, NOT_MODIFIED)
        message["edit_date"] = int(time.time())
        _set_keyboard(message, keyboard)
        return copy.deepcopy(message)

    async def _send_message_draft(self, params: JSON) -> bool:
        chat_id = _chat_id(params)
        if self._chat(chat_id)["type"] != "private":
            raise ApiError(400, "Bad Request: drafts can be sent only to private chats")
        draft_id = _int(params, "draft_id", 0)
        if draft_id == 0:
            raise ApiError(400, "Bad Request: parameter draft_id must be non-zero")
        raw = params.get("text")
        text = ""
        if raw not in (None, ""):  # empty: the "Thinking..." placeholder (Bot API 10.0)
            text, _ = checked_text(params)
        thread = params.get("message_thread_id")
        thread_id = None if thread is None else _int(params, "message_thread_id", 0)
        self._drafts.append(Draft(chat_id, draft_id, text, self.clock(), thread_id))
        return True

    async def _delete_message(self, params: JSON) -> bool:
        key = (_chat_id(params), _int(params, "message_id", 0))
        if key not in self._messages:
            raise ApiError(400, "Bad Request: message to delete not found")
        del self._messages[key]
        self._deleted.append(key)
        return True

    async def _send_chat_action(self, params: JSON) -> bool:
        chat_id = _chat_id(params)
        if params.get("action") not in _CHAT_ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        self._actions.append((chat_id, str(params["action"])))
        return True

    async def _set_my_commands(self, params: JSON) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise ApiError(400, "Bad Request: can't parse commands JSON object")
        for command in commands:
            if not _COMMAND_RE.match(str(command.get("command", ""))):
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise ApiError(400, "Bad Request: command description is empty")
        key = _command_key(params.get("scope"), params.get("language_code"))
        self._commands[key] = [
            {"command": c["command"], "description": c["description"]} for c in commands
        ]
        return True

    async def _get_my_commands(self, params: JSON) -> list[JSON]:
        return self.commands(
            scope=params.get("scope"), language_code=params.get("language_code") or ""
        )

    async def _delete_my_commands(self, params: JSON) -> bool:
        self._commands.pop(_command_key(params.get("scope"), params.get("language_code")), None)
        return True

    def _allow(self, params: JSON) -> None:
        """getUpdates and setWebhook: ``allowed_updates`` given applies from now on."""
        allowed = params.get("allowed_updates")
        if isinstance(allowed, list):
            self.allowed_updates = [str(kind) for kind in allowed]

    async def _set_webhook(self, params: JSON) -> bool:
        self._allow(params)
        url, secret = str(params.get("url") or ""), params.get("secret_token")
        if secret is not None and not _SECRET_RE.match(str(secret)):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        self.webhook_url, self.webhook_secret = url, str(secret) if secret and url else None
        self._drop_pending(params)
        return True

    async def _delete_webhook(self, params: JSON) -> bool:
        self.webhook_url, self.webhook_secret = "", None
        self._drop_pending(params)
        return True

    async def _get_webhook_info(self, params: JSON) -> JSON:
        info = {"url": self.webhook_url, "has_custom_certificate": False}
        info["pending_update_count"] = len(self._pending)
        return {**info, "max_connections": 40} if self.webhook_url else info

    def _enqueue(self, update: JSON) -> None:
        self._pending.append(update)
        self._pending.sort(key=lambda u: int(u["update_id"]))
        self._notify()

    def _confirm(self, offset: int) -> None:
        """getUpdates with an offset forgets every update below it (a negative: all but -N)."""
        if offset < 0:
            keep = self._pending[offset:]
        else:
            keep = [u for u in self._pending if int(u["update_id"]) >= offset]
        if len(keep) != len(self._pending):
            self._pending = keep
            self._notify()

    def _drop_pending(self, params: JSON) -> None:
        if params.get("drop_pending_updates") is True and self._pending:
            self._pending = []
            self._notify()

    def _chat(self, chat_id: int) -> JSON:
        if chat_id in self._chats:
            return self._chats[chat_id]
        if chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": "Alice"}
        kind = "supergroup" if str(chat_id).startswith("-100") else "group"
        return {"id": chat_id, "type": kind, "title": "botmux test group"}

    def _new_message(self, chat: JSON, sender: JSON, thread: Any, is_topic: bool) -> JSON:
        message_id = self._next_message_id.get(chat["id"], 1)
        self._next_message_id[chat["id"]] = message_id + 1
        message: JSON = {"message_id": message_id, "date": int(time.time())}
        message.update({"chat": copy.deepcopy(chat), "from": copy.deepcopy(sender)})
        if thread is not None:
            message["message_thread_id"] = int(thread)
        if is_topic:
            message["is_topic_message"] = True
        self._messages[chat["id"], message_id] = message
        return message


@asynccontextmanager
async def open_fake_telegram(
    token: str = DEFAULT_TOKEN, *, first_update_id: int = 1, limits: TelegramLimits | None = None
) -> AsyncIterator[FakeTelegram]:
    """Serve a FakeTelegram on 127.0.0.1 (a free port) for the duration of the block."""
    fake = FakeTelegram(token, first_update_id=first_update_id, limits=limits)
    await fake.start()
    try:
        yield fake
    finally:
        with anyio.move_on_after(5, shield=True):
            await fake.aclose()


async def _read_params(request: web.Request) -> JSON:
    """Query string, then a JSON, form-encoded or multipart body (PTB sends form-encoded)."""
    params: JSON = {key: _decode(key, value) for key, value in request.query.items()}
    if request.content_type == "application/json":
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("the JSON body is not an object")
        params.update(body)
    elif request.can_read_body:
        for key, value in (await request.post()).items():
            if isinstance(value, web.FileField):  # keep what a test asserts on, not the bytes
                params[key] = {"filename": value.filename, "content_type": value.content_type}
            else:
                params[key] = _decode(key, value if isinstance(value, str) else value.decode())
    return params


def _decode(key: str, value: str) -> Any:
    if key in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _int(params: JSON, key: str, default: int) -> int:
    try:
        return int(params.get(key, default))
    except (TypeError, ValueError):
        raise ApiError(400, f"Bad Request: wrong parameter {key} in request") from None


def _chat_id(params: JSON) -> int:
    value = params.get("chat_id")
    if value in (None, ""):
        raise ApiError(400, "Bad Request: chat_id is empty")
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        raise ApiError(400, "Bad Request: chat not found")  # no @usernames here
    return _int(params, "chat_id", 0)


def _command_key(scope: object, language_code: object) -> tuple[str, str]:
    return json.dumps(scope or {"type": "default"}, sort_keys=True), str(language_code or "")


def _set_keyboard(message: JSON, keyboard: JSON | None) -> None:
    if keyboard is None:
        message.pop("reply_markup", None)
    else:
        message["reply_markup"] = keyboard


def _without_reply(message: Mapping[str, Any]) -> JSON:
    return {k: copy.deepcopy(v) for k, v in message.items() if k != "reply_to_message"}


def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
    body: JSON = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)
