"""The command line's side of conversations: ``botmux sessions list``, ``show`` (whole, or a
page by the index with ``--last``/``--before``), ``purge`` and ``delete`` read and change the
store directly (SPEC's CLI); a change is logged as the operator's."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio

from gateway.cli_text import printable
from gateway.config import Config
from gateway.logs import configure_logging
from gateway.messages import schedule_of

if TYPE_CHECKING:
    from gateway.store import Store

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
#: The largest row id or count the CLI takes: a store's ids are 64-bit (SQLite, PostgreSQL's
#: bigint), and a page reads one row more than it shows.
MOST = 2**62


def _positive(text: str) -> int:
    """An argument that is a whole number from 1 to :data:`MOST` (argparse names it on an
    error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MOST:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MOST}, not {text[:40]!r}"
        )
    return value


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    sessions = sub.add_parser("sessions", help="read conversations from the store")
    ssub = sessions.add_subparsers(dest="action", required=True, parser_class=parser_class)
    ssub.add_parser("list", help="list conversations")
    show = ssub.add_parser("show", help="show one conversation's transcript")
    show.add_argument("key", help="conversation key, e.g. peer:alice")
    show.add_argument(
        "--last", type=_positive, metavar="N", help="only the newest N rows (default: every row)"
    )
    show.add_argument(
        "--before", type=_positive, metavar="ID", help="with --last: rows older than row #ID"
    )
    purge = ssub.add_parser("purge", help="drop a conversation's pending turns (never sent)")
    purge.add_argument("key", help="conversation key, e.g. peer:alice")
    delete = ssub.add_parser("delete", help="remove a conversation: its messages and outbox")
    delete.add_argument("key", help="conversation key, e.g. peer:alice")


def run(config: Config, args: argparse.Namespace) -> int:
    if getattr(args, "before", None) is not None and args.last is None:
        print("botmux: error: sessions show: --before goes with --last", file=sys.stderr)
        return EXIT_USAGE
    if not config.store.shared and not os.path.exists(config.store.path):
        print(f"botmux: no store at {config.store.path}", file=sys.stderr)
        return EXIT_FAILURE
    if args.action in ("purge", "delete"):  # the operator's change goes to the log
        configure_logging(level=config.log.level, fmt=config.log.format, secrets=config.secrets())
    return anyio.run(_sessions, config, args)


async def _sessions(config: Config, args: argparse.Namespace) -> int:
    from gateway.store import Conversations, DeleteConversation, PurgeConversation, open_store

    async with open_store(config) as store:
        if args.action == "list":
            rows = await store.read(Conversations())
            print(f"{'conversation':<40} {'messages':>8} {'pending':>7}  last activity")
            for c in rows:
                when = datetime.fromtimestamp(c.updated_at).strftime("%Y-%m-%d %H:%M:%S")
                print(f"{printable(c.key):<40} {c.messages:>8} {c.pending:>7}  {when}")
            return EXIT_OK
        key: str = args.key
        if args.action == "purge":
            dropped = await store.submit(PurgeConversation(key))
            logging.getLogger("gateway").warning(
                "pending turns purged", extra={"conversation": key, "rows": dropped, "by": "cli"}
            )
            print(f"purged {dropped} pending message(s) of {key}: marked failed, not sent")
            return EXIT_OK
        if args.action == "delete":
            removed = await store.submit(DeleteConversation(key))
            if removed is None:
                print(f"no conversation {key}", file=sys.stderr)
                return EXIT_FAILURE
            logging.getLogger("gateway").warning(
                "conversation deleted", extra={"conversation": key, "rows": removed, "by": "cli"}
            )
            print(f"deleted {key}: {removed} message(s) and its outbox")
            return EXIT_OK
        return await _show(store, key, args.last, args.before)


async def _show(store: Store, key: str, last: int | None, before: int | None) -> int:
    from gateway.store import Transcript, TranscriptPage

    more = False
    if last is None:
        messages = await store.read(Transcript(key))
    else:  # one page, read by the index: a long conversation is not read whole
        found = await store.read(TranscriptPage(key, last, before))
        messages, more = found.rows, found.more
    if not messages:
        none = f"no conversation {key}" if before is None else f"no rows of {key} before #{before}"
        print(none, file=sys.stderr)
        return EXIT_FAILURE
    for m in messages:
        when = datetime.fromtimestamp(m.created_at).strftime("%Y-%m-%d %H:%M:%S")
        state = (m.failure and f"failed:{m.failure}") or m.state
        if (schedule := schedule_of(m.platform_message_id)) is not None:
            state += f" scheduled:{schedule}"  # a schedule's firing (SPEC 16)
        print(f"#{m.id} {when} {m.role:<9} [{state}] {printable(m.shown)}")
    if more:
        older = f"botmux sessions show {printable(key)} --last {last} --before {messages[0].id}"
        print(f"older rows: {older}", file=sys.stderr)
    return EXIT_OK
