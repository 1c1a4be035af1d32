"""A preview left by a crash (SPEC 8): botmux as a real process, SIGKILLed while the model is
still writing and a preview message is on screen; after the restart the re-run turn edits
that message into its answer, so the chat shows one answer and no stale partial text.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel, ok, streamed
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import GatewayProcess, botmux_process, telegram_section

pytestmark = [pytest.mark.anyio, pytest.mark.process]

ALICE = 42


@pytest.fixture
def gateway(tmp_path: Path, model: FakeModel, tg: FakeTelegram) -> GatewayProcess:
    section = telegram_section(
        tg,
        f"allow_users = [{ALICE}]\npoll_timeout_s = 2\nrequest_timeout_s = 3\n"
        'streaming = "edit"\nstream_interval_s = 0.2\n',
    )
    return botmux_process(tmp_path, model.base_url, extra=section)


@pytest.fixture(autouse=True)
async def _reap(gateway: GatewayProcess, model: FakeModel) -> AsyncIterator[None]:
    yield
    model.release_streams()
    await gateway.kill()


def previews(db: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT user_row_id, message_id FROM previews"))


async def test_sigkill_mid_stream_then_the_rerun_edits_the_preview_into_its_answer(
    gateway: GatewayProcess, model: FakeModel, tg: FakeTelegram, tmp_path: Path
) -> None:
    pieces = ("The first run writes this much before the crash, ", "then more, ", "and more")
    model.script(streamed(*pieces, interval_s=0.3, hold_after=3))
    await gateway.start()
    tg.inject_message(ALICE, "survive this")
    with anyio.fail_after(15):
        [preview] = await tg.wait_for_sent(1, ALICE)
        await tg.wait_for_calls("editMessageText", 1)  # recorded before this first edit
    gateway.signal(signal.SIGKILL)
    assert await gateway.wait() == -signal.SIGKILL
    [message] = tg.bot_messages(ALICE)
    assert previews(tmp_path / "botmux.db") == [(1, str(message["message_id"]))]

    model.script(ok("The answer, after the restart."))
    await gateway.start()
    with anyio.fail_after(15):
        await tg.wait_until(
            lambda: tg.visible_messages(ALICE) == ["The answer, after the restart."]
        )
    assert preview.startswith("The first run")
    assert len(tg.calls_to("sendMessage")) == 1  # the preview, edited into the answer
    assert [r.last_user for r in model.requests] == ["survive this", "survive this"]
