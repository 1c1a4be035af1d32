"""Talking to the running gateway from the command line: ``botmux reload`` and the reload
preview of ``botmux check`` (SPEC sections 7 and 13).

A running gateway writes a run file (its pid and the peer API's URL) named after the absolute
path of its config file, in its run directory, and removes it when it stops. The command line
finds the gateway that runs with a config file there first, so a reload that changes
``[peer] listen`` still reaches the gateway (listening where the old file said) and is refused
naming that key; without a run file it tries the address the file names. The request carries
the file's first operator token that the gateway takes (a reload that replaces every token at
once: send SIGHUP to the pid instead).

The run directory decides where the command line sends the config's tokens and text, so it is
trusted only when it is this user's alone (security review 2026-12-05, H-4: a directory in the
shared /tmp that another user created first received every token). It is
``$BOTMUX_RUN_DIR``, else ``[gateway] run_dir``, else ``$XDG_RUNTIME_DIR/botmux``, else
``botmux-run`` beside the SQLite store (the state directory; with PostgreSQL
``$XDG_STATE_HOME/botmux``, by default ``~/.local/state/botmux``). Before any use it is opened
without following a symlink and checked: a directory owned by this user that no group or other
user may write (botmux creates it 0700); anything else is refused, naming the path. Files in it
are opened relative to that checked directory, never through a symlink: the run file is
written to a fresh name (``O_EXCL``) and renamed into place, and read with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from gateway.config import Config
from gateway.errors import ConfigError

if TYPE_CHECKING:
    from gateway.app import GatewayApp

log = logging.getLogger("gateway")

_KEY = "gateway.run_dir"  # what a refusal names: where the operator picks another directory
_MAX_RUN_FILE = 4096  # a run file is a pid and a URL


def run_dir(config: Config, env: Mapping[str, str] = os.environ) -> Path:
    """The run directory for ``config`` (see the module's docstring for the order)."""
    if env.get("BOTMUX_RUN_DIR"):
        return Path(env["BOTMUX_RUN_DIR"])
    if config.gateway.run_dir:
        return Path(config.gateway.run_dir)
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "botmux"
    if not config.store.shared:
        return Path(config.store.path).resolve().parent / "botmux-run"
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "botmux"


def run_file_name(source: str) -> str:
    """The run file's name for the gateway started with config file ``source``."""
    where = str(Path(source).resolve()) if source != "(embedded defaults)" else os.getcwd()
    return f"{hashlib.sha256(where.encode()).hexdigest()[:16]}.json"


def run_file(config: Config, env: Mapping[str, str] = os.environ) -> Path:
    """The run file of the gateway started with ``config``."""
    return run_dir(config, env) / run_file_name(config.source)


def _refuse(path: Path, why: str) -> ConfigError:
    return ConfigError(
        _KEY,
        f"the run directory {path} {why}: botmux does not trust it (whoever controls it decides"
        " where botmux reload and check send the peer tokens); remove it, or name a directory"
        " of this user's with [gateway] run_dir or BOTMUX_RUN_DIR",
    )


def open_run_dir(path: Path, *, create: bool) -> int | None:
    """A descriptor of the run directory once it is known to be this user's alone; None when
    it does not exist (and ``create`` is false). Raises :class:`ConfigError` naming the path
    when it is a symlink, not a directory, another user's or writable by group or others."""
    if create:  # one found instead is checked below like any
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse(path, "is a symlink or not a directory") from exc
        raise
    st = os.fstat(fd)
    uid = os.getuid()
    why = ""
    if st.st_uid != uid:
        why = f"belongs to uid {st.st_uid}, not to this user (uid {uid})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):o}; 700 expected)"
    if why:
        os.close(fd)
        raise _refuse(path, why)
    return fd


def write_run_file(config: Config, port: int, env: Mapping[str, str] = os.environ) -> Path:
    """Write the run file: a fresh file (``O_EXCL``, never through a symlink) renamed over
    the old one, in the checked run directory."""
    where = run_dir(config, env)
    name = run_file_name(config.source)
    fd = open_run_dir(where, create=True)
    assert fd is not None  # created just now, or refused
    try:
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(tmp, flags, 0o600, dir_fd=fd)
        try:
            with os.fdopen(out, "w") as f:
                json.dump({"pid": os.getpid(), "url": local_url(config, port)}, f)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)
    return where / name


def remove_run_file(path: Path) -> None:
    """Remove the run file this process wrote (inside the directory checked again)."""
    try:
        fd = open_run_dir(path.parent, create=False)
    except (OSError, ConfigError):
        return  # the directory changed hands: nothing of ours to remove there
    if fd is None:
        return
    try:
        os.unlink(path.name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def local_url(config: Config, port: int | None = None) -> str:
    host = config.peer.host if config.peer.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.peer.port if port is None else port}"


def read_run_file(config: Config, env: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """The run file of the gateway running with ``config``; None without one, or when its
    process is gone (a kill -9 leaves the file: its port may be another's by now) or is not
    this user's. Raises :class:`ConfigError` when the run directory is not to be trusted."""
    fd = open_run_dir(run_dir(config, env), create=False)
    if fd is None:
        return None
    try:
        f = os.open(run_file_name(config.source), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:  # none, or a symlink planted in a directory we own: not ours either
        return None
    finally:
        os.close(fd)
    try:
        with os.fdopen(f, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            data = json.loads(file.read(_MAX_RUN_FILE))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return None
    pid = data.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # signal 0: only whether it exists, and is this user's
    except OSError:  # gone, or another user's process: not the gateway that wrote it
        return None
    return data


async def serve_with_run_file(app: GatewayApp) -> None:
    """Run the gateway; while it is ready, its run file says where it listens."""
    done = anyio.Event()

    async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await app.run(task_status=task_status)
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        await tg.start(run)
        assert app.peer is not None and app.peer.port is not None
        try:
            path: Path | None = write_run_file(app.config, app.peer.port)
        except (OSError, ConfigError) as exc:  # SIGHUP still reloads; the CLI tries listen
            path = None
            log.warning("no run file for botmux reload", extra={"error": str(exc)})
        try:
            await done.wait()
        finally:
            if path is not None:
                remove_run_file(path)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the running gateway said: the HTTP status and the reload result's JSON."""

    url: str
    status: int
    body: dict[str, Any]


async def ask_reload(
    config: Config, *, dry_run: bool = False, text: str | None = None, against: str | None = None
) -> Answer | None:
    """POST /api/admin/reload to the gateway running with this config file (or ``against``,
    a HOST:PORT); ``text``: a dry run of that TOML instead of the gateway's own file. None
    when no gateway answers."""
    import aiohttp

    urls: list[str] = []
    if against:
        urls.append(against if "://" in against else f"http://{against}")
    else:
        found = read_run_file(config)
        if found is not None:
            urls.append(found["url"])
        urls.append(local_url(config))
    # Only operator tokens (every session) may reload: the others are never sent anywhere.
    tokens: list[str | None] = [t.token for t in config.peer.tokens if "*" in t.sessions]
    tokens = tokens or [None]
    query = "?dry_run=1" if dry_run else ""
    body = {"config": text} if text is not None else {}
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for url in dict.fromkeys(urls):
            answer: Answer | None = None
            for token in tokens:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                try:
                    async with http.post(
                        f"{url}/api/admin/reload{query}", json=body, headers=headers
                    ) as r:
                        data = await r.json(content_type=None)
                        answer = Answer(url, r.status, data if isinstance(data, dict) else {})
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    break  # nobody (or no botmux) at this address
                if answer.status != 401:
                    return answer
            if answer is not None:
                return answer  # every token refused: say so
    return None
