"""Hostile and malformed platform input, end to end: the gateway answers or ignores it cleanly.

A real gateway (in process) runs the Telegram adapter against the loopback Bot API and the
Discord adapter against the loopback Discord, with the fake model. The fakes' raw injection
(Telegram ``inject_update``, Discord ``dispatch``) feeds each a battery of input no real
platform should send, but a proxy, a protocol change or an attacker on a webhook might: texts
of 120k characters, NUL and other control characters, lone UTF-16 surrogates (``\\ud800`` in
the JSON), unknown fields, missing fields, ids and texts of the wrong type, kinds of update we
do not handle, entities pointing past the text, messages in channels and guilds we do not
know, edits of messages we never saw, and hypothesis-generated variations of a message.

After each batch a user or an operator would see: ``/readyz`` 200 and the platform connected;
a normal message afterwards answered as usual; a turn (a stored user row, a model request)
only for what was a legitimate text message, its text cleaned; replies to huge texts cut
within the platform's limits; and nothing in the log at ERROR or with a traceback (an
exception that escaped, or one our catch-alls had to swallow).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gateway.app import GatewayApp
from platforms._chunking import utf16_len
from platforms.discord.convert import clean_text as discord_clean
from platforms.telegram.convert import clean_text as telegram_clean
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeModel
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.support.discord_world import ALICE as D_ALICE  # Discord's Alice; ALICE is Telegram's
from tests.support.discord_world import BOB as D_BOB
from tests.support.discord_world import (
    BOT_ID,
    CHANNEL_ID,
    DM_ID,
    GUILD_ID,
    OTHER_BOT_ID,
    STRANGER,
    STRANGER_DM_ID,
    mention,
    open_world,
    running_botmux,
)
from tests.support.telegram_world import ALICE, BOT, GROUP
from tests.support.telegram_world import setup as telegram_setup

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

JSON = dict[str, Any]
# Characters: 7 times Telegram's limit, 15 times Discord's, and still under [gateway]
# max_message_chars (32,000: longer ones are refused with a notice, not stored).
HUGE = 30_000
STRANGER_TG = 777
UNKNOWN_CHANNEL = 990_000_000_000_000_900
UNKNOWN_GUILD = 990_000_000_000_000_901


# -- what every batch must leave behind ------------------------------------------------------


def unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log records an operator would read as a failure: ERROR and up, or any traceback."""
    return [
        f"{r.levelname} {r.name}: {r.getMessage()[:300]}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or r.exc_info or r.exc_text
    ]


def adapter_stats(app: GatewayApp, platform: str) -> Any:
    """The adapter's ``statistics()``, as an operator's debugging would read them."""
    [adapter] = [a for a in app.adapters if a.platform == platform]
    return adapter.statistics()  # type: ignore[attr-defined]


async def assert_up(app: GatewayApp, platform: str) -> None:
    assert app.peer is not None
    url = f"http://127.0.0.1:{app.peer.port}/readyz"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        assert response.status == 200, await response.text()
    assert app.readiness()[platform], app.readiness()


def user_rows(db: Path) -> dict[str, str]:
    """Stored user rows: platform message id -> text."""
    with sqlite3.connect(db) as conn:
        query = "SELECT platform_message_id, content FROM messages WHERE role = 'user' ORDER BY id"
        return dict(conn.execute(query))


def pairing_labels(db: Path, platform: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        query = "SELECT label FROM pairing_codes WHERE platform = ?"
        return [label for (label,) in conn.execute(query, (platform,))]


def huge_text() -> str:
    """Words of mixed width (UTF-16 pairs included) well past every platform's limit."""
    words = itertools.cycle(["lorem", "ipsum🙂", "grüße", "日本語", "x" * 40])
    text = ""
    while len(text) < HUGE:
        text += next(words) + " "
    return text.strip()


def draw(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` examples of ``strategy``, the same on every run (no shrinking: each batch runs
    against one live gateway, and the failing example is named in the assertion instead)."""
    found: list[Any] = []

    @settings(
        max_examples=count,
        database=None,
        derandomize=True,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(example: Any) -> None:
        found.append(copy.deepcopy(example))

    collect()
    return found


@dataclass(frozen=True)
class Case:
    """One hostile input and what must become of it.

    ``turn``: the text the stored turn must have, or None when it must not be a turn.
    ``maybe``: the update may or may not be a turn (a field we do not read was garbled, and
    whether the library still parses it is its business); if stored, its text is ``turn``.
    """

    name: str
    payload: Any
    key: str  # the platform message id a turn would be stored under
    turn: str | None
    maybe: bool = False
    event: str = "MESSAGE_CREATE"  # Discord only


def check_turns(cases: list[Case], stored: dict[str, str], sentinels: set[str]) -> None:
    problems: list[str] = []
    for case in cases:
        got = stored.get(case.key)
        if case.maybe and got is None:
            continue
        if got != case.turn:
            problems.append(f"{case.name}: stored {got!r:.80}, expected {case.turn!r:.80}")
    known = {case.key for case in cases} | sentinels
    problems += [
        f"unexpected turn {key}: {text!r:.80}" for key, text in stored.items() if key not in known
    ]
    assert not problems, "\n".join(problems)


# == Telegram =================================================================================


class TelegramBattery:
    """Builds raw updates; every message gets its own id, so its turn can be found by it."""

    def __init__(self) -> None:
        self._ids = itertools.count(1000)

    def message(
        self, text: Any = "hello", *, chat_id: int = ALICE, user_id: int = ALICE, **fields: Any
    ) -> JSON:
        kind = "private" if chat_id > 0 else "supergroup"
        chat: JSON = {"id": chat_id, "type": kind}
        chat |= {"first_name": "Alice"} if kind == "private" else {"title": "hostile group"}
        message: JSON = {
            "message_id": next(self._ids),
            "date": 1_700_000_000,
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": "Alice"},
        }
        if text is not None:
            message["text"] = text
        return message | fields

    def case(
        self, name: str, update: JSON, turn: str | None, *, message: JSON | None = None
    ) -> Case:
        found = message or next((v for v in update.values() if isinstance(v, dict)), {})
        chat = found.get("chat")
        chat_id = chat.get("id") if isinstance(chat, dict) else None
        return Case(name, update, f"{chat_id}:{found.get('message_id')}", turn)

    def turn(self, name: str, text: str, expected: str | None = None, **fields: Any) -> Case:
        message = self.message(text, **fields)
        return self.case(name, {"message": message}, text if expected is None else expected)

    def ignored(self, name: str, message: Any, kind: str = "message") -> Case:
        return self.case(
            name, {kind: message}, None, message=message if isinstance(message, dict) else {}
        )


def without(data: JSON, *keys: str) -> JSON:
    return {k: v for k, v in data.items() if k not in keys}


def telegram_battery() -> list[Case]:
    b = TelegramBattery()
    m = b.message
    bot_mention = f"@{BOT}"
    return [
        b.turn("huge text", huge_text()),
        b.turn(
            "control characters",
            "ctrl\x00 chars\x07 and \x1b[31mred\x1b[0m\tok\r\nend\x7f",
            "ctrl chars and [31mred[0m\tok\r\nend",
        ),
        b.turn(
            "lone surrogates",
            "half \ud800 pair \udfff, a whole 😀",
            "half \ufffd pair \ufffd, a whole 😀",
        ),
        b.case(
            "unknown fields",
            {"message": m("with extras", sparkles={"x": [1, None]}), "future_field": [1]},
            "with extras",
        ),
        b.turn(
            "entities past the end",
            "short",
            entities=[{"type": "bold", "offset": 400, "length": 9}],
        ),
        b.ignored("no chat", without(m("no chat"), "chat")),
        b.ignored("no from", without(m("no from"), "from")),
        b.ignored("no text", m(None)),
        b.ignored("empty text", m("")),
        b.ignored("only control characters", m("\x00\x07\x1b")),
        b.ignored("no message_id", without(m("no id"), "message_id")),
        b.ignored("no date", without(m("no date"), "date")),
        b.ignored("chat id as a string", m("str chat", chat={"id": str(ALICE), "type": "private"})),
        b.ignored(
            "from id as a string",
            m("str from") | {"from": {"id": str(ALICE), "is_bot": False, "first_name": "A"}},
        ),
        b.ignored("message_id as a string", m("str id") | {"message_id": "4200"}),
        b.ignored("text as a number", m(12345)),
        b.ignored("text as a list", m(["a", "b"])),
        b.ignored("message as a list", [1, 2, 3]),
        b.ignored("message as a string", "hello"),
        b.ignored("date as a string", m("date str", date="yesterday")),
        b.ignored("date past time_t", m("far future", date=10**30)),
        b.ignored("entities as a string", m("ents", entities="nope")),
        b.ignored("entity that is null", m("ents", entities=[None])),
        b.ignored("from as a string", m("from str") | {"from": "alice"}),
        b.ignored(
            "is_bot as a string",
            m("is_bot") | {"from": {"id": ALICE, "is_bot": "no", "first_name": "A"}},
        ),
        b.ignored("a bot", m("beep") | {"from": {"id": ALICE, "is_bot": True, "first_name": "B"}}),
        b.ignored("unknown chat type", m("weird", chat={"id": ALICE, "type": "weird"})),
        b.ignored("malformed reply_to_message", m("re", reply_to_message={"message_id": 1})),
        b.ignored("an edit", m("edited"), "edited_message"),
        b.ignored("a channel post", m("post", chat_id=-100777), "channel_post"),
        b.ignored(
            "a callback query",
            {
                "id": "1",
                "from": {"id": ALICE, "is_bot": False, "first_name": "A"},
                "chat_instance": "1",
                "data": "x",
            },
            "callback_query",
        ),
        b.ignored("a garbled chat member update", {"chat": "?"}, "my_chat_member"),
        b.ignored("an update kind from the future", {"anything": [1, {"x": None}]}, "future_kind"),
        b.ignored(
            "group: mention entity past the end",
            m(
                "hello all",
                chat_id=GROUP,
                user_id=ALICE,
                entities=[{"type": "mention", "offset": 50, "length": 17}],
            ),
        ),
        b.ignored(
            "group: entity offset as a string",
            m(
                f"{bot_mention} hi",
                chat_id=GROUP,
                entities=[{"type": "mention", "offset": "0", "length": 17}],
            ),
        ),
        b.ignored(
            "group: entities on a text that is a number",
            m(4242, chat_id=GROUP, entities=[{"type": "mention", "offset": 0, "length": 4}]),
        ),
        b.ignored(
            "stranger with a hostile name",
            m("let me in", chat_id=STRANGER_TG, user_id=STRANGER_TG)
            | {
                "from": {
                    "id": STRANGER_TG,
                    "is_bot": False,
                    "first_name": "Eve\ud800\x00",
                    "username": "eve\x1b",
                }
            },
        ),
    ]


async def telegram_sentinel(tg: FakeTelegram, text: str) -> str:
    """A normal message after the batch; its reply proves the poller and the turn path work.
    Returns the platform message id its turn is stored under."""
    update = tg.inject_message(ALICE, text)
    with anyio.fail_after(30):
        await tg.wait_until(lambda: f"echo: {text}" in tg.sent_messages(ALICE))
        await tg.wait_for_confirmed(update["update_id"])
    return f"{ALICE}:{update['message']['message_id']}"


def reply_pieces(sent: list[str], start: str) -> list[str]:
    """The chunks of one echo: from the message starting with ``start`` to the next echo."""
    first = next(i for i, text in enumerate(sent) if text.startswith(start))
    pieces = [sent[first]]
    for text in sent[first + 1 :]:
        if text.startswith("echo: "):
            break
        pieces.append(text)
    return pieces


async def test_telegram_hostile_battery(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cases = telegram_battery()
    keys = f"allow_users = [{ALICE}]\nallow_chats = [{GROUP}]\n"
    async with open_fake_telegram() as tg:
        s = telegram_setup(tmp_path, tg, model, keys=keys)
        async with s.gateway() as app:
            injected = [tg.inject_update(case.payload)["update_id"] for case in cases]
            sentinel = await telegram_sentinel(tg, "still there?")
            with anyio.fail_after(10):
                await tg.wait_for_sent(1, STRANGER_TG)  # the pairing code, despite the name
            assert [u for u in injected if not tg.is_confirmed(u)] == []  # none wedged the poller
            await assert_up(app, "telegram")
            assert adapter_stats(app, "telegram").unreadable >= 5  # PTB could not parse them
    check_turns(cases, user_rows(s.db), {sentinel})
    turns = [c.turn for c in cases if c.turn is not None]
    assert [r.last_user for r in model.requests] == [*turns, "still there?"]
    assert tg.sent_messages(GROUP) == []
    assert pairing_labels(s.db, "telegram") == ["Eve\ufffd (@eve)"]
    # The huge text's echo arrived whole, in order, cut within Telegram's 4096 UTF-16 units.
    huge = turns[0]
    pieces = reply_pieces(tg.sent_messages(ALICE), "echo: lorem")
    assert all(utf16_len(text) <= 4096 for text in tg.sent_messages(ALICE))
    assert len(pieces) > utf16_len(huge) // 4096
    assert " ".join(pieces).split() == f"echo: {huge}".split()
    assert unhandled(caplog) == []


async def test_telegram_webhook_acknowledges_unreadable_updates_and_refuses_garbage(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    """Telegram delivers webhook updates in order and retries a refused one: an update we
    cannot read must be acknowledged (200), or it would hold back every update after it."""
    caplog.set_level(logging.WARNING)
    b = TelegramBattery()
    m = b.message
    cases = [
        b.ignored("no date", without(m("no date"), "date")),
        b.ignored("from as a string", m("from str") | {"from": "alice"}),
        b.ignored("message as a list", [1, 2, 3]),
        b.turn("lone surrogate", "half \udc00 pair", "half \ufffd pair"),
        b.turn("control characters", "bell\x07 nul\x00", "bell nul"),
        b.ignored("an update kind from the future", {"x": 1}, "future_kind"),
    ]
    async with open_fake_telegram() as tg:
        s = telegram_setup(tmp_path, tg, model, "webhook")
        async with s.gateway() as app:
            for case in cases:
                tg.inject_update(case.payload)
            assert await tg.deliver_webhook() == [200] * len(cases)
            # Bodies that are no update at all are refused; nothing else changes.
            garbage = [b"not json", b"[1, 2]", b'{"update_id": "x"}', b'"\\ud800"']
            garbage.append(b"[" * 50_000 + b"]" * 50_000)  # deeper than the JSON parser goes
            headers = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-Token_1"}
            async with aiohttp.ClientSession() as http:
                for body in garbage:
                    async with http.post(s.webhook_url, data=body, headers=headers) as response:
                        assert response.status == 400, body[:20]
            sentinel = tg.inject_message(ALICE, "after the garbage")
            assert await tg.deliver_webhook() == [200]
            with anyio.fail_after(10):
                await tg.wait_until(lambda: "echo: after the garbage" in tg.sent_messages(ALICE))
            await assert_up(app, "telegram")
    check_turns(cases, user_rows(s.db), {f"{ALICE}:{sentinel['message']['message_id']}"})
    assert [r.last_user for r in model.requests] == [
        "half \ufffd pair",
        "bell nul",
        "after the garbage",
    ]
    assert unhandled(caplog) == []


# -- generated input -------------------------------------------------------------------------


def hostile_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Text with everything a JSON string can carry: lone surrogates, controls, and floods."""
    chars = st.characters() | st.characters(codec=None, categories=["Cs", "Cc", "Cf"])
    floods = st.builds(
        lambda n, c: c * n, st.integers(1, 5_000), st.sampled_from(["x", "🙂", "\ud800", "\x00"])
    )
    return st.text(chars, max_size=max_size) | floods


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | hostile_text(12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rarely() -> st.SearchStrategy[bool]:
    # One time in ten; not integers(0, 9) == 0, which hypothesis draws far more often.
    return st.sampled_from([False] * 9 + [True])


@st.composite
def garble(draw: st.DrawFn, data: JSON, field: str, wrong: st.SearchStrategy[Any]) -> bool:
    """Sometimes delete ``data[field]`` or give it a ``wrong`` value; True when it did."""
    if not draw(_rarely()):
        return False
    if draw(st.booleans()):
        data.pop(field, None)
    else:
        data[field] = draw(wrong)
    return True


NOT_INT = VALUES.filter(lambda v: not _is_int(v))
NOT_DICT: st.SearchStrategy[Any] = VALUES.filter(lambda v: not isinstance(v, dict)) | st.just({})
NOT_TIME = (
    hostile_text(8)
    | st.lists(SCALARS, max_size=2)
    | st.dictionaries(st.text(max_size=3), SCALARS, max_size=2)
)


@st.composite
def telegram_update(draw: st.DrawFn) -> tuple[JSON, str, str]:
    """A private message from ALICE, some of its fields garbled: (update, verdict, text).

    ``verdict``: ``turn`` (nothing we read was garbled), ``none`` (a field a turn needs was
    deleted or has the wrong type, or it is not a new message), ``maybe`` (only fields we do
    not read were garbled; the library may or may not still parse it).
    """
    text = "t" + draw(hostile_text())
    message: JSON = {
        "message_id": 1,
        "date": 1_700_000_000,
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
        "text": text,
    }
    chat, sender = message["chat"], message["from"]
    broken = any(
        [
            draw(garble(message, "message_id", NOT_INT)),
            draw(garble(message, "date", NOT_TIME)),
            draw(garble(chat, "id", NOT_INT)),
            draw(garble(chat, "type", VALUES.filter(lambda v: v != "private"))),
            draw(garble(sender, "id", NOT_INT)),
            draw(garble(sender, "is_bot", VALUES.filter(lambda v: v is not False))),
            draw(garble(message, "chat", NOT_DICT)),
            draw(garble(message, "from", NOT_DICT)),
            draw(garble(message, "text", VALUES.filter(lambda v: not isinstance(v, str)))),
        ]
    )
    unread = any(
        [
            draw(garble(message, field, VALUES))
            for field in ("entities", "reply_to_message", "message_thread_id", "photo", "caption")
        ]
    )
    message |= draw(
        st.dictionaries(st.sampled_from(["zz_new", "sparkles", "via_x"]), VALUES, max_size=2)
    )
    kind = draw(
        st.sampled_from(["message"] * 9 + ["edited_message", "channel_post", "future_kind"])
    )
    update: JSON = {kind: message} | draw(
        st.dictionaries(st.sampled_from(["zz_top", "extra"]), VALUES, max_size=1)
    )
    if draw(_rarely()):
        update["message"] = draw(VALUES)  # not a message at all
    if kind != "message" or not isinstance(update.get("message"), dict):
        broken = True
    verdict = "none" if broken else "maybe" if unread else "turn"
    return update, verdict, telegram_clean(text)


async def test_telegram_generated_updates(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cases: list[Case] = []
    for n, (update, verdict, text) in enumerate(draw(telegram_update(), 60)):
        message = next(iter(update.values()))
        if isinstance(message, dict) and _is_int(message.get("message_id")):
            message["message_id"] = 5000 + n  # one id per case: its turn is found by it
        key = f"{ALICE}:{message.get('message_id') if isinstance(message, dict) else None}"
        name = f"#{n} {json.dumps(update)[:300]}"
        turn = None if verdict == "none" else text
        cases.append(
            Case(name, update, key if verdict != "none" else f"none-{n}", turn, verdict == "maybe")
        )
    async with open_fake_telegram() as tg:
        s = telegram_setup(tmp_path, tg, model)
        async with s.gateway() as app:
            injected = [tg.inject_update(case.payload)["update_id"] for case in cases]
            sentinel = await telegram_sentinel(tg, "still there?")
            assert [u for u in injected if not tg.is_confirmed(u)] == []
            await assert_up(app, "telegram")
    stored = user_rows(s.db)
    check_turns(cases, stored, {sentinel})
    assert len(model.requests) == len(stored)
    assert all(utf16_len(text) <= 4096 for text in tg.sent_messages())
    assert sum(c.turn is not None and not c.maybe for c in cases) >= 10  # not all noise
    assert unhandled(caplog) == []


# == Discord ==================================================================================


class DiscordBattery:
    """MESSAGE_CREATE payloads cut from a well-formed one the fake built, each its own id."""

    def __init__(self, dc: FakeDiscord) -> None:
        self._dc = dc
        self._ids = itertools.count(990_000_000_000_500_000)

    def message(
        self, content: str = "hello", *, channel_id: int = DM_ID, author_id: int = D_ALICE
    ) -> JSON:
        payload = copy.deepcopy(self._dc.store_message(channel_id, "template", author_id=author_id))
        return payload | {"id": str(next(self._ids)), "content": content}

    def case(
        self, name: str, payload: Any, turn: str | None, event: str = "MESSAGE_CREATE"
    ) -> Case:
        key = str(payload.get("id")) if isinstance(payload, dict) else f"none-{name}"
        return Case(name, payload, key, turn, event=event)


def discord_battery(dc: FakeDiscord) -> list[Case]:
    b = DiscordBattery(dc)
    m = b.message
    huge = huge_text()
    in_guild = m(mention("in a channel nobody told us about"), channel_id=CHANNEL_ID)
    in_guild["channel_id"] = str(UNKNOWN_CHANNEL)
    elsewhere = m(mention("from a guild we are not in"), channel_id=CHANNEL_ID)
    elsewhere |= {"channel_id": str(UNKNOWN_CHANNEL + 1), "guild_id": str(UNKNOWN_GUILD)}
    stranger_elsewhere = m(mention("let me in"), channel_id=CHANNEL_ID, author_id=D_BOB)
    stranger_elsewhere |= {"channel_id": str(UNKNOWN_CHANNEL + 2), "guild_id": str(UNKNOWN_GUILD)}
    stranger = m("hi from eve", channel_id=STRANGER_DM_ID, author_id=STRANGER)
    stranger["author"] |= {"username": "eve\ud800\x00", "global_name": None}
    long_snowflake = m("placeholder", channel_id=CHANNEL_ID)
    long_snowflake["content"] = f"<@{BOT_ID}> hi <@{'9' * 5000}>"

    def broken(name: str, **change: Any) -> Case:
        payload = m(name)
        for key, value in change.items():
            if value is ...:
                payload.pop(key)
            else:
                payload[key] = value
        return b.case(name, payload, None)

    return [
        b.case("huge content", m(huge), huge),
        b.case(
            "control characters",
            m("ctrl\x00 chars\x07 and \x1b[31mred\x1b[0m\tok\r\nend"),
            "ctrl chars and [31mred[0m\tok\r\nend",
        ),
        b.case(
            "lone surrogates",
            m("half \ud800 pair \udfff, a whole 😀"),
            "half \ufffd pair \ufffd, a whole 😀",
        ),
        b.case(
            "unknown fields",
            m("with extras") | {"zz_future": {"a": [1, None]}, "sparkles": 3},
            "with extras",
        ),
        b.case("a snowflake of 5000 digits", long_snowflake, f"hi <@{'9' * 5000}>"),
        # A guild channel not in the cache (a new one, a thread): a turn; the send then fails.
        b.case("unknown channel in our guild", in_guild, "in a channel nobody told us about"),
        b.case("a guild we are not in", elsewhere, None),
        b.case("a stranger in a guild we are not in", stranger_elsewhere, None),
        b.case("a stranger with a hostile name", stranger, None),
        b.case("mention only", m(f"<@{BOT_ID}>", channel_id=CHANNEL_ID), None),
        b.case("empty after cleaning", m("\x00\x1b\x07"), None),
        broken("no author", author=...),
        broken("no channel_id", channel_id=...),
        broken("no id", id=...),
        broken("no content", content=...),
        broken("content as a number", content=12345),
        broken("content null", content=None),
        broken("author as a string", author="alice"),
        broken(
            "author id not a number",
            author={"id": "alice", "username": "a", "discriminator": "0", "avatar": None},
        ),
        broken("id not a number", id="abc"),
        broken("mentions of garbage", mentions=[1, "two", None]),
        broken("reference to garbage", message_reference={"message_id": "nope"}),
        broken("type from the future", type=9999),
        broken("type as a string", type="default"),
        broken(
            "a bot",
            author={
                "id": str(OTHER_BOT_ID),
                "username": "b",
                "discriminator": "0",
                "avatar": None,
                "bot": True,
            },
        ),
        broken(
            "bot flag as a string",
            author={
                "id": str(D_ALICE),
                "username": "a",
                "discriminator": "0",
                "avatar": None,
                "bot": "no",
            },
        ),
        b.case("data as a list", [1, 2, 3], None),
        b.case("an edit of a message never seen", m("edited"), None, "MESSAGE_UPDATE"),
        b.case(
            "a delete of a message never seen",
            {"id": "1", "channel_id": "x"},
            None,
            "MESSAGE_DELETE",
        ),
        b.case("an event from the future", {"anything": [1, {"x": None}]}, None, "FUTURE_EVENT"),
    ]


def interaction(channel_id: Any = DM_ID, **fields: Any) -> JSON:
    """An INTERACTION_CREATE for a slash command, as the fake sends one, then changed."""
    data: JSON = {
        "id": "990000000000600001",
        "application_id": str(BOT_ID),
        "type": 2,
        "data": {"id": "990000000000600002", "name": "status", "type": 1},
        "channel_id": str(channel_id),
        "token": "interaction-token-x",
        "version": 1,
        "app_permissions": "0",
        "locale": "en-US",
        "attachment_size_limit": 8 * 1024 * 1024,
        "entitlements": [],
        "authorizing_integration_owners": {},
        "context": 1,
        "user": {"id": str(D_ALICE), "username": "alice", "discriminator": "0", "avatar": None},
    }
    for key, value in fields.items():
        if value is ...:
            data.pop(key)
        else:
            data[key] = value
    return data


HOSTILE_INTERACTIONS = [
    interaction(data=...),
    interaction(data=[1, 2]),
    interaction(data="status"),
    interaction(data={"name": "rm -rf", "type": 1}),
    interaction(user=...),
    interaction(channel_id=...),
    interaction(type=99),
    interaction(id="abc"),
]


async def discord_sentinel(dc: FakeDiscord, text: str) -> str:
    """A normal DM after the batch: events are handled in order, so once it is answered every
    event before it was seen. Returns its message id."""
    sent = await dc.inject_message(DM_ID, text, author_id=D_ALICE)
    with anyio.fail_after(30):
        await dc.wait_until(
            lambda: any(m["content"] == f"echo: {text}" for m in dc.sent_messages(DM_ID))
        )
    return str(sent["id"])


async def test_discord_hostile_battery(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with open_world() as dc:
        cases = discord_battery(dc)
        async with running_botmux(tmp_path, dc, model) as app:
            for case in cases:
                await dc.dispatch(case.event, case.payload)
            for data in HOSTILE_INTERACTIONS:
                await dc.dispatch("INTERACTION_CREATE", data)
            await dc.inject_interaction(DM_ID, "status", user_id=D_ALICE)  # a good one after
            sentinel = await discord_sentinel(dc, "still there?")
            with anyio.fail_after(10):
                await dc.wait_until(lambda: len(dc.interaction_responses) >= 1)
                await dc.wait_for_messages(STRANGER_DM_ID, 1)  # the pairing code, despite the name
                await dc.wait_for_calls("POST", f"/channels/{UNKNOWN_CHANNEL}/messages")
            await assert_up(app, "discord")
            assert adapter_stats(app, "discord").unreadable_events >= 5  # discord.py could not
    check_turns(cases, user_rows(tmp_path / "botmux.db"), {sentinel})
    turns = [c.turn for c in cases if c.turn is not None]
    assert sorted(r.last_user for r in model.requests) == sorted([*turns, "still there?"])
    assert pairing_labels(tmp_path / "botmux.db", "discord") == ["eve\ufffd"]
    # Nobody in a guild we are not in was answered (not even with a pairing code).
    assert dc.calls("POST", f"/channels/{UNKNOWN_CHANNEL + 1}/messages") == []
    assert dc.calls("POST", f"/channels/{UNKNOWN_CHANNEL + 2}/messages") == []
    # Only the good slash command was answered; the hostile ones were ignored, not answered.
    [answered] = dc.interaction_responses
    assert answered["data"]["content"].startswith("Model: gpt-test")
    assert len(dc.calls("POST", "/interactions/{interaction_id}/{interaction_token}/callback")) == 1
    # The reply to the unknown channel was tried once: Discord's 404 is not retried.
    assert len(dc.calls("POST", f"/channels/{UNKNOWN_CHANNEL}/messages")) == 1
    # The huge content's echo arrived whole, in order, in pieces within Discord's 2000.
    huge = turns[0]
    pieces = reply_pieces([m["content"] for m in dc.sent_messages(DM_ID)], "echo: lorem")
    assert all(len(m["content"]) <= 2000 for m in dc.sent_messages())
    assert len(pieces) > len(huge) // 2000
    assert " ".join(pieces).split() == f"echo: {huge}".split()
    assert unhandled(caplog) == []


NOT_SNOWFLAKE = VALUES.filter(lambda v: not _int_like(v))


def _int_like(value: object) -> bool:
    """What discord.py's ``int(...)`` would accept as an id."""
    if isinstance(value, bool | float) or _is_int(value):
        return True
    try:
        int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return False
    return True


@st.composite
def discord_event(draw: st.DrawFn, template: JSON) -> tuple[str, JSON, str, str]:
    """A DM from ALICE with some fields garbled: (event, payload, verdict, text); the verdicts
    as for Telegram (see ``telegram_update``)."""
    text = "t" + draw(hostile_text())
    payload = copy.deepcopy(template) | {"content": text}
    author = payload["author"]
    broken = any(
        [
            draw(garble(payload, "id", NOT_SNOWFLAKE)),
            draw(garble(payload, "channel_id", NOT_SNOWFLAKE)),
            draw(garble(author, "id", NOT_SNOWFLAKE)),
            draw(garble(author, "bot", VALUES.filter(lambda v: v is not False))),
            draw(garble(payload, "author", NOT_DICT)),
            draw(garble(payload, "content", VALUES.filter(lambda v: not isinstance(v, str)))),
            draw(garble(payload, "type", st.sampled_from([7, 9999, "default", None, [], True]))),
            draw(garble(payload, "webhook_id", VALUES.filter(lambda v: v is not None))),
            draw(
                garble(
                    payload,
                    "guild_id",
                    st.sampled_from([str(UNKNOWN_GUILD), str(GUILD_ID), "x", None]),
                )
            ),
        ]
    )
    unread = any(
        [
            draw(garble(payload, field, VALUES))
            for field in (
                "mentions",
                "message_reference",
                "timestamp",
                "attachments",
                "embeds",
                "flags",
            )
        ]
    )
    payload |= draw(st.dictionaries(st.sampled_from(["zz_new", "sparkles"]), VALUES, max_size=2))
    event = draw(
        st.sampled_from(["MESSAGE_CREATE"] * 9 + ["MESSAGE_UPDATE", "MESSAGE_DELETE", "FUTURE"])
    )
    if event != "MESSAGE_CREATE":
        broken = True
    verdict = "none" if broken else "maybe" if unread else "turn"
    return event, payload, verdict, discord_clean(text)


async def test_discord_generated_events(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with open_world() as dc:
        template = dc.store_message(DM_ID, "template", author_id=D_ALICE)
        cases: list[Case] = []
        for n, (event, payload, verdict, text) in enumerate(draw(discord_event(template), 60)):
            if "id" in payload and _int_like(payload["id"]):
                payload["id"] = str(990_000_000_000_700_000 + n)
            name = f"#{n} {event} {json.dumps(payload)[:300]}"
            key = str(payload["id"]) if verdict != "none" else f"none-{n}"
            cases.append(
                Case(
                    name,
                    payload,
                    key,
                    None if verdict == "none" else text,
                    verdict == "maybe",
                    event,
                )
            )
        async with running_botmux(tmp_path, dc, model) as app:
            for case in cases:
                await dc.dispatch(case.event, case.payload)
            sentinel = await discord_sentinel(dc, "still there?")
            await assert_up(app, "discord")
    stored = user_rows(tmp_path / "botmux.db")
    check_turns(cases, stored, {sentinel})
    assert len(model.requests) == len(stored)
    assert all(len(m["content"]) <= 2000 for m in dc.sent_messages())
    assert sum(c.turn is not None and not c.maybe for c in cases) >= 10
    assert unhandled(caplog) == []
