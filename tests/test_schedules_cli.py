"""The command line's side of scheduled messages (SPEC 16), as a real process against a real
SQLite store: ``botmux check`` names every problem of ``[[schedules]]`` with its key (exit 2),
lists a valid file's schedules and previews what storing them would change;
``botmux schedules list`` shows each schedule's records, ``remove`` takes a conversation's
own away.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from gateway.messages import Inbound, Schedule, firing_id
from gateway.store import open_sqlite_store
from gateway.store.schedules import AddSchedule, FireSchedule, SyncConfigSchedules
from tests.harness import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def botmux(config: Path, *args: str) -> tuple[int, str, str]:
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "gateway", *args, "--config", str(config)],
            cwd=ROOT,
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_check_names_every_problem_of_the_schedules(tmp_path: Path) -> None:
    config = tmp_path / "botmux.toml"
    config.write_text(
        f'[store]\npath = "{tmp_path / "b.db"}"\n\n'
        '[[schedules]]\nname = "a"\nconversation = "telegram:42"\ncron = "61 9 * * *"\n'
        'prompt = "x"\n\n'
        '[[schedules]]\nname = "a"\nconversation = "peer:x"\ncron = "0 9 * * *"\n'
        'timezone = "Mars/Olympus"\ntext = "x"\n\n'
        '[[schedules]]\nname = "b"\nconversation = "peer:x"\nevery = "30s"\nat = "2026-01-01"\n'
    )
    code, out, err = await botmux(config, "check")
    assert code == 2, out + err
    assert err.splitlines() == [
        "botmux: config error: schedules[0].cron: '61 9 * * *' is not a five-field cron"
        " expression: Bad minute",
        "botmux: config error: schedules[0].conversation: 'telegram:42' is a telegram"
        " conversation and [telegram] is not configured (off)",
        "botmux: config error: schedules[1].name: the same name as schedules[0]",
        "botmux: config error: schedules[1].timezone: 'Mars/Olympus' is not an IANA time zone"
        " (such as Europe/Berlin)",
        "botmux: config error: schedules[2]: needs exactly one of cron, every and at",
        "botmux: config error: schedules[2]: needs exactly one of prompt (a model turn) and text"
        " (sent as is)",
    ]


async def test_check_lists_and_previews_and_schedules_list_shows_the_records(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    config = tmp_path / "botmux.toml"
    config.write_text(
        f'[store]\npath = "{db}"\n\n[scheduler]\ntimezone = "Europe/Berlin"\n\n'
        '[[schedules]]\nname = "daily"\nconversation = "peer:ops"\ncron = "0 9 * * *"\n'
        'text = "Morning."\n\n'
        '[[schedules]]\nname = "weekly"\nconversation = "peer:ops"\nevery = "7d"\n'
        'prompt = "Digest"\ncatch_up = "skip"\n'
    )
    old = Schedule("old", "peer:ops", "every", "1h", "text", "x", origin="config")
    mine = Schedule("c0ffee01", "peer:ana", "every", "1h", "text", "tea", first_seen=0.0)
    async with open_sqlite_store(str(db)) as store:
        await store.submit(SyncConfigSchedules((old,), 0.0))
        await store.submit(AddSchedule(mine, 20, 1000, 0.0))
        due = 3600.0
        pmid = firing_id("c0ffee01", "1970-01-01T01:00:00Z")
        inbound = Inbound("peer", "peer:ana", pmid, "tea", sender="schedule:text")
        await store.submit(FireSchedule("c0ffee01", 1, due, inbound, 0, due))

    code, out, err = await botmux(config, "check")
    assert code == 0, out + err
    lines = out.splitlines()
    assert any(
        line.startswith("schedule daily: cron 0 9 * * * (Europe/Berlin) -> peer:ops, text,")
        for line in lines
    ), out
    assert "schedules: a reload would add daily, weekly" in lines
    assert "schedules: a reload would remove old" in lines

    code, out, err = await botmux(config, "schedules", "list")
    assert code == 0, err
    listed = out.splitlines()
    assert listed[0] == "[peer:ana] c0ffee01: every 1h, text 'tea'"
    assert listed[1].startswith("  next: 20") and listed[1].endswith(":00 UTC")  # the next hour
    assert listed[2:4] == [
        "  last fired: 1970-01-01 01:00 UTC (row 1): waiting",
        "[peer:ops] old (config): every 1h, text 'x'",
    ]
    code, out, _ = await botmux(config, "schedules", "remove", "old")
    assert code == 1 and out.startswith("Schedule old comes from the config")
    code, out, _ = await botmux(config, "schedules", "remove", "c0ffee01")
    assert (code, out) == (0, "Removed schedule c0ffee01.\n")
