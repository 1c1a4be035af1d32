"""What a chat message carries becomes attachment references at admission (SPEC 9).

Telegram's photos (the largest size within ``[agent] max_attachment_bytes``), documents,
voice notes and audio files, and Discord's attachments (the kind from the content type,
voice messages as audio), each as an ``AttachmentRef`` on the admitted ``Inbound``: the
conversion itself (python-telegram-bot parsing the updates the fake Bot API makes), then
through the real adapters, polling and webhook, against the loopback fakes with a
recording Intake; what is still not read (a sticker, a location) gets its notice and no
turn.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from telegram import Update

from gateway.config import DiscordConfig, TelegramConfig
from gateway.events import Event
from gateway.messages import Admission, AttachmentRef, Inbound
from platforms.discord import DiscordAdapter
from platforms.discord import convert as discord_convert
from platforms.telegram import TelegramAdapter
from platforms.telegram import convert as telegram_convert
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.runtime import HeldIntake
from tests.fakes.telegram_server import FakeTelegram, sticker_extra
from tests.harness import free_port
from tests.support.discord_world import seen

pytestmark = pytest.mark.anyio

ALICE = 42
GROUP = -1001234
ME = telegram_convert.BotIdentity(123456789, "botmux_test_bot")


class CountingIntake(HeldIntake):
    """A recording Intake that can be waited on for its admission attempts."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = anyio.Event()

    async def admit(self, inbound: Inbound) -> Admission:
        try:
            return await super().admit(inbound)
        finally:
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_attempts(self, count: int) -> None:
        while self.attempts < count:
            await self._changed.wait()


def read(update: dict[str, Any], limit: int = 20 * 1024 * 1024) -> telegram_convert.Incoming:
    incoming = telegram_convert.read(Update.de_json(update, None), ME, "mention", limit)
    assert incoming is not None
    return incoming


def photo_ids(extra: dict[str, Any]) -> list[str]:
    return [size["file_id"] for size in extra["photo"]]


# -- Telegram: the conversion --------------------------------------------------------------


async def test_a_photo_is_its_largest_size_within_the_limit(tg: FakeTelegram) -> None:
    sizes = [os.urandom(n) for n in (1_000, 10_000, 100_000)]
    extra = tg.files.photo(*sizes, caption="what is this?")
    small, medium, large = photo_ids(extra)
    incoming = read(tg.inject_message(ALICE, extra=extra))
    assert (incoming.kind, incoming.text) == ("turn", "what is this?")
    assert incoming.attachments == (
        AttachmentRef("image", "photo.jpg", "image/jpeg", 100_000, large),
    )
    assert read(tg.inject_message(ALICE, extra=extra), 50_000).attachments[0].source == medium
    # None within the limit: the smallest, which the fetch refuses naming the limit.
    tiny = read(tg.inject_message(ALICE, extra=extra), 10).attachments
    assert [(ref.source, ref.size) for ref in tiny] == [(small, 1_000)]


async def test_documents_voice_and_audio_are_references(tg: FakeTelegram) -> None:
    cases = [
        (
            tg.files.document(b"%PDF-1.4", file_name="report.pdf", mime_type="application/pdf"),
            ("document", "report.pdf", "application/pdf", 8),
        ),
        (
            tg.files.document(b"\x89PNG", file_name="scan.png", mime_type="image/png"),
            ("image", "scan.png", "image/png", 4),
        ),
        (tg.files.voice(b"OggS.."), ("audio", "voice.ogg", "audio/ogg", 6)),
        (tg.files.audio(b"ID3", file_name="song.mp3"), ("audio", "song.mp3", "audio/mpeg", 3)),
    ]
    for extra, expected in cases:
        incoming = read(tg.inject_message(ALICE, extra=extra))
        [ref] = incoming.attachments
        assert (incoming.kind, incoming.text) == ("turn", "")  # no caption: the file alone
        assert (ref.kind, ref.name, ref.content_type, ref.size) == expected
        assert ref.source == next(iter(extra.values()))["file_id"] and ref.sha256 is None
        assert incoming.inbound().attachments == (ref,)


async def test_what_is_still_not_read_is_unreadable(tg: FakeTelegram) -> None:
    location = {"location": {"latitude": 1.5, "longitude": 2.5}}
    for extra in (sticker_extra(), location):
        incoming = read(tg.inject_message(ALICE, extra=extra))
        assert (incoming.kind, incoming.attachments) == ("unreadable", ())
    animation = {"file_id": "gif-1", "file_unique_id": "u-gif", "width": 1, "height": 1}
    gif = {"animation": {**animation, "duration": 1}, "document": {**animation}}
    assert read(tg.inject_message(ALICE, extra=gif)).kind == "unreadable"


async def test_a_photo_in_a_group_is_answered_only_when_addressed(tg: FakeTelegram) -> None:
    extra = tg.files.photo(b"jpeg")
    quiet = tg.inject_message(GROUP, extra=extra)
    assert telegram_convert.read(Update.de_json(quiet, None), ME, "mention") is None
    mention = [{"type": "mention", "offset": 0, "length": 16}]
    caption = {"caption": "@botmux_test_bot look", "caption_entities": mention}
    asked = tg.inject_message(GROUP, extra={**extra, **caption})
    incoming = read(asked)
    assert (incoming.text, len(incoming.attachments)) == ("look", 1)


# -- Telegram: through the real adapter ----------------------------------------------------


def telegram_adapter(tg: FakeTelegram, intake: HeldIntake, **keys: Any) -> TelegramAdapter:
    config = TelegramConfig(token=tg.token, api_base=tg.origin, poll_timeout_s=5, **keys)
    events: list[Event] = []
    return TelegramAdapter(
        config, ledger=intake, access=intake, observe=events.append, attachment_limit=lambda: 50_000
    )


async def test_telegram_admits_a_photo_with_its_caption_once(tg: FakeTelegram) -> None:
    intake = HeldIntake()
    extra = tg.files.photo(os.urandom(1_000), os.urandom(40_000), os.urandom(90_000), caption="hi")
    async with anyio.create_task_group() as group:
        await group.start(telegram_adapter(tg, intake).run, intake)
        update = tg.inject_message(ALICE, extra=extra)["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(update)
        group.cancel_scope.cancel()
    tg.redeliver(update)  # Telegram sends it again to the restarted bot
    async with anyio.create_task_group() as group:
        await group.start(telegram_adapter(tg, intake).run, intake)
        sticker = tg.inject_message(ALICE, extra=sticker_extra())["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(sticker)
            [notice] = await tg.wait_for_sent(1, ALICE)
        group.cancel_scope.cancel()
    assert intake.attempts == 2
    [inbound] = intake.admitted  # the redelivery was a duplicate
    assert inbound.text == "hi"
    # The adapter's limit (50,000 bytes) picked the middle size.
    assert inbound.attachments == (
        AttachmentRef("image", "photo.jpg", "image/jpeg", 40_000, photo_ids(extra)[1]),
    )
    assert notice == telegram_convert.TEXT_ONLY


async def test_telegram_webhook_admits_attachments_the_same_way(tg: FakeTelegram) -> None:
    intake = HeldIntake()
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/hook"
    keys = {
        "mode": "webhook",
        "webhook_listen": f"127.0.0.1:{port}",
        "webhook_url": url,
        "webhook_secret": "s3cret-Token_1",
    }
    voice = tg.files.voice(b"OggS voice note", duration=3)
    async with anyio.create_task_group() as group:
        await group.start(telegram_adapter(tg, intake, **keys).run, intake)
        tg.inject_message(ALICE, extra=voice)
        with anyio.fail_after(10):
            assert await tg.deliver_webhook() == [200]
        group.cancel_scope.cancel()
    [inbound] = intake.admitted
    assert inbound.attachments == (
        AttachmentRef("audio", "voice.ogg", "audio/ogg", 15, voice["voice"]["file_id"]),
    )


# -- Discord ------------------------------------------------------------------------------

BOT_ID = 990_000_000_000_000_001
USER = 990_000_000_000_000_010
DM_ID = 990_000_000_000_000_300


def test_an_attachment_alone_is_a_turn_and_nothing_at_all_is_not() -> None:
    config = DiscordConfig(token="t")
    ref = AttachmentRef("image", "cat.png", "image/png", 10, "https://cdn/cat.png")
    assert discord_convert.decide(seen("", guild_id=None), config, 42) == discord_convert.Ignore(
        "empty"
    )
    alone = seen("", guild_id=None, attachments=(ref,))
    assert discord_convert.decide(alone, config, 42) == discord_convert.Turn("")
    assert discord_convert.inbound(alone, "").attachments == (ref,)
    command = seen("/status", guild_id=None, attachments=(ref,))
    assert discord_convert.decide(command, config, 42) == discord_convert.Command("status")


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token="discord-test-token", bot_user_id=BOT_ID) as fake:
        fake.add_user(USER, "alice")
        fake.add_dm_channel(DM_ID, USER)
        yield fake


async def test_discord_admits_attachments_by_content_type(dc: FakeDiscord) -> None:
    intake = CountingIntake()
    config = DiscordConfig(
        token="discord-test-token",
        api_base=dc.api_base,
        gateway_url=dc.gateway_url,
        allow_users=(USER,),
        guild_ready_timeout_s=0.05,
        identify_delay_s=0,
    )
    png = dc.cdn.attachment(b"\x89PNG", filename="cat.png", content_type="image/png")
    notes = dc.cdn.attachment(
        b"notes", filename="notes.txt", content_type="text/plain; charset=utf-8"
    )
    blob = dc.cdn.attachment(b"??", filename="blob", content_type=None)
    voice = dc.cdn.voice_message(b"OggS")
    async with anyio.create_task_group() as group:
        await group.start(DiscordAdapter(config, ledger=intake, access=intake).run, intake)
        first = await dc.inject_message(
            DM_ID, "look", author_id=USER, attachments=[png, notes, blob]
        )
        await dc.inject_message(DM_ID, "", author_id=USER, attachments=[voice])
        with anyio.fail_after(10):
            await intake.wait_attempts(2)
        await dc.redispatch(int(first["id"]))
        with anyio.fail_after(10):
            await intake.wait_attempts(3)
        group.cancel_scope.cancel()
    with_files, voice_note = intake.admitted
    assert with_files.text == "look" and voice_note.text == ""
    assert [(r.kind, r.name, r.content_type, r.size, r.source) for r in with_files.attachments] == [
        ("image", "cat.png", "image/png", 4, png["url"]),
        ("document", "notes.txt", "text/plain; charset=utf-8", 5, notes["url"]),
        ("document", "blob", "", 2, blob["url"]),
    ]
    assert [(r.kind, r.name, r.content_type) for r in voice_note.attachments] == [
        ("audio", "voice-message.ogg", "audio/ogg")
    ]
