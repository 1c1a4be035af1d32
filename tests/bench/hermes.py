"""hermes-agent 0.19.0's API server, run side by side with botmux for benchmarks.

hermes-agent is the gateway users would pick instead of botmux. This module installs it in a
virtual environment of its own (its pinned dependencies must not meet botmux's), starts its
OpenAI-compatible API server against our loopback fake model, and stops it again::

    python = ensure_hermes_venv(Path("/tmp/hermes-venv"))
    async with run_hermes_api_server(python, model_url, "bench", "sk-bench", port, workdir) as h:
        ...  # POST {h.base_url}/v1/chat/completions with headers=h.headers; sample h.pid

Install. ``pip install hermes-agent==0.19.0 aiohttp==3.14.1``: the API server is an aiohttp
application (``gateway/platforms/api_server.py``), but hermes's base requirements leave aiohttp
out (its platform extras pin 3.14.1); without it the gateway logs "API Server: aiohttp not
installed" and never binds the port. About 35 s and 230 MB.

How it is started, as hermes documents it: ``hermes gateway run`` (the gateway in the
foreground) with ``API_SERVER_ENABLED``, ``API_SERVER_KEY``, ``API_SERVER_HOST`` and
``API_SERVER_PORT`` in ``$HERMES_HOME/.env`` and the rest in ``$HERMES_HOME/config.yaml``.
Everything lives under ``workdir``: ``HERMES_HOME`` is ``workdir/hermes-home`` and ``HOME`` is
``workdir/home`` (hermes also reads ``~``), and the process gets a fresh environment, so no
real home directory, credential or ``OPENAI_*`` variable is seen or touched. It stops on
SIGINT (hermes's "planned stop": clean exit in well under a second), SIGKILL if it lingers.

The API server refuses to start without an ``API_SERVER_KEY`` of 16+ characters, even on
loopback, so every request needs ``Authorization: Bearer <key>``: a random key is made per
run and offered as ``HermesServer.headers``.

What config.yaml sets, and why (we measure the gateway, not the agent's extras):

- ``model``: ``provider: custom`` with our ``base_url``, model and key, the documented way to
  use any OpenAI-compatible endpoint. ``context_length`` matters most: unset, every turn
  hermes works it out again, with about a dozen extra requests to the model server
  (``/v1/models``, ``/v1/models/{model}``, ``/api/show``, the server-type probes below, twice)
  and a look-up of openrouter.ai for its model catalogue (a DNS query, failing here). That
  nearly doubles hermes's CPU per turn: hermes's plain defaults give 2.2-2.5 turns/s with one
  client, 2.8-3.9 with 50, 0.40-0.50 CPU s/turn, 175 MiB peak.
- ``platform_toolsets.api_server: []``: no tools at all (the default is the full terminal,
  file, web, browser, memory, skills set), so the model is sent no tool schemas and no tool
  can reach the network; with tools, every 10th turn of a session adds a background
  "memory review" model call.
- ``security.tirith_enabled: false``: otherwise hermes downloads its command scanner from
  GitHub at start-up; ``allow_lazy_installs: false``: no pip installs at run time.
- ``gateway.api_server.max_concurrent_runs: 0``: by default the 11th concurrent request is
  answered 429 "Too many concurrent runs (max 10)"; botmux's suite config has no such cap.
- memory, the skill curator, the model catalogue fetch, session titles (an extra model call)
  and the embedded kanban dispatcher are off.

With that, a turn is one streamed chat completion (``stream: true``, ``max_tokens: 65536``, no
tools), counted by the demo below. One artefact stays: the fake model is on loopback, so
hermes takes it for a local server and, before each turn, asks ``/api/v1/models``,
``/api/tags``, ``/v1/props``, ``/props`` and ``/version`` whether it is LM Studio, Ollama,
llama.cpp or vLLM; the fake answers 404 and hermes only caches a positive answer, so those five
GETs come every turn (about 5-10 % of hermes's CPU per turn). A remote provider never sees
them, and no setting avoids them without changing the requests (``model.ollama_num_ctx`` adds
Ollama's ``options.num_ctx`` to every completion). strace shows no other connection than to
the fake model; hermes runs ``systemctl is-system-running`` at start-up and a one-off Python
toolchain probe (``python3 -c``, ``pip --version``) on the first turn; its cron scheduler and
housekeeping timers tick every 60 s.

Measured with the demo (2 cores, machine otherwise quiet): 3.5-4.6 turns/s with one client
(p50 210-290 ms), 6.1-6.7 turns/s with 50 at once, 0.21-0.31 CPU s/turn, 93 MiB after start-up
and 163-175 MiB peak. Hermes builds a new agent for every request, so each turn is CPU-bound in
hermes itself. The first turns after start-up take about 3 s (lazy imports): warm it up before
measuring.

Demo, as a benchmark (prints figures; hermes's CPU and peak RSS from /proc)::

    /work/venv/bin/python -m tests.bench.hermes [--single 20] [--concurrent 50] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

HERMES_VERSION = "0.19.0"
# The API server needs aiohttp, which hermes-agent pins (3.14.1) only in its platform extras.
REQUIREMENTS = (f"hermes-agent=={HERMES_VERSION}", "aiohttp==3.14.1")
ROOT = Path(__file__).resolve().parents[2]
_START_LIMIT_S = 120.0
_STOP_LIMIT_S = 15.0


def _installed_versions(python: Path) -> tuple[str, str] | None:
    probe = "import importlib.metadata as m\nprint(m.version('hermes-agent'), m.version('aiohttp'))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    match done.stdout.split():
        case [hermes_version, aiohttp_version]:
            return hermes_version, aiohttp_version
    return None


def ensure_hermes_venv(path: Path) -> Path:
    """Create ``path`` as a venv holding hermes-agent 0.19.0 (once); return its python."""
    python = path / "bin" / "python"
    wanted = tuple(r.split("==")[1] for r in REQUIREMENTS)
    if python.exists() and _installed_versions(python) == wanted:
        print(f"hermes-agent {HERMES_VERSION} already installed in {path}", flush=True)
        return python
    started = time.perf_counter()
    if not python.exists():
        print(f"creating a virtual environment in {path}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    print(f"pip install {' '.join(REQUIREMENTS)} (about 35 s, 230 MB)", flush=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *REQUIREMENTS]
    done = subprocess.run(pip, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip install failed ({done.returncode}):\n{done.stderr[-4000:]}")
    if _installed_versions(python) != wanted:
        raise RuntimeError(f"{path} does not hold {REQUIREMENTS} after pip install")
    print(f"hermes-agent {HERMES_VERSION} installed in {time.perf_counter() - started:.0f} s")
    return python


@dataclass(frozen=True)
class HermesServer:
    """A running hermes API server: where it listens, its key, and its process for /proc."""

    base_url: str
    pid: int
    api_key: str
    home: Path
    log: Path
    startup_s: float

    @property
    def headers(self) -> dict[str, str]:
        """What every request needs: hermes's API server has no unauthenticated mode."""
        return {"Authorization": f"Bearer {self.api_key}"}


def _config_yaml(model_base_url: str, model: str, api_key: str) -> str:
    q = json.dumps  # a JSON string is a valid YAML double-quoted scalar
    return f"""\
# Written by tests/bench/hermes.py: hermes-agent as a bare gateway in front of a fake model.
model:
  provider: custom              # any OpenAI-compatible endpoint
  base_url: {q(model_base_url)}
  default: {q(model)}
  api_key: {q(api_key)}
  context_length: 128000        # known, so no endpoint probe and no OpenRouter catalogue fetch
platform_toolsets:
  api_server: []                # no tools: no schemas sent, nothing reaching out
memory:
  memory_enabled: false
  user_profile_enabled: false
security:
  tirith_enabled: false         # else the scanner binary is downloaded at start-up
  allow_lazy_installs: false
model_catalog:
  enabled: false
curator:
  enabled: false
auxiliary:
  title_generation:
    enabled: false              # an extra model call per new session
kanban:
  dispatch_in_gateway: false
gateway:
  api_server:
    max_concurrent_runs: 0      # no cap (default 10: the 11th concurrent request gets a 429)
"""


def _env_file(api_key: str, port: int) -> str:
    return (
        "API_SERVER_ENABLED=true\n"
        f"API_SERVER_KEY={api_key}\n"
        "API_SERVER_HOST=127.0.0.1\n"
        f"API_SERVER_PORT={port}\n"
    )


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


async def _wait_healthy(url: str, proc: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.perf_counter() + _START_LIMIT_S
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while time.perf_counter() < deadline:
            if proc.returncode is not None:
                raise RuntimeError(f"hermes exited with {proc.returncode}:\n{_tail(log)}")
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"hermes did not answer {url} in {_START_LIMIT_S:.0f} s:\n{_tail(log)}")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.send_signal(signal.SIGINT)  # hermes's planned stop (Ctrl+C); SIGTERM counts as a crash
    try:
        await asyncio.wait_for(proc.wait(), _STOP_LIMIT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: hermes and its children
        await proc.wait()


@asynccontextmanager
async def run_hermes_api_server(
    python: Path, model_base_url: str, model: str, api_key: str, port: int, workdir: Path
) -> AsyncIterator[HermesServer]:
    """Run ``hermes gateway run`` with only its API server, on 127.0.0.1:``port``.

    ``model_base_url`` is the model's OpenAI-compatible base (``http://127.0.0.1:N/v1``),
    ``api_key`` the key hermes sends to it. ``workdir`` holds hermes's whole state (use a
    fresh one per run: sessions accumulate there). Yields once ``/health`` answers.
    """
    home = workdir / "hermes-home"
    user_home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    user_home.mkdir(parents=True, exist_ok=True)
    server_key = secrets.token_hex(24)
    (home / "config.yaml").write_text(_config_yaml(model_base_url, model, api_key))
    (home / ".env").write_text(_env_file(server_key, port))
    env = {
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(user_home),
        "HERMES_HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        # Starts are counted in HERMES_HOME; past 5 in 120 s hermes sleeps to break a
        # "respawn storm". Off: benchmarks restart it on purpose.
        "HERMES_GATEWAY_MAX_STARTS": "0",
    }
    log = workdir / "hermes-gateway.log"
    base_url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            str(python.parent / "hermes"),
            "gateway",
            "run",
            cwd=user_home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        await _wait_healthy(f"{base_url}/health", proc, log)
        yield HermesServer(
            base_url=base_url,
            pid=proc.pid,
            api_key=server_key,
            home=home,
            log=log,
            startup_s=time.perf_counter() - started,
        )
    finally:
        await _stop(proc)


# ---------------------------------------------------------------------------------------------
# /proc readings (the whole process, every thread)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


# ---------------------------------------------------------------------------------------------
# Demo: the fake model in its own process, hermes, and the load from this one.

# The repo's fake model (what ``python -m tests.fakes.openai_server PORT`` runs), which also
# tells, once its stdin closes, the last user text of every request it was sent: that is how
# model calls per turn are counted.
_FAKE_MODEL = """\
import asyncio, json, sys
from tests.fakes.openai_server import open_fake_model

async def main() -> None:
    async with open_fake_model(int(sys.argv[1])) as fake:
        print(fake.base_url, flush=True)
        await asyncio.to_thread(sys.stdin.read)
        print(json.dumps([r.last_user for r in fake.requests]), flush=True)

asyncio.run(main())
"""


def _sum_cpu(pids: tuple[int, ...]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Phase:
    name: str
    turns: int
    seconds: float
    latencies: list[float]
    cpu_s: float  # hermes's
    others_cpu_s: float  # every process but hermes, the fake model and this one: noise

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds

    @property
    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies)

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


async def _turn(
    http: aiohttp.ClientSession, server: HermesServer, text: str, session: str | None
) -> float:
    headers = dict(server.headers)
    if session is not None:
        headers["X-Hermes-Session-Id"] = session  # hermes keeps the history in its store
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
    started = time.perf_counter()
    async with http.post(f"{server.base_url}/v1/chat/completions", json=body, headers=headers) as r:
        data = await r.json()
    elapsed = time.perf_counter() - started
    answer = data.get("choices", [{}])[0].get("message", {}).get("content") if r.ok else None
    if answer != f"echo: {text}":
        raise RuntimeError(f"turn {text!r} failed: {r.status} {data}")
    return elapsed


async def _phase(
    http: aiohttp.ClientSession,
    server: HermesServer,
    name: str,
    clients: int,
    rounds: int,
    stateless: bool,
    ours: tuple[int, ...],
) -> Phase:
    latencies: list[float] = []

    async def client(c: int) -> None:
        session = None if stateless else f"{name}-{c}"
        for r in range(rounds):
            latencies.append(await _turn(http, server, f"{name}-{c}-{r}", session))

    busy0, cpu0, ours0 = machine_cpu_seconds(), cpu_seconds(server.pid), _sum_cpu(ours)
    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    seconds = time.perf_counter() - started
    others = machine_cpu_seconds() - busy0 - (_sum_cpu(ours) - ours0)
    return Phase(name, clients * rounds, seconds, latencies, cpu_seconds(server.pid) - cpu0, others)


async def _demo(args: argparse.Namespace) -> None:
    python = ensure_hermes_venv(args.venv)
    model_port, hermes_port = _free_port(), _free_port()
    fake = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _FAKE_MODEL,
        str(model_port),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert fake.stdin is not None and fake.stdout is not None
    calls: list[str] = []
    try:
        model_url = (await asyncio.wait_for(fake.stdout.readline(), 30)).decode().strip()
        if not model_url.startswith("http://"):
            raise RuntimeError("the fake model did not start")
        with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
            async with run_hermes_api_server(
                python, model_url, "bench", "sk-bench", hermes_port, Path(tmp)
            ) as server:
                print(
                    f"hermes API server up in {server.startup_s:.1f} s (pid {server.pid})",
                    flush=True,
                )
                idle = memory_mib(server.pid)["VmRSS"]
                limit = max(args.concurrent, 10)
                timeout = aiohttp.ClientTimeout(total=600)
                ours = (server.pid, fake.pid, os.getpid())
                async with aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=limit), timeout=timeout
                ) as http:
                    warm, *phases = [
                        await _phase(http, server, name, clients, rounds, args.stateless, ours)
                        for name, clients, rounds in [
                            ("warm", 2, 2),  # the first turns pay for lazy imports
                            ("one", 1, args.single),
                            ("many", args.concurrent, args.rounds),
                        ]
                    ]
                peak = memory_mib(server.pid)["VmHWM"]
    finally:
        fake.stdin.close()
        out = await asyncio.wait_for(fake.stdout.read(), 30)
        await fake.wait()
        lines = out.decode().strip().splitlines()
        calls = json.loads(lines[-1]) if lines else []
    mode = "stateless" if args.stateless else "one X-Hermes-Session-Id per client"
    print(f"\nhermes-agent {HERMES_VERSION} API server, instant fake model, {mode}")
    print(
        f"{'clients':>8} {'turns':>6} {'turns/s':>8} {'p50 ms':>8} {'p90 ms':>8} "
        f"{'CPU s/turn':>11} {'model calls/turn':>17} {'others CPU':>11}"
    )
    for p, clients in zip(phases, (1, args.concurrent), strict=True):
        made = sum(1 for text in calls if text.startswith(f"{p.name}-"))
        others = p.others_cpu_s / (p.seconds * (os.cpu_count() or 1))
        print(
            f"{clients:>8} {p.turns:>6} {p.turns_per_s:>8.2f} {p.p50_ms:>8.0f} "
            f"{p.p90_ms:>8.0f} {p.cpu_s / p.turns:>11.3f} {made / p.turns:>17.2f} {others:>11.0%}"
        )
    print(
        f"Not counted: {warm.turns} warm-up turns, up to {1000 * max(warm.latencies):.0f} ms each.\n"
        "Model calls: chat completions the fake model received (hermes also sends it 5 GETs a\n"
        "turn, probing for a local server type: see the module docstring). Others CPU: the\n"
        "machine's CPU used by other processes meanwhile; when high, the figures are noisy."
    )
    other = [text for text in calls if not text.startswith(("warm-", "one-", "many-"))]
    print(
        f"RSS after start-up {idle:.0f} MiB, peak (VmHWM) {peak:.0f} MiB; "
        f"model calls not made for a turn: {len(other)}"
    )
    for text in other[:3]:
        print(f"  e.g. a call whose last user message is {text[:100]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=Path("/tmp/hermes-venv"))
    parser.add_argument("--single", type=int, default=20, help="turns sent by one client")
    parser.add_argument("--concurrent", type=int, default=50, help="clients at once")
    parser.add_argument("--rounds", type=int, default=1, help="turns per concurrent client")
    parser.add_argument(
        "--stateless", action="store_true", help="no X-Hermes-Session-Id: a session per turn"
    )
    asyncio.run(_demo(parser.parse_args()))


if __name__ == "__main__":
    main()
