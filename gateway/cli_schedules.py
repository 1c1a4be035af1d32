"""The command line's side of scheduled messages (SPEC 16): ``botmux schedules list`` and
``botmux schedules remove ID`` read and change the store, and ``botmux check`` names the
config's schedules and previews what storing them would add, change and remove (the store's
config schedules against the file's: what a reload or a restart does).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import time
from typing import Any

import anyio

from gateway.config import Config
from gateway.config_schedules import configured
from gateway.errors import GatewayError
from gateway.messages import Schedule
from gateway.schedule_times import next_due, when_of
from gateway.store.schedules import Schedules

EXIT_OK, EXIT_FAILURE = 0, 1
#: ``botmux check`` waits this long for the store, for its preview of the schedules.
PREVIEW_DEADLINE_S = 5.0


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    schedules = sub.add_parser("schedules", help="scheduled messages and their records")
    ssub = schedules.add_subparsers(dest="action", required=True, parser_class=parser_class)
    ssub.add_parser("list", help="every schedule: next due, last firing, delivery, failures")
    remove = ssub.add_parser("remove", help="remove a conversation's own schedule")
    remove.add_argument("id")


def check_lines(config: Config, now: float | None = None) -> list[str]:
    """What ``botmux check`` says of the config's schedules."""
    from gateway.schedule_book import stamp

    now = time.time() if now is None else now
    scheduler = config.scheduler
    tools = "on" if scheduler.agent_tools else "off"
    lines = [
        f"scheduler: agent tools {tools}, at most {scheduler.max_per_conversation} per"
        f" conversation and {scheduler.max_total} in all, every"
        f" {scheduler.min_interval_s:g} s at most, timezone"
        f" {scheduler.timezone}"
    ]
    for s in configured(config.schedules, scheduler):
        state = "" if s.enabled else " [disabled]"
        nxt = next_due(when_of(s), now) if s.enabled else None
        lines.append(
            f"schedule {s.id}{state}: {when_of(s).describe()} -> {s.conversation},"
            f" {s.action}, catch_up {s.catch_up}, next {stamp(nxt)}"
        )
    return lines


def changes(stored: list[Schedule], wanted: tuple[Schedule, ...]) -> dict[str, list[str]]:
    """The config schedules a sync of ``wanted`` would add, change and remove."""
    mine = {s.id: s for s in stored if s.origin == "config"}
    taken = {s.id for s in stored if s.origin != "config"}
    added = [s.id for s in wanted if s.id not in mine and s.id not in taken]
    changed = [s.id for s in wanted if s.id in mine and not mine[s.id].defines_same(s)]
    names = {s.id for s in wanted}
    removed = sorted(i for i in mine if i not in names)
    clashes = [s.id for s in wanted if s.id in taken]
    return {"add": added, "change": changed, "remove": removed, "clash": clashes}


async def preview(config: Config) -> list[str]:
    """What storing the config's schedules would change, read from the store without changing
    it (no migration: a check never touches the store); nothing without a store yet."""
    try:
        with anyio.move_on_after(PREVIEW_DEADLINE_S):
            stored = await _stored(config)
            return _preview_lines(stored, configured(config.schedules, config.scheduler))
    except (GatewayError, OSError) as exc:  # the check is of the file: no error of its own
        return [f"schedules: no preview: the store cannot be read ({exc})"]
    return ["schedules: no preview: the store did not answer in time"]


async def _stored(config: Config) -> list[Schedule] | None:
    """The stored schedules, or None when the store has none yet (no file, no table)."""
    from gateway.store.schedules import schedules_postgres, schedules_sqlite

    query = Schedules()
    if config.store.shared:
        import asyncpg

        from gateway.store._pg_connection import redact

        try:
            db = await asyncpg.connect(config.store.url)
        except (OSError, asyncpg.PostgresError) as exc:
            raise GatewayError(f"{redact(config.store.url)}: {type(exc).__name__}") from exc
        try:
            if await db.fetchval("SELECT to_regclass('schedules')") is None:
                return None
            return await schedules_postgres(db, query)
        finally:
            await db.close()
    path = anyio.Path(config.store.path)
    if not await path.exists():
        return None

    def read() -> list[Schedule] | None:
        uri = f"file:{config.store.path}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'schedules'").fetchall()
            return schedules_sqlite(db, query) if found else None

    try:
        return await anyio.to_thread.run_sync(read)
    except sqlite3.Error as exc:
        raise GatewayError(str(exc)) from exc


def _preview_lines(stored: list[Schedule] | None, wanted: tuple[Schedule, ...]) -> list[str]:
    found = changes(stored or [], wanted)
    lines = []
    for verb in ("add", "change", "remove"):
        if found[verb]:
            lines.append(f"schedules: a reload would {verb} {', '.join(found[verb])}")
    for name in found["clash"]:
        lines.append(f"warning: schedule {name}: a conversation's schedule has that id; not stored")
    if not any(found.values()) and wanted:
        lines.append("schedules: the store has these already")
    return lines


async def run(config: Config, args: argparse.Namespace) -> int:
    from gateway.schedule_book import ScheduleBook, describe
    from gateway.store import open_store

    if not config.store.shared and not await anyio.Path(config.store.path).exists():
        print(f"botmux: no store at {config.store.path}", file=sys.stderr)
        return EXIT_FAILURE
    async with open_store(config) as store:
        book = ScheduleBook(
            store, settings=lambda: config.scheduler, wake=lambda: None, now=time.time
        )
        if args.action == "remove":
            text = await book.remove(args.id, conversation=None, by="cli")
            print(text)
            return EXIT_OK if text.startswith("Removed") else EXIT_FAILURE
        records = await book.records()
    if not records:
        print("no schedules")
    for r in records:
        print(f"[{r.schedule.conversation}] {describe(r)}")
    return EXIT_OK
