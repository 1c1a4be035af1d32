"""botmux as a real process on Telegram: SIGKILL between admission and reply, then restart.

The fake Bot API and the fake model live in the test process; botmux is a child process
(``python -m gateway run``) that is killed with no chance to clean up.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel, Hold, ok
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import GatewayProcess, botmux_process, telegram_section

pytestmark = [pytest.mark.anyio, pytest.mark.process]

ALICE = 42


@pytest.fixture
def gateway(tmp_path: Path, model: FakeModel, tg: FakeTelegram) -> GatewayProcess:
    section = telegram_section(
        tg, f"allow_users = [{ALICE}]\npoll_timeout_s = 2\nrequest_timeout_s = 3\n"
    )
    return botmux_process(tmp_path, model.base_url, extra=section)


@pytest.fixture(autouse=True)
async def _reap(gateway: GatewayProcess) -> AsyncIterator[None]:
    yield
    await gateway.kill()


def rows(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, content, state FROM messages ORDER BY id"))


async def test_sigkill_between_admission_and_reply_gives_one_reply(
    gateway: GatewayProcess, model: FakeModel, tg: FakeTelegram, tmp_path: Path
) -> None:
    model.default = lambda r: Hold()
    await gateway.start()
    update_id = tg.inject_message(ALICE, "survive this")["update_id"]
    with anyio.fail_after(10):
        await model.wait_for_requests(1)  # admitted, and the turn is in the model
    gateway.signal(signal.SIGKILL)
    assert await gateway.wait() == -signal.SIGKILL
    assert rows(tmp_path / "botmux.db") == [("user", "survive this", "pending")]

    # Worst case on top: Telegram also sends the update again (as if the offset had not
    # advanced before the crash). The resumed turn answers; the redelivery is a duplicate.
    tg.redeliver(update_id)
    model.default = lambda r: ok("made it")
    tg.fail_next("sendMessage", status=429, retry_after=1)  # and a flood wait on the way
    await gateway.start()
    with anyio.fail_after(15):
        await tg.wait_for_sent(1, ALICE)
        await tg.wait_for_confirmed(update_id)
    tg.inject_message(ALICE, "still one?")
    with anyio.fail_after(10):
        await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == ["made it", "made it"]  # one per message
    assert [(r[0], r[1]) for r in rows(tmp_path / "botmux.db")] == [
        ("user", "survive this"),
        ("assistant", "made it"),
        ("user", "still one?"),
        ("assistant", "made it"),
    ]
    assert [r.last_user for r in model.requests].count("survive this") == 2  # killed, resumed
    log = gateway.log()
    assert "Warning" not in log, log  # no PTBDeprecationWarning from the 429, nor any other


async def test_sigkill_with_the_reply_unsent_delivers_it_after_restart(
    gateway: GatewayProcess, model: FakeModel, tg: FakeTelegram, tmp_path: Path
) -> None:
    tg.hang_next("sendMessage")  # the reply is committed to the outbox but never goes out
    await gateway.start()
    tg.inject_message(ALICE, "answer me")
    with anyio.fail_after(10):
        await tg.wait_for_calls("sendMessage", 1)
    gateway.signal(signal.SIGKILL)
    assert await gateway.wait() == -signal.SIGKILL
    with sqlite3.connect(tmp_path / "botmux.db") as conn:
        assert list(conn.execute("SELECT state FROM outbox")) == [("pending",)]

    await gateway.start()
    with anyio.fail_after(10):
        await tg.wait_for_sent(1, ALICE)
    assert tg.sent_messages(ALICE) == ["echo: answer me"]
    assert len(model.requests) == 1  # the turn was not run again
