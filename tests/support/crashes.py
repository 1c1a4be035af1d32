"""The crash tests' steps (SPEC 7): botmux as a process armed with a failpoint
(``BOTMUX_FAILPOINT=<point>:kill``), waiting for it to kill itself there, stopping the restarted
one cleanly, and what must hold after: one answer to the one message."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import anyio

from tests.fakes.openai_server import FakeModel
from tests.harness import GatewayProcess, botmux_process

# Two paragraphs, each longer than half of Discord's 2000 and Telegram's 4096 limits: the
# reply is cut into several chunks, so "between chunks" is a real place.
LONG = ("Lorem ipsum dolor sit amet. " * 90 + "\n\n") * 2 + "The end."


def make_gateway(
    tmp_path: Path,
    model: FakeModel,
    section: str = "",
    gateway_keys: str = "",
    *,
    model_extra: str = "",
) -> GatewayProcess:
    """botmux as a process (not started) with a platform's ``section``; idle actors are kept,
    so a restart finds the conversation's work only in the store."""
    return botmux_process(
        tmp_path,
        model.base_url,
        extra=section + "\n[gateway]\nidle_evict_s = 600\n" + gateway_keys,
        model_extra=model_extra,
    )


async def crash_at(gateway: GatewayProcess, point: str) -> None:
    """Wait for the armed process to kill itself; fail loudly if it never gets there."""
    with anyio.fail_after(20):
        code = await gateway.wait()
    assert code == -signal.SIGKILL, f"exit {code}, not killed at {point}:\n{gateway.log()}"
    assert f"failpoint {point} reached" in gateway.log()


async def settle(gateway: GatewayProcess) -> None:
    """Stop the restarted gateway cleanly, so every send it was making has finished."""
    gateway.signal(signal.SIGTERM)
    assert await gateway.wait() == 0, gateway.log()


def rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, state FROM messages ORDER BY id"))


def assert_one_answer(db: Path) -> None:
    assert rows(db) == [("user", "answered"), ("assistant", "final")]
