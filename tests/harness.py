"""Running botmux for tests: its config text, in-process (fast) or as a real process (for
signals and crashes), and several nodes of a cluster.

Both use the real config loader, store, actors and peer server; only the outside world (the
model provider, the chat platforms) is replaced by loopback fakes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import anyio
import asyncpg

from gateway.app import GatewayApp
from gateway.assembly import ToolServers
from gateway.config import Config, parse_config
from gateway.events import Event
from gateway.scheduler import Clock

E = TypeVar("E")

if TYPE_CHECKING:
    from tests.fakes.telegram_server import FakeTelegram

ROOT = Path(__file__).resolve().parent.parent
#: ``[model]`` keys for quick retries, so a test of the failure policy takes milliseconds.
FAST = "backoff_base_s = 0.01\nbackoff_cap_s = 0.05\nmax_retries = 1\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_text(
    store: Path,
    model_url: str | None,
    *,
    listen: str = "127.0.0.1:0",
    model: str = "gpt-test",
    keys: tuple[str, ...] = ("sk-test-key-0001",),
    extra: str = "",
    model_extra: str = "",
    store_url: str = "",
) -> str:
    url = f'url = "{store_url}"\n' if store_url else ""
    text = f'[store]\npath = "{store}"\n{url}\n[peer]\nlisten = "{listen}"\n'
    if model_url is not None:
        keys_toml = ", ".join(f'"{k}"' for k in keys)
        text += (
            f'\n[model]\nbase_url = "{model_url}"\nmodel = "{model}"\napi_keys = [{keys_toml}]\n'
            f"timeout_s = 5\n{model_extra}"
        )
    return text + "\n" + extra


def make_config(store: Path, model_url: str | None, **kw: Any) -> Config:
    return parse_config(config_text(store, model_url, **kw), source="test", env={})


def telegram_section(tg: FakeTelegram, keys: str = "") -> str:
    """A ``[telegram]`` section that points botmux at the fake Telegram ``tg``; ``keys`` adds
    lines to it."""
    return f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\n' + keys


def fallback(url: str, model: str = "gpt-fallback", key: str = "sk-fallback-key-9") -> str:
    """A ``[[model.fallbacks]]`` entry (to put in ``model_extra``)."""
    return f'\n[[model.fallbacks]]\nbase_url = "{url}"\nmodel = "{model}"\napi_keys = ["{key}"]\n'


@asynccontextmanager
async def running_gateway(
    config: Config,
    *,
    clock: Callable[[], float] = time.monotonic,
    read: Callable[[], Config] | None = None,
    tools: ToolServers | None = None,
    schedule_clock: Clock | None = None,
    events: Events | None = None,
) -> AsyncIterator[tuple[GatewayApp, str]]:
    """Run a gateway in this event loop; yield it and its peer API's base URL. ``read``:
    what a reload reads (else the config it runs); ``tools``: the agent's tools instead of
    ``[[tools.mcp]]`` servers' (tests/fakes/toolbox.py); ``schedule_clock``: the scheduler's
    (tests/support/clocks.py); ``events``: records every event the gateway reports."""
    app = GatewayApp(
        config,
        clock=clock,
        read=read,
        tools=tools,
        schedule_clock=schedule_clock,
        tap=events.record if events is not None else None,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(app.run)
        assert app.peer is not None and app.peer.port is not None
        try:
            yield app, f"http://127.0.0.1:{app.peer.port}"
        finally:
            app.stop.set()


class Events:
    """Every event an in-process gateway reported, for tests to wait on what has no reply to
    wait for (a schedule's firing, a turn nobody waits for)."""

    def __init__(self) -> None:
        self.seen: list[Event] = []
        self._changed = anyio.Event()

    def record(self, event: Event) -> None:
        self.seen.append(event)
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.seen if isinstance(e, kind)]

    async def wait_for(self, kind: type[E], count: int = 1, **fields: object) -> list[E]:
        """At least ``count`` events of ``kind`` whose fields have these values."""

        def matching() -> list[E]:
            found = self.of(kind)
            return [e for e in found if all(getattr(e, k) == v for k, v in fields.items())]

        with anyio.fail_after(20):
            while len(matching()) < count:
                await self._changed.wait()
        return matching()


class GatewayProcess:
    """botmux as a real child process (``python -m gateway run``)."""

    def __init__(self, config_path: Path, port: int, log_path: Path) -> None:
        self.config_path = config_path
        self.port = port
        self.log_path = log_path
        self.proc: anyio.abc.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, env: dict[str, str] | None = None) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await anyio.open_process(
                [sys.executable, "-m", "gateway", "run", "--config", str(self.config_path)],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        with anyio.fail_after(20):
            await self.wait_ready()

    async def wait_ready(self) -> None:
        """Poll /readyz: across processes there is no event to wait on."""
        async with aiohttp.ClientSession() as http:
            while True:
                assert self.proc is not None
                if self.proc.returncode is not None:
                    raise AssertionError(f"botmux exited {self.proc.returncode}:\n{self.log()}")
                try:
                    async with http.get(f"{self.url}/readyz") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await anyio.sleep(0.05)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig``; nothing when the process has already ended (its exit code says why,
        see :meth:`wait`)."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        """The end of the log, for a failure message."""
        return "\n".join(self.log().splitlines()[-lines:])


def botmux_process(
    tmp_path: Path, model_url: str | None, *, db: Path | None = None, **kw: Any
) -> GatewayProcess:
    """botmux as a process (not started) on a free port: its config (:func:`config_text` with
    ``kw``) in ``tmp_path/botmux.toml``, its store ``db`` (``tmp_path/botmux.db``), its log
    ``tmp_path/botmux.log``."""
    port = free_port()
    config = tmp_path / "botmux.toml"
    store = db or tmp_path / "botmux.db"
    config.write_text(config_text(store, model_url, listen=f"127.0.0.1:{port}", **kw))
    return GatewayProcess(config, port, tmp_path / "botmux.log")


def children(parent: int, marker: str) -> list[int]:
    """The pids of ``parent``'s live child processes whose command line has ``marker``, as
    ``ps`` would show them (/proc, Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended meanwhile
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        zombie = fields.get("State", "").startswith("Z")
        if fields.get("PPid") == str(parent) and marker in command and not zombie:
            found.append(int(entry.name))
    return found


async def wait_for_child(parent: int, marker: str) -> int:
    """The first such child, once it runs: across processes there is no event to wait on."""
    while not (found := children(parent, marker)):  # noqa: ASYNC110
        await anyio.sleep(0.02)
    return found[0]


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


# -- several nodes on one PostgreSQL database --------------------------------------------------


def cluster_node(
    tmp_path: Path,
    postgres_url: str,
    model_url: str | None,
    name: str,
    *,
    lease_s: float,
    heartbeat_s: float,
    extra: str = "",
) -> GatewayProcess:
    """One botmux node of a cluster (not started): its config names the shared database and
    the node; ``extra`` adds sections (a platform's, ``[gateway]``)."""
    port = free_port()
    config = tmp_path / f"{name}.toml"
    cluster = f'[cluster]\nnode_id = "{name}"\nlease_s = {lease_s}\nheartbeat_s = {heartbeat_s}\n'
    config.write_text(
        config_text(
            tmp_path / "unused.db",
            model_url,
            listen=f"127.0.0.1:{port}",
            store_url=postgres_url,
            keys=(f"sk-test-node-{name}",),  # the fake model tells the nodes apart by key
            extra=extra + cluster,
        )
    )
    return GatewayProcess(config, port, tmp_path / f"{name}.log")


@asynccontextmanager
async def cluster_nodes(
    tmp_path: Path, postgres_url: str, model_url: str | None, *, lease_s: float, heartbeat_s: float
) -> AsyncIterator[Callable[[str, str], GatewayProcess]]:
    """``make(name, extra)``: nodes of one cluster (not started), as :func:`cluster_node`;
    those still running are killed at the end."""
    made: list[GatewayProcess] = []

    def make(name: str, extra: str) -> GatewayProcess:
        node = cluster_node(
            tmp_path,
            postgres_url,
            model_url,
            name,
            lease_s=lease_s,
            heartbeat_s=heartbeat_s,
            extra=extra,
        )
        made.append(node)
        return node

    try:
        yield make
    finally:
        for node in made:
            await node.kill()


async def start_all(nodes: list[GatewayProcess]) -> None:
    """Start several nodes at once (each until its /readyz answers)."""
    async with anyio.create_task_group() as group:
        for node in nodes:
            group.start_soon(node.start)


async def pg_fetch(url: str, sql: str) -> list[asyncpg.Record]:
    """The rows of one query, on a connection of its own (the test's view of the store)."""
    db = await asyncpg.connect(url)
    try:
        return list(await db.fetch(sql))
    finally:
        await db.close()
