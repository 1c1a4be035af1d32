"""The loopback Telegram Bot API fake, driven by the real python-telegram-bot (no gateway).

The Telegram adapter's end-to-end tests trust this fake; these tests show that PTB accepts its
answers and that its long polling, offsets, conflicts, scripted failures and limits behave as
the real Bot API does, and what streaming relies on: drafts, edits, deletes, and 429s with
``retry_after`` past Telegram's flood limits.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from aiohttp import ClientSession, web
from telegram import Bot, BotCommand, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update
from telegram.error import (
    BadRequest,
    Conflict,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TimedOut,
)
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.fakes._rate_limits import Limit
from tests.fakes.telegram_server import (
    CONFLICT_POLL,
    FakeTelegram,
    TelegramLimits,
    open_fake_telegram,
    photo_extra,
)
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio


@pytest.fixture
async def tg(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    # PTB 22 warns when it reads a time period as an int (RetryAfter does so on construction).
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    async with open_fake_telegram() as fake:
        yield fake


def make_bot(tg: FakeTelegram, token: str | None = None) -> Bot:
    return Bot(token or tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url)


def make_app(tg: FakeTelegram) -> Application:  # type: ignore[type-arg]
    builder = Application.builder().token(tg.token)
    return builder.base_url(tg.base_url).base_file_url(tg.base_file_url).build()


@asynccontextmanager
async def polling(app: Application) -> AsyncIterator[None]:  # type: ignore[type-arg]
    async with app:
        await app.start()
        await app.updater.start_polling(poll_interval=0, timeout=10)  # type: ignore[union-attr]
        try:
            yield
        finally:
            await app.updater.stop()  # type: ignore[union-attr]
            await app.stop()


async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    assert update.effective_message is not None and update.effective_message.text is not None
    await update.effective_message.reply_text(f"echo: {update.effective_message.text}")


async def test_get_me_answers_the_bot_user(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        me = await bot.get_me()
    assert (me.id, me.is_bot, me.username) == (123456789, True, "botmux_test_bot")
    # Bot.initialize() (entering `async with bot`) already calls getMe once.
    assert [call.method for call in tg.calls] == ["getMe", "getMe"]


async def test_wrong_token_is_unauthorized(tg: FakeTelegram) -> None:
    with pytest.raises(InvalidToken, match="rejected by the server"):
        async with make_bot(tg, token="1:not-the-token") as bot:
            await bot.get_me()
    assert tg.calls == []


async def test_polling_application_receives_a_message_and_replies(tg: FakeTelegram) -> None:
    app = make_app(tg)
    app.add_handler(CommandHandler("start", echo))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    async with polling(app):
        tg.inject_message(42, "hello")
        tg.inject_message(42, "/start now")
        topic = tg.inject_message(-1001, "in a topic", message_thread_id=7, is_topic_message=True)
        with anyio.fail_after(10):
            await tg.wait_for_sent(3)
            await tg.wait_for_confirmed(topic["update_id"])
    assert tg.sent_messages(42) == ["echo: hello", "echo: /start now"]
    assert tg.sent_messages(-1001) == ["echo: in a topic"]
    topic_reply = tg.calls_to("sendMessage")[2].params
    assert (topic_reply["chat_id"], topic_reply["message_thread_id"]) == (-1001, 7)
    assert tg.pending_updates() == []
    assert tg.calls_to("deleteWebhook"), "PTB's polling bootstrap deletes any webhook"


async def test_confirmed_update_is_not_redelivered_until_redeliver(tg: FakeTelegram) -> None:
    first = tg.inject_message(42, "one")["update_id"]
    second = tg.inject_message(42, "two", extra=photo_extra(caption="look"))["update_id"]
    async with make_bot(tg) as bot:
        updates = await bot.get_updates()
        assert [u.update_id for u in updates] == [first, second]
        assert updates[1].message is not None and updates[1].message.caption == "look"
        assert [u.update_id for u in await bot.get_updates(offset=first + 1)] == [second]
        assert tg.is_confirmed(first) and not tg.is_confirmed(second)
        assert await bot.get_updates(offset=second + 1) == ()
        tg.redeliver(first)
        assert [u.update_id for u in await bot.get_updates()] == [first]
        # A poller whose offset is past a redelivered update confirms it away, as Telegram would.
        assert await bot.get_updates(offset=second + 1) == ()


async def test_restarted_application_gets_a_redelivered_update_again(tg: FakeTelegram) -> None:
    seen: list[int] = []

    async def record(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        seen.append(update.update_id)

    async def run_once() -> None:
        app = make_app(tg)
        app.add_handler(MessageHandler(filters.ALL, record))
        async with polling(app):
            with anyio.fail_after(10):
                await tg.wait_until(lambda: len(seen) == 1)
        # Stopping polls once more with the advanced offset, confirming what was fetched.
        assert tg.is_confirmed(update_id)

    update_id = tg.inject_message(42, "once")["update_id"]
    await run_once()
    tg.redeliver(update_id)  # as if the first run crashed before its offset advanced
    seen.clear()
    await run_once()
    assert seen == [update_id]


async def test_long_poll_waits_for_an_injected_update(tg: FakeTelegram) -> None:
    received: list[int] = []
    async with make_bot(tg) as bot, anyio.create_task_group() as tg_group:

        async def poll() -> None:
            received.extend(u.update_id for u in await bot.get_updates(timeout=30))

        tg_group.start_soon(poll)
        with anyio.fail_after(10):
            await tg.wait_for_poller()
        assert received == []
        update_id = tg.inject_message(42, "wake up")["update_id"]
    assert received == [update_id]


async def test_second_poller_terminates_the_first_with_conflict(tg: FakeTelegram) -> None:
    errors: list[Exception] = []

    async def poll(bot: Bot) -> None:
        try:
            await bot.get_updates(timeout=30)
        except Conflict as exc:
            errors.append(exc)

    async with make_bot(tg) as first, make_bot(tg) as second, anyio.create_task_group() as group:
        group.start_soon(poll, first)
        with anyio.fail_after(10):
            await tg.wait_for_poller()
        assert await second.get_updates(timeout=0) == ()
    assert [str(exc) for exc in errors] == [CONFLICT_POLL]


async def test_scripted_429_surfaces_as_retry_after(tg: FakeTelegram) -> None:
    tg.fail_next("sendMessage", status=429, retry_after=2)
    async with make_bot(tg) as bot:
        with pytest.raises(RetryAfter) as caught:
            await bot.send_message(42, "too fast")
        assert caught.value.retry_after == dt.timedelta(seconds=2)
        await bot.send_message(42, "later")
    assert tg.sent_messages() == ["later"]
    assert [c.params["text"] for c in tg.calls_to("sendMessage")] == ["too fast", "later"]


async def test_scripted_400_5xx_and_dropped_connection(tg: FakeTelegram) -> None:
    tg.fail_next("sendMessage", status=400, description="Bad Request: can't parse entities: x")
    tg.fail_next("sendMessage", status=502)
    tg.drop_next("sendMessage")
    tg.hang_next("sendMessage")
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="Can't parse entities: x"):
            await bot.send_message(42, "a")
        with pytest.raises(NetworkError, match="Bad Gateway"):
            await bot.send_message(42, "b")
        with pytest.raises(NetworkError, match="Server disconnected"):
            await bot.send_message(42, "c")
        with pytest.raises(TimedOut):  # a hung call never answers; the client gives up
            await bot.send_message(42, "e", read_timeout=0.05)
        sent = await bot.send_message(42, "d")
    assert sent.message_id == 1
    assert tg.sent_messages() == ["d"]
    assert [c.params["text"] for c in tg.calls_to("sendMessage")] == ["a", "b", "c", "e", "d"]


async def test_html_is_parsed_into_entities_and_bad_html_is_refused(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(
            42, "<b>bold</b> &amp; <a href='https://x.y'>😀 link</a>", "HTML"
        )
        assert sent.text == "bold & 😀 link"
        assert [(e.type, e.offset, e.length) for e in sent.entities] == [
            ("bold", 0, 4),
            ("text_link", 7, 7),
        ]
        assert sent.entities[1].url == "https://x.y"
        for bad in ("<b>open", "<blink>x</blink>", "a </i>", "<b><i>x</b></i>", "1 < 2"):
            with pytest.raises(BadRequest, match="Can't parse entities"):
                await bot.send_message(42, bad, parse_mode="HTML")
        with pytest.raises(BadRequest, match="reserved"):
            await bot.send_message(42, "end.", parse_mode="MarkdownV2")
    assert tg.sent_messages() == ["bold & 😀 link"]


async def test_a_code_block_with_its_language_and_a_blockquote(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(
            42,
            '<pre><code class="language-python">x &lt; 1</code></pre>\n'
            "<blockquote>q <code>c</code></blockquote>",
            "HTML",
        )
    assert sent.text == "x < 1\nq c"
    assert [(e.type, e.offset, e.length, e.language) for e in sent.entities] == [
        ("pre", 0, 5, "python"),  # one pre entity with its language, no code entity inside
        ("blockquote", 6, 3, None),
        ("code", 8, 1, None),
    ]


async def test_message_too_long_counts_utf16_units(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        await bot.send_message(42, "x" * 4096)
        await bot.send_message(42, "<b>" + "x" * 4096 + "</b>", parse_mode="HTML")
        for text in ("x" * 4097, "😀" * 2049):
            with pytest.raises(BadRequest, match="Message is too long"):
                await bot.send_message(42, text)
        with pytest.raises(BadRequest, match="Message text is empty"):
            await bot.send_message(42, "  ")
    assert len(tg.sent_messages()) == 2


async def test_edit_chat_action_and_commands(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        await bot.send_chat_action(42, "typing")
        sent = await bot.send_message(42, "draft")
        edited = await bot.edit_message_text("final", chat_id=42, message_id=sent.message_id)
        assert not isinstance(edited, bool) and edited.edit_date is not None
        with pytest.raises(BadRequest, match="Message is not modified"):
            await bot.edit_message_text("final", chat_id=42, message_id=sent.message_id)
        await bot.set_my_commands([BotCommand("stop", "Stop the turn"), BotCommand("new", "Reset")])
        assert [c.command for c in await bot.get_my_commands()] == ["stop", "new"]
        with pytest.raises(BadRequest, match="Bot_command_invalid"):
            await bot.set_my_commands([BotCommand("Bad-Name", "x")])
        await bot.delete_my_commands()
        assert await bot.get_my_commands() == ()
    assert tg.chat_actions(42) == ["typing"]
    assert tg.sent_messages() == ["draft"]
    assert [m["text"] for m in tg.bot_messages(42)] == ["final"]


async def test_webhook_round_trip_and_delivery(tg: FakeTelegram) -> None:
    received: list[tuple[str | None, int]] = []

    async def hook(request: web.Request) -> web.Response:
        secret = request.headers.get("X-Telegram-Bot-Api-Secret-Token")
        received.append((secret, (await request.json())["update_id"]))
        return web.Response(status=200 if secret == "s3cret" else 403)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        async with make_bot(tg) as bot:
            assert await bot.set_webhook(url, secret_token="s3cret")
            update_id = tg.inject_message(42, "via webhook")["update_id"]
            info = await bot.get_webhook_info()
            assert (info.url, info.pending_update_count) == (url, 1)
            with pytest.raises(Conflict, match="webhook is active"):
                await bot.get_updates()
            assert await tg.post_webhook(url, {"update_id": 999}, secret_token="wrong") == 403
            assert await tg.deliver_webhook() == [200]
            assert tg.is_confirmed(update_id)
            assert await bot.delete_webhook()
            assert (await bot.get_webhook_info()).url == ""
    finally:
        await runner.cleanup()
    assert received == [("wrong", 999), ("s3cret", update_id)]


async def test_raw_http_envelope_json_bodies_and_unknown_methods(tg: FakeTelegram) -> None:
    async with ClientSession() as http:
        async with http.post(f"{tg.base_url}{tg.token}/frobnicate") as response:
            assert response.status == 404
            assert await response.json() == {
                "ok": False,
                "error_code": 404,
                "description": "Not Found: method not found",
            }
        body = {"chat_id": 42, "text": "json body"}
        async with http.post(f"{tg.base_url}{tg.token}/sendmessage", json=body) as response:
            answer = await response.json()
    assert answer["ok"] is True and answer["result"]["text"] == "json body"
    assert tg.sent_messages(42) == ["json body"]
    assert tg.calls_to("sendMessage")[0].params == body


# -- streaming: drafts, edits and deletes, and 429s past Telegram's limits -------------------


async def test_drafts_grow_in_a_private_chat_and_never_become_messages(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        assert await bot.send_message_draft(42, 7, "") is True  # the "Thinking..." placeholder
        assert await bot.send_message_draft(42, 7, "Hel") is True
        assert await bot.send_message_draft(42, 7, "Hello <b>wor</b>", parse_mode="HTML")
        await bot.send_message_draft(42, 8, "another turn", message_thread_id=3)
        with pytest.raises(BadRequest, match="only to private chats"):
            await bot.send_message_draft(-1001, 7, "not in a group")
        with pytest.raises(BadRequest, match="draft_id"):
            await bot.send_message_draft(42, 0, "no id")
        with pytest.raises(BadRequest, match="too long"):
            await bot.send_message_draft(42, 7, "x" * 4097)
        await bot.send_message(42, "Hello world")
        with anyio.fail_after(5):
            assert len(await tg.wait_for_drafts(4, 42)) == 4
    assert tg.draft_texts(42, 7) == ["", "Hel", "Hello wor"]
    assert [(d.draft_id, d.message_thread_id) for d in tg.drafts(42)] == [
        (7, None),
        (7, None),
        (7, None),
        (8, 3),
    ]
    assert tg.sent_messages(42) == ["Hello world"]
    assert tg.statistics().drafts == 4


async def test_a_preview_edited_then_deleted_leaves_only_the_answer(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        preview = await bot.send_message(-1001, "Hel")
        await bot.edit_message_text("Hello wo", chat_id=-1001, message_id=preview.message_id)
        answer = await bot.send_message(-1001, "Hello world")
        assert await bot.delete_message(-1001, preview.message_id) is True
        with pytest.raises(BadRequest, match="Message to delete not found"):
            await bot.delete_message(-1001, preview.message_id)
        with pytest.raises(BadRequest, match="Message to edit not found"):
            await bot.edit_message_text("late", chat_id=-1001, message_id=preview.message_id)
    assert tg.sent_messages(-1001) == ["Hel", "Hello world"]  # as each was sent
    assert tg.visible_messages(-1001) == ["Hello world"]
    assert [m["message_id"] for m in tg.bot_messages(-1001)] == [answer.message_id]
    assert tg.deleted_messages() == [(-1001, preview.message_id)]


async def test_edits_past_the_per_chat_limit_get_429_with_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    limits = TelegramLimits(per_chat=Limit(2, 60.0), per_group=None, overall=None)
    async with open_fake_telegram(limits=limits) as tg, make_bot(tg) as bot:
        sent = await bot.send_message(42, "a")
        await bot.edit_message_text("ab", chat_id=42, message_id=sent.message_id)
        with pytest.raises(RetryAfter) as caught:
            await bot.edit_message_text("abc", chat_id=42, message_id=sent.message_id)
        other = await bot.send_message(43, "another chat is not limited")
        # Drafts are not counted by default (Telegram documents no limit for them).
        await bot.send_message_draft(42, 1, "draft")
    assert dt.timedelta(0) < caught.value.retry_after <= dt.timedelta(seconds=60)
    [refused] = tg.rate_limited()
    assert (refused.method, refused.params["text"], refused.retry_after) == (
        "editMessageText",
        "abc",
        int(caught.value.retry_after.total_seconds()),
    )
    assert tg.visible_messages(42) == ["ab"]  # the refused edit changed nothing
    assert other.text == "another chat is not limited"
    assert [(a.call.method, a.status) for a in tg.answers] == [
        ("getMe", 200),
        ("sendMessage", 200),
        ("editMessageText", 200),
        ("editMessageText", 429),
        ("sendMessage", 200),
        ("sendMessageDraft", 200),
    ]
    assert all(a.call.at <= b.call.at for a, b in itertools.pairwise(tg.answers))
    assert tg.statistics().rate_limited == 1


async def test_group_overall_and_draft_limits_and_the_window_reopens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    clock = Clock()
    limits = TelegramLimits(
        per_chat=None, per_group=Limit(2, 60.0), overall=Limit(3, 1.0), draft_per_chat=Limit(1, 1.0)
    )
    async with open_fake_telegram(limits=limits) as tg, make_bot(tg) as bot:
        tg.clock = clock
        await bot.send_message(-1001, "1")
        await bot.send_message(-1001, "2")
        with pytest.raises(RetryAfter) as group:
            await bot.send_message(-1001, "3")  # the group's 20/min, here 2/min
        await bot.send_message(42, "private chats are no group")
        with pytest.raises(RetryAfter) as overall:
            await bot.send_message(43, "the bot's overall limit")
        await bot.send_message_draft(42, 1, "d1")
        with pytest.raises(RetryAfter):
            await bot.send_message_draft(42, 1, "d2")
        clock.now += 1.0  # the overall and draft windows have passed, the group's has not
        await bot.send_message(43, "overall again")
        await bot.send_message_draft(42, 1, "d2")
        with pytest.raises(RetryAfter):
            await bot.send_message(-1001, "3")
        clock.now += 59.0
        await bot.send_message(-1001, "3")
    assert group.value.retry_after == dt.timedelta(seconds=60)
    assert overall.value.retry_after == dt.timedelta(seconds=1)
    assert tg.sent_messages(-1001) == ["1", "2", "3"]
    assert tg.draft_texts(42) == ["d1", "d2"]
    assert [c.method for c in tg.rate_limited()] == [
        "sendMessage",
        "sendMessage",
        "sendMessageDraft",
        "sendMessage",
    ]


async def test_without_limits_nothing_is_refused(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(-1001, "0")
        for i in range(1, 40):
            await bot.edit_message_text(str(i), chat_id=-1001, message_id=sent.message_id)
    assert tg.rate_limited() == []
    assert tg.visible_messages(-1001) == ["39"]


# -- inline keyboards and callback queries (what approvals rely on) -----------------------


def approve_deny(row: int = 7) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton("Approve", callback_data=f"ap:{row}:y"),
                InlineKeyboardButton("Deny", callback_data=f"ap:{row}:n"),
            ]
        ]
    )


async def test_a_click_on_an_inline_button_reaches_the_bot_as_a_callback_query(
    tg: FakeTelegram,
) -> None:
    """PTB sends a keyboard, gets the click as a callback query (only when it allowed them),
    answers it and edits the message: the keyboard goes with an edit that does not resend it."""
    clicks: list[tuple[str, int, str, int]] = []
    app = make_app(tg)

    async def on_click(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None and isinstance(query.message, Message)
        clicks.append((str(query.data), query.from_user.id, query.id, query.message.message_id))
        await query.answer("Approved.")
        await query.edit_message_text("approved by Alice")

    app.add_handler(CallbackQueryHandler(on_click))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(
            poll_interval=0, timeout=10, allowed_updates=["message", "callback_query"]
        )
        try:
            sent = await app.bot.send_message(42, "Approve?", reply_markup=approve_deny())
            assert tg.keyboard(42, sent.message_id) == ["ap:7:y", "ap:7:n"]
            assert sent.reply_markup == approve_deny()  # Telegram returns the keyboard
            update = tg.inject_callback_query(42, sent.message_id, "ap:7:y")
            with anyio.fail_after(10):
                await tg.wait_until(lambda: len(tg.callback_answers()) == 1)
                await tg.wait_for_calls("editMessageText")
                await tg.wait_for_confirmed(update["update_id"])
        finally:
            await app.updater.stop()
            await app.stop()
    query = update["callback_query"]
    assert set(query) == {"id", "from", "message", "chat_instance", "data"}
    assert query["message"]["reply_markup"]["inline_keyboard"][0][1]["text"] == "Deny"
    assert clicks == [("ap:7:y", 42, query["id"], sent.message_id)]
    (answer,) = tg.callback_answers()
    assert (answer.query_id, answer.text, answer.show_alert) == (query["id"], "Approved.", False)
    assert tg.visible_messages(42) == ["approved by Alice"]
    assert tg.keyboard(42, sent.message_id) == []  # edited without reply_markup: removed
    with pytest.raises(LookupError):  # the message shows no button any more
        tg.inject_callback_query(42, sent.message_id, "ap:7:n")


async def test_callback_queries_are_made_only_for_a_bot_that_allowed_them(
    tg: FakeTelegram,
) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(-1001, "Approve?", reply_markup=approve_deny())
        await bot.get_updates(allowed_updates=["message"])
        tg.inject_callback_query(-1001, sent.message_id, "ap:7:n")
        assert await bot.get_updates() == ()  # Telegram made no update of it
        assert len(tg.unwanted) == 1
        await bot.get_updates(allowed_updates=[])  # empty: every usual kind
        tg.inject_callback_query(-1001, sent.message_id, "ap:7:n", user_id=99, username="bob")
        (update,) = await bot.get_updates()
    query = update.callback_query
    assert query is not None and query.data == "ap:7:n"
    assert (query.from_user.id, query.from_user.username) == (99, "bob")


async def test_keyboards_and_answers_are_checked_as_the_bot_api_does(tg: FakeTelegram) -> None:
    async with make_bot(tg) as bot:
        too_long = InlineKeyboardMarkup([[InlineKeyboardButton("x", callback_data="d" * 65)]])
        with pytest.raises(BadRequest, match=r"(?i)button_data_invalid"):
            await bot.send_message(42, "x", reply_markup=too_long)
        no_action = {"inline_keyboard": [[{"text": "only text"}]]}
        with pytest.raises(BadRequest, match=r"(?i)text buttons are unallowed"):
            await bot._post("sendMessage", {"chat_id": 42, "text": "x", "reply_markup": no_action})
        sent = await bot.send_message(42, "Approve?", reply_markup=approve_deny())
        with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
            await bot.edit_message_reply_markup(42, sent.message_id, reply_markup=approve_deny())
        edited = await bot.edit_message_reply_markup(42, sent.message_id, reply_markup=None)
        assert isinstance(edited, Message) and edited.reply_markup is None
        assert tg.keyboard(42, sent.message_id) == []
        await bot.edit_message_reply_markup(42, sent.message_id, reply_markup=approve_deny(8))
        update = tg.inject_callback_query(42, sent.message_id, "ap:8:y")
        query_id = update["callback_query"]["id"]
        with pytest.raises(BadRequest, match=r"(?i)message_too_long"):
            await bot.answer_callback_query(query_id, text="x" * 201)
        assert await bot.answer_callback_query(query_id, text="Not yours.", show_alert=True)
        with pytest.raises(BadRequest, match=r"(?i)query is too old"):  # once only
            await bot.answer_callback_query(query_id, text="again")
    assert [(a.text, a.show_alert) for a in tg.callback_answers()] == [("Not yours.", True)]
