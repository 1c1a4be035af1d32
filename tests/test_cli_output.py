"""What the operator's CLI prints is safe for a terminal, and pairing can be cleaned up.

The CLI runs as a real process against a real SQLite store.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from gateway.messages import Inbound
from gateway.store import AdmitRow, RequestPairing, open_sqlite_store
from tests.harness import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.process]

HOSTILE = "hi \x1b]0;PWNED\x07\x1b[2J\x1b[31mred \u202egnp.exe\x9b\nfake #99 row"


async def botmux(config: Path, *args: str) -> tuple[int, str, str]:
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "gateway", *args, "--config", str(config)],
            cwd=ROOT,
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "botmux.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "botmux.db"}"\n')
    return config


async def test_sessions_show_escapes_control_and_bidi_characters(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "botmux.db")) as store:
        await store.submit(
            AdmitRow(
                Inbound(
                    platform="peer", conversation="peer:esc", platform_message_id="m1", text=HOSTILE
                )
            )
        )
        await store.submit(
            RequestPairing("telegram", "7", "@evil\x1b[2J\u202e", ttl_s=3600, max_pending=3)
        )
    config = write_config(tmp_path)
    rc, out, _ = await botmux(config, "sessions", "show", "peer:esc")
    assert rc == 0
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out and "\x07" not in out
    assert "hi \\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred \\u202egnp.exe\\x9b" in out
    [first, second] = out.splitlines()
    assert first.startswith("#1 ") and second == "    fake #99 row"  # no line passes for a row
    rc, out, _ = await botmux(config, "pairing", "list")
    assert rc == 0 and "\x1b" not in out and "\u202e" not in out
    assert "@evil\\x1b[2J\\u202e" in out


async def test_sessions_show_last_pages_a_long_conversation_by_row_id(tmp_path: Path) -> None:
    """``--last N`` prints the newest N rows, oldest first, and says on stderr how to read
    the page before them; ``--before ID`` is that page; a bad number is a usage error."""
    async with open_sqlite_store(str(tmp_path / "botmux.db")) as store:
        for n in range(1, 8):
            await store.submit(
                AdmitRow(
                    Inbound(
                        platform="peer",
                        conversation="peer:long",
                        platform_message_id=f"m{n}",
                        text=f"message {n}",
                    )
                )
            )
    config = write_config(tmp_path)
    rc, out, err = await botmux(config, "sessions", "show", "peer:long", "--last", "3")
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines()] == ["#5", "#6", "#7"]
    assert err.strip() == "older rows: botmux sessions show peer:long --last 3 --before 5"
    rc, out, err = await botmux(
        config, "sessions", "show", "peer:long", "--last", "3", "--before", "5"
    )
    assert rc == 0 and [line.split()[0] for line in out.splitlines()] == ["#2", "#3", "#4"]
    assert "--before 2" in err
    rc, out, err = await botmux(
        config, "sessions", "show", "peer:long", "--last", "3", "--before", "2"
    )
    assert rc == 0 and [line.split()[0] for line in out.splitlines()] == ["#1"]
    assert err == ""  # nothing older
    rc, out, _ = await botmux(config, "sessions", "show", "peer:long")
    assert rc == 0 and len(out.splitlines()) == 7  # without --last: every row
    rc, _, err = await botmux(config, "sessions", "show", "peer:long", "--last", "0")
    assert (
        rc == 2 and "--last: must be a whole number from 1 to 4611686018427387904, not '0'" in err
    )
    rc, _, err = await botmux(
        config, "sessions", "show", "peer:long", "--last", "3", "--before", str(2**63)
    )
    assert rc == 2 and "--before: must be a whole number from 1 to" in err
    rc, out, _ = await botmux(config, "sessions", "show", "peer:long", "--last", str(2**62))
    assert rc == 0 and len(out.splitlines()) == 7
    rc, _, err = await botmux(config, "sessions", "show", "peer:long", "--before", "3")
    assert rc == 2 and "--before goes with --last" in err
    rc, _, err = await botmux(
        config, "sessions", "show", "peer:long", "--last", "3", "--before", "1"
    )
    assert rc == 1 and "no rows of peer:long before #1" in err
