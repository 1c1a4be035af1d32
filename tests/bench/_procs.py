"""Processes for benchmarks: the fake model, the real gateway, and their CPU and memory.

Every process is a real one on loopback; figures are read from /proc, so they count the whole
process (all its threads), as an operator's tools would.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int, *, threads: str = "all") -> float:
    """User + system CPU of a process (``threads="others"``: all but the main thread)."""
    tick = os.sysconf("SC_CLK_TCK")
    if threads == "all":
        paths = [Path(f"/proc/{pid}/stat")]
    else:
        paths = [p / "stat" for p in Path(f"/proc/{pid}/task").iterdir() if p.name != str(pid)]
    total = 0
    for path in paths:
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL server process on the machine."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if "(postgres)" in text:
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


async def wait_http(url: str, limit_s: float = 30.0) -> float:
    """Poll until ``url`` answers 200; return the seconds it took."""
    started = time.perf_counter()
    async with aiohttp.ClientSession() as http:
        while time.perf_counter() - started < limit_s:
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return time.perf_counter() - started
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.005)
    raise RuntimeError(f"{url} did not answer in {limit_s} s")


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    url: str
    started_at: float

    @property
    def pid(self) -> int:
        return self.popen.pid


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@asynccontextmanager
async def fake_model(latency_s: float = 0.0) -> AsyncIterator[Proc]:
    port = free_port()
    popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "tests.fakes.openai_server", str(port), str(latency_s)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
    )
    proc = Proc(popen, f"http://127.0.0.1:{port}/v1", time.perf_counter())
    try:
        await wait_http(f"{proc.url}/models")
        yield proc
    finally:
        popen.terminate()
        popen.wait()


def gateway_config(
    workdir: Path, model_url: str, port: int, gateway_keys: str = "", sections: str = ""
) -> Path:
    config = workdir / "botmux.toml"
    config.write_text(
        f'[store]\npath = "{workdir}/botmux.db"\n'
        f'[peer]\nlisten = "127.0.0.1:{port}"\n'
        f'[model]\nbase_url = "{model_url}"\nmodel = "bench"\napi_keys = ["sk-bench"]\n'
        f"timeout_s = 30\n"
        f"[gateway]\nmax_concurrent_turns = 1024\nmailbox_size = 256\n{gateway_keys}"
        f'[log]\nlevel = "warning"\n' + sections
    )
    return config


@asynccontextmanager
async def gateway(
    workdir: Path, model_url: str, gateway_keys: str = "", sections: str = ""
) -> AsyncIterator[Proc]:
    port = free_port()
    config = gateway_config(workdir, model_url, port, gateway_keys, sections)
    started = time.perf_counter()
    popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        cwd=ROOT,
        env=_env(),
        stderr=subprocess.DEVNULL,
    )
    proc = Proc(popen, f"http://127.0.0.1:{port}", started)
    try:
        await wait_http(f"{proc.url}/readyz")
        yield proc
    finally:
        popen.terminate()
        popen.wait()
