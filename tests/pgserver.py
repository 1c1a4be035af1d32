"""A throwaway PostgreSQL server for the tests: initdb and pg_ctl on a spare port.

``.ci/run`` starts one with ``python -m tests.pgserver start DIR`` (it prints the URL to put
in ``BOTMUX_TEST_POSTGRES``) and stops it with ``python -m tests.pgserver stop DIR``. A plain
``pytest`` without that variable starts its own for the session (``tests/conftest.py``).
PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` user
(or ``nobody``) and its commands run through ``runuser``.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg


class Unavailable(Exception):
    """No PostgreSQL server can be started here; the message says why."""


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    if found:
        return Path(found[0]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).resolve().parent
    raise Unavailable(
        "PostgreSQL server binaries (pg_ctl, initdb) were not found:"
        " install them with `apt-get install postgresql`"
    )


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--", *cmd]
    raise Unavailable("running as root and no unprivileged user (postgres, nobody) exists")


def _owner_ids() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    for user in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(base: Path, *, durable: bool = False) -> str:
    """Create and start a cluster under ``base``; return its URL (database ``botmux``).

    Tests run it without fsync (nothing here must survive a power cut); ``durable`` keeps
    PostgreSQL's defaults, for benchmarks."""
    bindir = _bindir()
    base.mkdir(parents=True, exist_ok=True)
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir(exist_ok=True)
    ids = _owner_ids()
    if ids is not None:
        for path in (base, sockets):
            os.chown(path, *ids)
    port = _free_port()
    log = base / "server.log"

    def run(*cmd: str) -> None:
        done = subprocess.run(_as_owner(list(cmd)), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise Unavailable(f"{Path(cmd[0]).name} failed: {done.stderr.strip()[-800:]}")

    if not (data / "PG_VERSION").exists():
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "botmux",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {sockets} -c max_connections=200"
    if not durable:
        options += " -c fsync=off -c full_page_writes=off"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start")
    url = f"postgresql://botmux@127.0.0.1:{port}/postgres"
    run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "botmux", "botmux")
    (base / "url").write_text(url.rsplit("/", 1)[0] + "/botmux")
    return (base / "url").read_text()


def create_database(url: str, name: str) -> None:
    """A new empty database on the server at ``url`` (from synchronous code: fixtures)."""

    async def create() -> None:
        db = await asyncpg.connect(url)
        try:
            await db.execute(f'CREATE DATABASE "{name}"')
        finally:
            await db.close()

    asyncio.run(create())


def stop(base: Path) -> None:
    data = base / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_owner([str(_bindir() / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            check=False,
        )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.pgserver start|stop DIR", file=sys.stderr)
        return 2
    base = Path(argv[1])
    if argv[0] == "stop":
        stop(base)
        return 0
    try:
        print(start(base))
    except Unavailable as exc:
        print(f"PostgreSQL unavailable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
