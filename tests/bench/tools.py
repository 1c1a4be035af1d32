"""What a tool step costs the gateway (issue 34), and what configured tools cost turns that do
not use them. Not a test: it prints figures.

The gateway is a real process (``python -m gateway run``) on SQLite or on a throwaway
PostgreSQL (fsync on, this machine); the model is the loopback fake in this process, answering
at once; the tool is the test MCP server's ``echo`` over stdio (read-only: no approval), a
child of the gateway. Turns go through the peer API one after another (one conversation at a
time, ``--turns`` conversations of one turn each, so no history grows); the gateway's CPU is
read from /proc, and PostgreSQL's (every ``postgres`` process) the same way.

steps: one gateway with ``local__echo`` offered to every conversation; batches of plain turns
(the model answers at once, with the tool offered) and of turns of ``--steps`` tool steps (the
model asks for one ``echo`` call per step, then answers), alternated ``--repeat`` times. Per
tool step: (turn with steps - plain turn) / steps, for the turn's wall time and the
gateway's CPU. A step is one more model call, the step stored, the call stored ``started`` and
``finished`` (three commits), and the MCP call.

unused: plain turns on a gateway without ``[[tools.mcp]]`` and on one with the server
configured (and up) but no tool offered to the conversation (``[agent] tools`` empty, the
default), alternated ``--repeat`` times, a fresh gateway each time.

    .venv/bin/python -m tests.bench.tools [--turns 300] [--steps 4] [--repeat 5]
    .venv/bin/python -m tests.bench.tools --store sqlite     # or postgres; default both
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from tests import pgserver
from tests.bench import _procs
from tests.bench._figures import spread
from tests.fakes.mcp_server import stdio_command
from tests.fakes.openai_server import FakeModel, Outcome, Request, calls, ok, open_fake_model


def _server(offered: bool) -> str:
    command, args = stdio_command()
    quoted = ", ".join(f'"{a}"' for a in args)
    agent = '[agent]\ntools = ["local__echo"]\n' if offered else ""
    return (
        f'{agent}[[tools.mcp]]\nname = "local"\ncommand = "{command}"\nargs = [{quoted}]\n'
        f'cwd = "{_procs.ROOT}"\napproval = "never"\n'
    )


def _answer(request: Request) -> Outcome:
    """``steps N: ...`` asks for N steps of one ``echo`` call, then the answer; else at once."""
    wanted = (
        int(request.last_user.split(":")[0][6:]) if request.last_user.startswith("steps") else 0
    )
    last_user = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
    results = [m for m in request.messages[last_user:] if m.get("role") == "tool"]
    done = len(results)
    if results and results[-1].get("content") != f"step {done - 1}":  # the tool did not run
        return ok(f"the tool failed: {results[-1].get('content')}")
    if done < wanted:
        return calls(("local__echo", {"text": f"step {done}"}), ids=f"s{done}")
    return ok("done")


@asynccontextmanager
async def _gateway(
    workdir: Path, model_url: str, store: str, sections: str
) -> AsyncIterator[_procs.Proc]:
    """A gateway process on ``store`` ("sqlite" or a PostgreSQL URL), once its tool server is
    up (read from /readyz's ``tools``)."""
    port = _procs.free_port()
    config = _procs.gateway_config(workdir, model_url, port, sections=sections)
    if store != "sqlite":
        text = config.read_text().replace("[store]\n", f'[store]\nurl = "{store}"\n', 1)
        config.write_text(text)
    popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        cwd=_procs.ROOT,
        env={**os.environ, "PYTHONPATH": str(_procs.ROOT)},
        stderr=subprocess.DEVNULL,
    )
    proc = _procs.Proc(popen, f"http://127.0.0.1:{port}", time.perf_counter())
    try:
        await _procs.wait_http(f"{proc.url}/readyz")
        async with aiohttp.ClientSession() as http:
            for _ in range(3000):
                async with http.get(f"{proc.url}/readyz") as r:
                    tools = (await r.json())["tools"]
                if all(t["state"] == "up" for t in tools):
                    break
                await asyncio.sleep(0.01)
            else:
                raise RuntimeError(f"the tool server did not come up: {tools}")
        yield proc
    finally:
        popen.terminate()
        popen.wait()


async def _batch(
    http: aiohttp.ClientSession, gw: _procs.Proc, prefix: str, turns: int, text: str
) -> tuple[float, float, float]:
    """``turns`` turns one after another: the median wall time, the gateway's CPU and
    PostgreSQL's, per turn (seconds)."""
    walls = []
    cpu0, pg0 = _procs.cpu_seconds(gw.pid), _procs.postgres_cpu()
    for i in range(turns):
        started = time.perf_counter()
        async with http.post(
            f"{gw.url}/api/sessions/{prefix}{i}/chat", json={"message": text}
        ) as r:
            body = await r.json()
        if r.status != 200 or body["message"]["content"] != "done":
            raise RuntimeError(f"turn failed: {r.status} {body}")
        walls.append(time.perf_counter() - started)
    cpu = (_procs.cpu_seconds(gw.pid) - cpu0) / turns
    return statistics.median(walls), cpu, (_procs.postgres_cpu() - pg0) / turns


async def steps(model: FakeModel, store: str, args: argparse.Namespace) -> None:
    n = args.steps
    plain: list[tuple[float, float, float]] = []
    stepped: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            _gateway(Path(tmp), model.base_url, store, _server(offered=True)) as gw,
            aiohttp.ClientSession() as http,
        ):
            run = os.urandom(3).hex()  # conversations of their own on a reused database
            await _batch(http, gw, f"warm{run}-", 20, f"steps {n}: warm up")
            for r in range(args.repeat):
                plain.append(await _batch(http, gw, f"p{run}{r}-", args.turns, "hello"))
                stepped.append(await _batch(http, gw, f"s{run}{r}-", args.turns, f"steps {n}: go"))
    ms = 1000.0
    per_step = [
        ((s[0] - p[0]) / n * ms, (s[1] - p[1]) / n * ms, (s[2] - p[2]) / n * ms)
        for p, s in zip(plain, stepped, strict=True)
    ]
    print(
        f"{_label(store)}: {args.turns} turns a batch, {args.repeat} batches each, median [range]"
    )
    for name, runs in (("plain turn", plain), (f"turn of {n} tool steps", stepped)):
        print(
            f"  {name:<22} wall {spread([x[0] * ms for x in runs], width=6)} ms"
            f"  gateway CPU {spread([x[1] * ms for x in runs], width=6)} ms"
            + (
                f"  postgres CPU {spread([x[2] * ms for x in runs])} ms"
                if store != "sqlite"
                else ""
            )
        )
    print(
        f"  {'per tool step':<22} wall {spread([x[0] for x in per_step], width=6)} ms"
        f"  gateway CPU {spread([x[1] for x in per_step], width=6)} ms"
        + (f"  postgres CPU {spread([x[2] for x in per_step])} ms" if store != "sqlite" else ""),
        flush=True,
    )


async def unused(model: FakeModel, store: str, args: argparse.Namespace) -> None:
    runs: dict[str, list[tuple[float, float, float]]] = {"no tools": [], "tools not offered": []}
    for _ in range(args.repeat):
        for name, sections in (("no tools", ""), ("tools not offered", _server(offered=False))):
            with tempfile.TemporaryDirectory() as tmp:
                async with (
                    _gateway(Path(tmp), model.base_url, store, sections) as gw,
                    aiohttp.ClientSession() as http,
                ):
                    run = os.urandom(3).hex()
                    await _batch(http, gw, f"warm{run}-", 20, "warm up")
                    runs[name].append(await _batch(http, gw, f"u{run}-", args.turns, "hello"))
    print(f"{_label(store)}: plain turns, a fresh gateway each batch, median [range]")
    for name, found in runs.items():
        print(
            f"  {name:<22} wall {spread([x[0] * 1000 for x in found], width=6)} ms"
            f"  gateway CPU {spread([x[1] * 1000 for x in found], width=6)} ms",
            flush=True,
        )


def _label(store: str) -> str:
    return "SQLite" if store == "sqlite" else "PostgreSQL"


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--only", choices=("steps", "unused"))
    args = parser.parse_args()
    stores = ["sqlite"] if args.store == "sqlite" else []
    base = None
    if args.store in ("postgres", "both"):
        base = Path(tempfile.mkdtemp(prefix="botmux-bench-pg-"))
        stores.append(pgserver.start(base, durable=True))
        if args.store == "both":
            stores.insert(0, "sqlite")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
    try:
        async with open_fake_model() as model:
            model.default = _answer
            for store in stores:
                if args.only != "unused":
                    await steps(model, store, args)
                if args.only != "steps":
                    await unused(model, store, args)
                model.requests.clear()  # it keeps every request
    finally:
        if base is not None:
            pgserver.stop(base)


if __name__ == "__main__":
    asyncio.run(main())
