"""Attachments end to end on the chat platforms (issue 15, SPEC 9): a real gateway (in
process) with real python-telegram-bot and discord.py against the loopback Bot API and
Discord (their files served by the fakes), and the fake model (chat completions and
``/v1/audio/transcriptions``). Assertions are on what the user saw, what the model and the
transcription endpoint received, how often a file was fetched, and the rows in the store.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent.turn import IMAGES_UNSEEN
from gateway.config import Config
from gateway.messages import StoredMessage
from gateway.store import Transcript, open_store
from tests.fakes._pdf import pdf_with_text
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.openai_server import FakeModel, Ok, Request, open_fake_model
from tests.fakes.push_receiver import push_receiver
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import make_config, running_gateway, telegram_section

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

ALICE = 42
VISION = 'input = ["text", "image"]\n'


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: Ok(f"answered: {user_text(r)}")
        yield fake


def user_text(request: Request) -> str:
    """The text parts of the request's last user message, joined."""
    for message in reversed(request.messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(p["text"] for p in content if p.get("type") == "text")
    return ""


def user_parts(request: Request) -> list[dict[str, Any]]:
    for message in reversed(request.messages):
        if message.get("role") == "user":
            content = message.get("content")
            return [{"type": "text", "text": content}] if isinstance(content, str) else content
    return []


def telegram_config(tmp: Path, tg: FakeTelegram, model: FakeModel, **kw: str) -> Config:
    section = telegram_section(tg) + f"allow_users = [{ALICE}]\n" + kw.get("extra", "")
    return make_config(
        tmp / "botmux.db", model.base_url, extra=section, model_extra=kw.get("model_extra", "")
    )


async def transcript(config: Config, conversation: str) -> list[StoredMessage]:
    async with open_store(config) as store:
        return await store.read(Transcript(conversation))


@asynccontextmanager
async def gateway(config: Config) -> AsyncIterator[None]:
    async with running_gateway(config):
        yield


def data_url(content_type: str, data: bytes) -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode()}"


# -- Telegram -------------------------------------------------------------------------------


async def test_a_telegram_photo_reaches_a_vision_model_beside_its_caption(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    small, large = os.urandom(2_000), os.urandom(60_000)
    extra = tg.files.photo(small, large, caption="what is in this photo?")
    config = telegram_config(tmp_path, tg, model, model_extra=VISION)
    async with gateway(config):
        tg.inject_message(ALICE, extra=extra)
        with anyio.fail_after(15):
            [reply] = await tg.wait_for_sent(1, ALICE)
    assert reply == "answered: what is in this photo?"
    [request] = model.requests
    assert user_parts(request) == [
        {"type": "text", "text": "what is in this photo?"},
        {"type": "image_url", "image_url": {"url": data_url("image/jpeg", large)}},
    ]
    # The largest size was fetched, once, and is kept in the store with its reference.
    assert [c.params["file_id"] for c in tg.calls_to("getFile")] == [extra["photo"][1]["file_id"]]
    assert len(tg.files.downloads) == 1
    user, _ = await transcript(config, f"telegram:{ALICE}")
    [ref] = user.attachments
    assert (ref.kind, ref.size, ref.sha256 is not None) == ("image", 60_000, True)


async def test_a_photo_to_a_text_only_chain_gets_the_plain_statement(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    extra = tg.files.photo(os.urandom(5_000), caption="and tell me a joke")
    async with gateway(telegram_config(tmp_path, tg, model)):
        tg.inject_message(ALICE, extra=extra)
        with anyio.fail_after(15):
            [reply] = await tg.wait_for_sent(1, ALICE)
    assert reply.startswith(IMAGES_UNSEEN)
    assert "answered: and tell me a joke" in reply
    [request] = model.requests
    assert [p["type"] for p in request.content_parts] == ["text"] * len(request.content_parts)


async def test_a_voice_note_is_transcribed_answered_and_stored(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    model.transcript = "remind me to buy bread"
    voice = b"OggS" + os.urandom(3_000)
    transcription = (
        f'[transcription]\nbase_url = "{model.base_url}"\nmodel = "whisper-test"\n'
        'api_keys = ["sk-whisper-0001"]\n'
    )
    config = telegram_config(tmp_path, tg, model, extra="\n" + transcription)
    async with gateway(config):
        tg.inject_message(ALICE, extra=tg.files.voice(voice, duration=4))
        with anyio.fail_after(15):
            [reply] = await tg.wait_for_sent(1, ALICE)
    assert reply == "answered: remind me to buy bread"
    [call] = model.transcriptions
    assert (call.model, call.data) == ("whisper-test", voice)
    user, assistant = await transcript(config, f"telegram:{ALICE}")
    [ref] = user.attachments
    assert (ref.kind, ref.text) == ("audio", "remind me to buy bread")
    assert assistant.content == reply


@pytest.mark.process
async def test_a_pdfs_text_reaches_the_model(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    pdf = pdf_with_text("The launch is on Thursday at noon.")
    extra = tg.files.document(
        pdf, file_name="plan.pdf", mime_type="application/pdf", caption="when is the launch?"
    )
    async with gateway(telegram_config(tmp_path, tg, model)):
        tg.inject_message(ALICE, extra=extra)
        with anyio.fail_after(15):
            await tg.wait_for_sent(1, ALICE)
    [request] = model.requests
    text = user_text(request)
    assert text.startswith("when is the launch?")
    assert "[plan.pdf]" in text and "The launch is on Thursday at noon." in text


async def test_an_oversized_telegram_file_is_answered_with_the_limit(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """Telegram states the size: nothing is fetched, the reply names the file and the
    limit, and the caption is still answered."""
    extra = tg.files.document(
        b"x" * 5_000, file_name="dump.txt", mime_type="text/plain", caption="read this"
    )
    agent = "\n[agent]\nmax_attachment_bytes = 4096\n"
    config = telegram_config(tmp_path, tg, model, extra=agent)
    async with gateway(config):
        tg.inject_message(ALICE, extra=extra)
        with anyio.fail_after(15):
            [reply] = await tg.wait_for_sent(1, ALICE)
    assert "dump.txt" in reply and "4096" in reply
    assert "answered: read this" in reply
    assert tg.calls_to("getFile") == [] and tg.files.downloads == []
    user, _ = await transcript(config, f"telegram:{ALICE}")
    assert [(r.name, r.sha256) for r in user.attachments] == [("dump.txt", None)]


async def test_a_telegram_download_that_redirects_is_not_followed(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    """Review L-4: Telegram files come only from the Bot API's origin, so a redirect off it
    (here to another loopback server) is refused at the 3xx, named in the reply."""
    extra = tg.files.document(b"q3", file_name="q3.txt", mime_type="text/plain", caption="sum")
    async with push_receiver() as elsewhere, gateway(telegram_config(tmp_path, tg, model)):
        tg.files.redirect_next_download(elsewhere.url)
        tg.inject_message(ALICE, extra=extra)
        with anyio.fail_after(15):
            [reply] = await tg.wait_for_sent(1, ALICE)
    assert elsewhere.received == []
    assert reply.startswith(
        "q3.txt was not fetched: its file server answered with a redirect (302), which botmux"
        " does not follow; it was not used."
    )
    assert reply.endswith("answered: sum")
    assert [d.status for d in tg.files.downloads] == [302]  # not retried either


async def test_a_redelivered_photo_is_stored_and_fetched_once(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    extra = tg.files.photo(os.urandom(4_000), caption="once")
    config = telegram_config(tmp_path, tg, model, model_extra=VISION)
    async with gateway(config):
        update = tg.inject_message(ALICE, extra=extra)["update_id"]
        with anyio.fail_after(15):
            await tg.wait_for_sent(1, ALICE)
    tg.redeliver(update)  # as if the acknowledgement had been lost
    async with gateway(config):
        with anyio.fail_after(15):
            await tg.wait_for_confirmed(update)
            # A later message is answered after the redelivery was handled (in order).
            tg.inject_message(ALICE, "next")
            await tg.wait_for_sent(2, ALICE)
    rows = await transcript(config, f"telegram:{ALICE}")
    assert [(r.role, r.content, len(r.attachments)) for r in rows] == [
        ("user", "once", 1),
        ("assistant", "answered: once", 0),
        ("user", "next", 0),
        ("assistant", "answered: next", 0),
    ]
    assert len(tg.calls_to("getFile")) == 1 and len(tg.files.downloads) == 1


# -- Discord --------------------------------------------------------------------------------

TOKEN = "discord-test-token"
BOT_ID = 990_000_000_000_000_001
USER = 990_000_000_000_000_010
DM_ID = 990_000_000_000_000_300


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token=TOKEN, bot_user_id=BOT_ID) as fake:
        fake.add_user(USER, "alice")
        fake.add_dm_channel(DM_ID, USER)
        yield fake


async def test_a_discord_image_and_a_text_file_reach_the_model(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    section = (
        f'[discord]\ntoken = "{TOKEN}"\napi_base = "{dc.api_base}"\n'
        f'gateway_url = "{dc.gateway_url}"\nallow_users = [{USER}]\n'
        "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\n"
    )
    config = make_config(tmp_path / "botmux.db", model.base_url, extra=section, model_extra=VISION)
    png = os.urandom(30_000)
    image = dc.cdn.attachment(png, filename="chart.png", content_type="image/png")
    notes = dc.cdn.attachment(
        b"Budget: 40k\n", filename="notes.txt", content_type="text/plain; charset=utf-8"
    )
    async with gateway(config):
        await dc.inject_message(DM_ID, "compare these", author_id=USER, attachments=[image, notes])
        with anyio.fail_after(15):
            [reply] = await dc.wait_for_messages(DM_ID, 1)
    [request] = model.requests
    parts = user_parts(request)
    assert {"type": "image_url", "image_url": {"url": data_url("image/png", png)}} in parts
    text = user_text(request)
    assert text.startswith("compare these") and "[notes.txt]" in text and "Budget: 40k" in text
    assert reply["content"].startswith("answered: compare these")
    assert [len(dc.cdn.downloads_of(a)) for a in (image, notes)] == [1, 1]


def discord_config(tmp_path: Path, dc: FakeDiscord, model: FakeModel) -> Config:
    section = (
        f'[discord]\ntoken = "{TOKEN}"\napi_base = "{dc.api_base}"\n'
        f'gateway_url = "{dc.gateway_url}"\nallow_users = [{USER}]\n'
        "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\n"
    )
    return make_config(tmp_path / "botmux.db", model.base_url, extra=section)


async def test_a_discord_attachment_off_discords_file_servers_is_named_not_fetched(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    """Review L-4: a URL on another host (here another loopback server: another origin) is
    never requested; the reply names the file, and the rest of the message is answered."""
    notes = dc.cdn.attachment(b"Budget: 40k\n", filename="notes.txt")
    async with push_receiver() as elsewhere, gateway(discord_config(tmp_path, dc, model)):
        planted = dc.cdn.attachment(b"secret", filename="evil.txt")
        planted.update(url=elsewhere.url, proxy_url=elsewhere.url)
        await dc.inject_message(DM_ID, "read these", author_id=USER, attachments=[planted, notes])
        with anyio.fail_after(15):
            [reply] = await dc.wait_for_messages(DM_ID, 1)
    assert elsewhere.received == [] and dc.cdn.downloads_of(planted) == []
    origin = f"http://127.0.0.1:{elsewhere.port}"
    assert reply["content"].startswith(
        f"evil.txt was not fetched: {origin} is not one of Discord's file servers; it was not used."
    )
    assert "Budget: 40k" in user_text(model.requests[0])


async def test_a_discord_download_that_redirects_is_not_followed(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    notes = dc.cdn.attachment(b"Budget: 40k\n", filename="notes.txt")
    async with push_receiver() as elsewhere, gateway(discord_config(tmp_path, dc, model)):
        dc.cdn.redirect_next_download(elsewhere.url)
        await dc.inject_message(DM_ID, "read this", author_id=USER, attachments=[notes])
        with anyio.fail_after(15):
            [reply] = await dc.wait_for_messages(DM_ID, 1)
    assert elsewhere.received == []
    assert reply["content"].startswith(
        "notes.txt was not fetched: its file server answered with a redirect (302)"
    )
    assert [d.status for d in dc.cdn.downloads_of(notes)] == [302]
