"""Fetching attachments' bytes from the chat platforms (SPEC 9), with the real libraries
against the loopback fakes: python-telegram-bot's ``getFile`` then the file URL, and a
Discord attachment URL on the fake's CDN. The bytes arrive whole; past the limit the fetch
stops without reading the file (the fake records how much of it it wrote) and raises
``AttachmentTooLarge`` naming the file and the limit; failures are the platforms'
``PlatformError``s, which ``policy.classify_send`` retries when transient (5xx, 429, a lost
connection) and not when permanent (4xx)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import anyio
import pytest
from telegram import Bot

from gateway.errors import AttachmentTooLarge, PlatformError
from gateway.messages import AttachmentRef
from platforms.discord import _attachments as discord_files
from platforms.telegram import _files as telegram_files
from platforms.telegram._transport import BotApiRequest
from policy.classify import classify_send
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
BIG = 16 * MIB  # far more than the loopback socket buffers hold: a stopped read shows


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    bot = Bot(
        tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url, request=BotApiRequest()
    )
    async with bot:
        yield bot


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token="discord-token", bot_user_id=42) as fake:
        yield fake


@pytest.fixture
async def cdn(dc: FakeDiscord) -> AsyncIterator[discord_files.Fetching]:
    """The Discord adapter's downloads (its ``Fetching`` mixin), told of ``api_base`` and
    closed as the adapter does."""
    fetching = discord_files.Fetching()
    fetching.fetch_from(dc.api_base)
    yield fetching
    await fetching.close_downloads()


def tg_ref(extra: dict[str, object], field: str, *, size: int | None = None) -> AttachmentRef:
    media = extra[field]
    item = media[-1] if isinstance(media, list) else media
    assert isinstance(item, dict)
    return AttachmentRef("document", "f", "", size, str(item["file_id"]))


async def tg_fetch(bot: Bot, ref: AttachmentRef, limit: int = 20 * MIB) -> bytes:
    return await telegram_files.fetch(bot, ref, limit=limit, timeout_s=10.0)


# -- Telegram -------------------------------------------------------------------------------


async def test_telegram_files_of_every_kind_arrive_whole(tg: FakeTelegram, bot: Bot) -> None:
    photo = os.urandom(300_000)
    cases = [
        (tg.files.photo(os.urandom(1000), photo), "photo", photo),
        (tg.files.document(b"%PDF-1.4 ...", file_name="a.pdf"), "document", b"%PDF-1.4 ..."),
        (tg.files.voice(b"OggS voice"), "voice", b"OggS voice"),
        (tg.files.audio(b"ID3 song"), "audio", b"ID3 song"),
    ]
    for extra, field, data in cases:
        assert await tg_fetch(bot, tg_ref(extra, field)) == data
    assert [call.params["file_id"] for call in tg.calls_to("getFile")] == [
        tg_ref(extra, field).source for extra, field, _ in cases
    ]
    assert all(d.complete and d.status == 200 for d in tg.files.downloads)


async def test_telegram_downloads_reuse_the_bots_kept_alive_connection(
    tg: FakeTelegram, bot: Bot
) -> None:
    """Downloads go over the bot's own transport (its session's pool), not a client and a
    connection of their own per file: in production each new one is a TLS handshake."""
    photo = tg.files.photo(os.urandom(100), os.urandom(200_000))
    voice = tg.files.voice(b"OggS voice")
    for _ in range(3):
        assert len(await tg_fetch(bot, tg_ref(photo, "photo"))) == 200_000
        assert await tg_fetch(bot, tg_ref(voice, "voice")) == b"OggS voice"
    downloads = tg.files.server.downloads
    assert len(downloads) == 6 and all(d.complete for d in downloads)
    assert len({d.client for d in downloads}) == 1, downloads


async def test_telegram_refuses_a_declared_size_over_the_limit_before_asking(
    tg: FakeTelegram, bot: Bot
) -> None:
    extra = tg.files.document(b"x" * 2000)
    ref = AttachmentRef("document", "big.txt", "text/plain", 2000, tg_ref(extra, "document").source)
    with pytest.raises(AttachmentTooLarge) as caught:
        await tg_fetch(bot, ref, limit=1000)
    assert (caught.value.name, caught.value.limit) == ("big.txt", 1000)
    assert tg.calls_to("getFile") == [] and tg.files.downloads == []


@pytest.mark.parametrize("send_length", [True, False], ids=["content-length", "chunked"])
async def test_telegram_stops_reading_past_the_limit(
    tg: FakeTelegram, bot: Bot, send_length: bool
) -> None:
    """The message understates the size (or states none) and getFile's size is not trusted
    alone either: the download is cut as soon as it passes the limit."""
    extra = tg.files.document(os.urandom(BIG), file_name="huge.bin")
    ref = tg_ref(extra, "document")
    # getFile states the real size: answer it as a Bot API that does not know (None).
    tg.register("getFile", _without_size(tg))
    tg.files.server.send_length = send_length
    with pytest.raises(AttachmentTooLarge) as caught:
        await tg_fetch(bot, ref, limit=MIB)
    assert caught.value.limit == MIB
    with anyio.fail_after(10):  # the fake records the download once its handler ends
        await tg.wait_until(lambda: bool(tg.files.downloads))
    [download] = tg.files.downloads
    assert not download.complete and download.sent < BIG


def _without_size(tg: FakeTelegram):  # type: ignore[no-untyped-def]
    real = tg.files.get_file

    async def get_file(params: dict[str, object]) -> dict[str, object]:
        answer = await real(params)
        answer.pop("file_size")
        return answer

    return get_file


async def test_telegram_failures_are_classified_like_sends(tg: FakeTelegram, bot: Bot) -> None:
    extra = tg.files.document(b"hello")
    ref = tg_ref(extra, "document")
    tg.files.fail_next_download(502)
    with pytest.raises(PlatformError) as server:
        await tg_fetch(bot, ref)
    failure = classify_send(server.value)
    assert (failure.reason, failure.retryable, failure.status) == ("server", True, 502)
    assert await tg_fetch(bot, ref) == b"hello"  # and the retry gets it

    tg.fail_next("getFile", status=429, retry_after=3)
    with pytest.raises(PlatformError) as flood:
        await tg_fetch(bot, ref)
    failure = classify_send(flood.value)
    assert (failure.reason, failure.retryable, failure.retry_after) == ("rate_limit", True, 3.0)

    tg.fail_next("getFile", status=500)
    with pytest.raises(PlatformError) as api:
        await tg_fetch(bot, ref)
    assert classify_send(api.value).retryable

    missing = AttachmentRef("document", "gone.txt", "text/plain", None, "no-such-file")
    with pytest.raises(PlatformError) as refused:
        await tg_fetch(bot, missing)
    failure = classify_send(refused.value)
    assert (failure.reason, failure.retryable, failure.status) == ("bad_request", False, 400)


async def test_telegram_file_is_too_big_is_the_size_refusal(tg: FakeTelegram, bot: Bot) -> None:
    """Telegram's 400 "file is too big" (past its 20 MiB bot download limit) is answered as
    the attachment limit: Telegram's own, when botmux's is higher."""
    extra = tg.files.document(b"pretend this is 30 MiB", file_name="movie.pdf")
    tg.files.too_big(tg_ref(extra, "document").source)
    ref = AttachmentRef(
        "document", "movie.pdf", "application/pdf", None, tg_ref(extra, "document").source
    )
    with pytest.raises(AttachmentTooLarge) as caught:
        await tg_fetch(bot, ref, limit=50 * MIB)
    assert (caught.value.name, caught.value.limit) == ("movie.pdf", 20 * MIB)
    assert not classify_send(caught.value).retryable
    assert tg.files.downloads == []


async def test_telegram_unreachable_file_server_is_retryable(tg: FakeTelegram, bot: Bot) -> None:
    extra = tg.files.document(b"hello")
    ref = tg_ref(extra, "document")
    tg.drop_next("getFile")
    with pytest.raises(PlatformError) as dropped:
        await tg_fetch(bot, ref)
    failure = classify_send(dropped.value)
    assert (failure.reason, failure.retryable) == ("connection", True)


# -- Discord --------------------------------------------------------------------------------


def dc_ref(attachment: dict[str, object], *, size: int | None = None) -> AttachmentRef:
    return AttachmentRef(
        "document",
        str(attachment["filename"]),
        str(attachment.get("content_type", "")),
        size if size is not None else int(str(attachment["size"])),
        str(attachment["url"]),
    )


async def test_discord_attachments_arrive_whole(
    dc: FakeDiscord,
    cdn: discord_files.Fetching,
) -> None:
    image = os.urandom(500_000)
    png = dc.cdn.attachment(image, filename="cat.png", content_type="image/png")
    text = dc.cdn.attachment(b"notes\n", filename="notes.txt")
    assert await cdn.fetch(dc_ref(png), limit=MIB) == image
    assert await cdn.fetch(dc_ref(text), limit=MIB) == b"notes\n"
    assert [d.complete for d in dc.cdn.downloads] == [True, True]
    # The signed URL is fetched without the bot's token.
    assert not [c for c in dc.rest_calls if "attachments" in c.path]


async def test_discord_downloads_share_one_kept_alive_connection(
    dc: FakeDiscord, cdn: discord_files.Fetching
) -> None:
    attachment = dc.cdn.attachment(os.urandom(100_000), filename="cat.png")
    for _ in range(4):
        assert len(await cdn.fetch(dc_ref(attachment), limit=MIB)) == 100_000
    assert len({d.client for d in dc.cdn.downloads}) == 1, dc.cdn.downloads
    await cdn.close_downloads()  # as the adapter stops; a later download opens a new session
    assert len(await cdn.fetch(dc_ref(attachment), limit=MIB)) == 100_000
    assert len({d.client for d in dc.cdn.downloads}) == 2


async def test_discord_refuses_a_stated_size_over_the_limit_before_fetching(
    dc: FakeDiscord,
    cdn: discord_files.Fetching,
) -> None:
    attachment = dc.cdn.attachment(b"x" * 5000, filename="big.log")
    with pytest.raises(AttachmentTooLarge) as caught:
        await cdn.fetch(dc_ref(attachment), limit=4096)
    assert (caught.value.name, caught.value.limit) == ("big.log", 4096)
    assert dc.cdn.downloads == []


@pytest.mark.parametrize("send_length", [True, False], ids=["content-length", "chunked"])
async def test_discord_stops_reading_past_the_limit(
    dc: FakeDiscord, cdn: discord_files.Fetching, send_length: bool
) -> None:
    attachment = dc.cdn.attachment(os.urandom(BIG), filename="huge.bin", declared_size=10)
    dc.cdn.server.send_length = send_length
    with pytest.raises(AttachmentTooLarge):
        await cdn.fetch(dc_ref(attachment), limit=MIB)
    with anyio.fail_after(10):  # the fake records the download once its handler ends
        await dc.wait_until(lambda: bool(dc.cdn.downloads))
    [download] = dc.cdn.downloads
    assert not download.complete and download.sent < BIG


async def test_discord_failures_are_classified_like_sends(
    dc: FakeDiscord,
    cdn: discord_files.Fetching,
) -> None:
    attachment = dc.cdn.attachment(b"hello", filename="hello.txt")
    dc.cdn.fail_next_download(503)
    with pytest.raises(PlatformError) as server:
        await cdn.fetch(dc_ref(attachment), limit=MIB)
    failure = classify_send(server.value)
    assert (failure.reason, failure.retryable, failure.status) == ("server", True, 503)
    assert await cdn.fetch(dc_ref(attachment), limit=MIB) == b"hello"

    dc.cdn.fail_next_download(429)
    with pytest.raises(PlatformError) as limited:
        await cdn.fetch(dc_ref(attachment), limit=MIB)
    assert classify_send(limited.value).retryable

    gone = dc_ref(attachment)
    gone = AttachmentRef(gone.kind, gone.name, gone.content_type, 5, gone.source + "-deleted")
    with pytest.raises(PlatformError) as missing:
        await cdn.fetch(gone, limit=MIB)
    failure = classify_send(missing.value)
    assert (failure.reason, failure.retryable, failure.status) == ("bad_request", False, 404)
