"""How many idle sockets the gateway survives under a descriptor limit (review H3).

Starts the real gateway (no model) with ``RLIMIT_NOFILE`` set to ``--nofile`` (1024, systemd's
default soft limit), opens ``--sockets`` idle TCP connections that send nothing, and while they
are held sends valid requests on new connections. Prints how many the gateway kept open, how
many it refused with 503, whether the valid requests were served, its open descriptors, and
whether its log has an ERROR or a traceback.

    .venv/bin/python -m tests.bench.slow_clients --sockets 3000 --nofile 1024
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.harness import ROOT, config_text, free_port


async def _idle(
    port: int, held: list[asyncio.StreamWriter], refused: list[int], closed: list[int]
) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        refused.append(0)
        return
    held.append(writer)
    try:
        data = await asyncio.wait_for(reader.read(200), timeout=2.0)
    except TimeoutError:
        return  # held open by the gateway
    except OSError:
        data = b""
    if data.startswith(b"HTTP/1.1 503"):
        refused.append(1)
    elif not data:
        closed.append(1)  # closed to make room for a newer connection


async def run(
    sockets: int, nofile: int, header_timeout_s: float, root: Path = ROOT
) -> dict[str, object]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, sockets + 1024), hard))
    work = Path(tempfile.mkdtemp(prefix="botmux-slow-"))
    port = free_port()
    text = config_text(work / "b.db", None, listen=f"127.0.0.1:{port}")
    if header_timeout_s > 0:  # 0: leave the key out (a checkout from before it existed)
        text = text.replace(
            f'listen = "127.0.0.1:{port}"\n',
            f'listen = "127.0.0.1:{port}"\nheader_timeout_s = {header_timeout_s}\n',
        )
    (work / "botmux.toml").write_text(text + '\n[log]\nformat = "json"\n')
    log = (work / "botmux.log").open("wb")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "run",
        "--config",
        str(work / "botmux.toml"),
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=limit,
    )
    url = f"http://127.0.0.1:{port}"
    held: list[asyncio.StreamWriter] = []
    refused: list[int] = []
    closed: list[int] = []
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                try:
                    async with http.get(f"{url}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        started = time.monotonic()
        await asyncio.gather(*(_idle(port, held, refused, closed) for _ in range(sockets)))
        fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        served = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            for _ in range(5):
                try:
                    async with http.get(f"{url}/v1/models") as r:
                        served.append(r.status)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    served.append(type(exc).__name__)
        elapsed = time.monotonic() - started
    finally:
        for writer in held:
            writer.close()
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        log.close()
    lines = [json.loads(x) for x in (work / "botmux.log").read_text().splitlines() if x[:1] == "{"]
    return {
        "sockets_opened": sockets,
        "nofile": nofile,
        "refused_503": sum(refused),
        "connect_failed": len(refused) - sum(refused),
        "closed_for_newer": len(closed),
        "still_open_after_2s": sockets - len(refused) - len(closed),
        "gateway_fds_while_held": fds,
        "valid_requests_while_held": served,
        "seconds_held": round(elapsed, 1),
        "error_lines": sum(1 for x in lines if x["level"] in ("error", "critical")),
        "tracebacks": sum(1 for x in lines if "exc" in x),
        "log": str(work / "botmux.log"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sockets", type=int, default=3000)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--header-timeout", type=float, default=10.0)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run")
    args = parser.parse_args()
    result = asyncio.run(run(args.sockets, args.nofile, args.header_timeout, args.root))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
