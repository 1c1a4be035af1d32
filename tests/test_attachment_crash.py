"""Attachments survive kill -9 (issue 15): botmux as a real process with
``BOTMUX_FAILPOINT=<point>:kill``; a user sends a photo (Telegram) or an image attachment
(Discord); the process kills itself after the admission (nothing fetched yet) or after the
fetch (the bytes stored, no model call); it is restarted without the failpoint. After the
restart there is one answer, and the file was fetched once in all (the fakes count).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel, ok, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import telegram_section
from tests.support.crashes import assert_one_answer, crash_at, make_gateway, settle
from tests.support.discord_world import BOB, CHANNEL_ID, discord_toml, mention, open_world

pytestmark = [pytest.mark.anyio, pytest.mark.process]

ALICE = 42
POINTS = ("after_admission", "after_attachment_fetch")
VISION = 'input = ["text", "image"]\n'


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok("I see a cat.")
        yield fake


@pytest.mark.parametrize("point", POINTS)
async def test_telegram_photo(tmp_path: Path, model: FakeModel, point: str) -> None:
    async with open_fake_telegram() as tg:
        section = (
            telegram_section(tg)
            + f"allow_users = [{ALICE}]\npoll_timeout_s = 1\nrequest_timeout_s = 3\n"
        )
        gateway = make_gateway(tmp_path, model, section, model_extra=VISION)
        extra = tg.files.photo(os.urandom(20_000), caption="what is this?")
        try:
            await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill"})
            tg.inject_message(ALICE, extra=extra)
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            with anyio.fail_after(20):
                await tg.wait_for_sent(1, ALICE)
                await settle(gateway)
        finally:
            await gateway.kill()
        assert tg.sent_messages(ALICE) == ["I see a cat."]
        assert len(tg.calls_to("getFile")) == 1 and len(tg.files.downloads) == 1
    [request] = model.requests
    assert any(p.get("type") == "image_url" for p in request.content_parts)
    assert_one_answer(tmp_path / "botmux.db")


@pytest.mark.parametrize("point", POINTS)
async def test_discord_image(tmp_path: Path, model: FakeModel, point: str) -> None:
    async with open_world() as dc:
        gateway = make_gateway(tmp_path, model, discord_toml(dc), model_extra=VISION)
        image = dc.cdn.attachment(os.urandom(20_000), filename="cat.png", content_type="image/png")
        try:
            await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill"})
            await dc.inject_message(
                CHANNEL_ID, mention("what is this?"), author_id=BOB, attachments=[image]
            )
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            with anyio.fail_after(20):
                await dc.wait_for_messages(CHANNEL_ID, 1)
                await settle(gateway)
        finally:
            await gateway.kill()
        assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["I see a cat."]
        assert len(dc.cdn.downloads_of(image)) == 1
    assert_one_answer(tmp_path / "botmux.db")
