"""Talking to the running gateway from the command line: ``botmux reload`` and the reload
preview of ``botmux check`` (SPEC sections 7 and 13).

A running gateway writes a run file (its pid and the peer API's URL) named after the absolute
path of its config file, in ``$BOTMUX_RUN_DIR`` (default: ``botmux-UID`` in the temp dir), and
removes it when it stops. The command line finds the gateway that runs with a config file
there first, so a reload that changes ``[peer] listen`` still reaches the gateway (listening
where the old file said) and is refused naming that key; without a run file it tries the
address the file names. The request carries the file's first peer token that the gateway
takes (a reload that replaces every token at once: send SIGHUP to the pid instead).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from gateway.config import Config

if TYPE_CHECKING:
    from gateway.app import GatewayApp

log = logging.getLogger("gateway")


def run_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(env.get("BOTMUX_RUN_DIR") or Path(tempfile.gettempdir()) / f"botmux-{uid}")


def run_file(source: str) -> Path:
    """The run file of the gateway started with config file ``source``."""
    where = str(Path(source).resolve()) if source != "(embedded defaults)" else os.getcwd()
    return run_dir() / f"{hashlib.sha256(where.encode()).hexdigest()[:16]}.json"


def local_url(config: Config, port: int | None = None) -> str:
    host = config.peer.host if config.peer.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.peer.port if port is None else port}"


def write_run_file(config: Config, port: int) -> Path:
    path = run_file(config.source)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "url": local_url(config, port)}))
    tmp.replace(path)
    return path


def read_run_file(source: str) -> dict[str, Any] | None:
    """The run file of the gateway running with ``source``; None without one, or when its
    process is gone (a kill -9 leaves the file: its port may be another's by now)."""
    try:
        data = json.loads(run_file(source).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return None
    pid = data.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # signal 0: only whether it exists
    except ProcessLookupError:
        return None
    except (PermissionError, OSError):
        pass  # alive, someone else's user: still the gateway that wrote it
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
        except OSError as exc:  # SIGHUP still reloads; the CLI tries the file's listen
            path = None
            log.warning("no run file for botmux reload", extra={"error": str(exc)})
        try:
            await done.wait()
        finally:
            if path is not None:
                path.unlink(missing_ok=True)


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
        found = read_run_file(config.source)
        if found is not None:
            urls.append(found["url"])
        urls.append(local_url(config))
    tokens: list[str | None] = list(config.peer.token_values) or [None]
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
