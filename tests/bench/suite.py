"""botmux's benchmark suite: prints a table and writes JSON; never a pass/fail on time.

Every scenario runs the real gateway process, the loopback fake model in its own process, and
the load from this process. Figures are medians over ``--repeat`` runs with their spread.

    .venv/bin/python -m tests.bench.suite                  # every scenario
    .venv/bin/python -m tests.bench.suite throughput ceiling startup --repeat 5
    .venv/bin/python -m tests.bench.suite --json docs/benchmarks.json

Scenarios: versus (the bare openai client, the session route and /v1/chat/completions at 1 and
50 conversations, interleaved, with same-repetition ratios), throughput (1, 50, 500
conversations through the peer API), latency500 (the same
with a 500 ms model), ceiling (the same load straight from the openai client to the fake),
hermes (hermes-agent 0.19.0 side by side, see tests/bench/hermes.py), idle (10,000 idle
conversations: memory per live actor, and after eviction), store (the store's share of the
work, against raw aiosqlite), startup (process start to /readyz), telegram and discord
(inbound messages through the real libraries and the loopback platform fakes to a reply).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai

from tests.bench import _load, _procs, store_push

Result = dict[str, float]


def _summary(runs: list[Result]) -> dict[str, dict[str, float]]:
    return {
        key: {
            "median": statistics.median(r[key] for r in runs),
            "min": min(r[key] for r in runs),
            "max": max(r[key] for r in runs),
        }
        for key in runs[0]
    }


async def _through_gateway(
    conversations: int, messages: int, latency_s: float = 0.0, route: str = "peer"
) -> Result:
    async with _procs.fake_model(latency_s) as model:
        with tempfile.TemporaryDirectory() as tmp:
            async with _procs.gateway(Path(tmp), model.url) as gw:
                connector = aiohttp.TCPConnector(limit=max(conversations, 10))
                async with aiohttp.ClientSession(connector=connector) as http:
                    make = _load.peer_chat if route == "peer" else _load.completions
                    await _load.closed_loop(make(http, gw.url, "warm"), min(conversations, 50), 2)
                    cpu0 = _procs.cpu_seconds(gw.pid)
                    result = await _load.closed_loop(make(http, gw.url), conversations, messages)
                    cpu = _procs.cpu_seconds(gw.pid) - cpu0
                memory = _procs.memory_kib(gw.pid)
    return {
        "turns_per_s": result.turns_per_s,
        "p50_ms": result.p50_ms,
        "p90_ms": 1000 * result.pct(0.90),
        "p99_ms": 1000 * result.pct(0.99),
        "cpu_ms_per_turn": 1000 * cpu / result.turns,
        "peak_rss_mb": memory["VmHWM"] / 1024,
    }


async def _direct(conversations: int, messages: int, latency_s: float = 0.0) -> Result:
    async with _procs.fake_model(latency_s) as model:
        client = openai.AsyncOpenAI(base_url=model.url, api_key="sk-bench", max_retries=0)
        async with client:
            await _load.closed_loop(_load.direct(client), min(conversations, 50), 2)
            cpu0 = time.process_time()
            result = await _load.closed_loop(_load.direct(client), conversations, messages)
            cpu = time.process_time() - cpu0
    return {
        "turns_per_s": result.turns_per_s,
        "p50_ms": result.p50_ms,
        "p90_ms": 1000 * result.pct(0.90),
        "p99_ms": 1000 * result.pct(0.99),
        "client_cpu_ms_per_call": 1000 * cpu / result.turns,
    }


def _sizes(quick: bool) -> list[tuple[int, int]]:
    # (conversations, messages each): enough turns per run for stable figures.
    if quick:
        return [(1, 50), (50, 10), (500, 2)]
    return [(1, 200), (50, 20), (500, 4)]


async def scenario_throughput(repeat: int, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conversations, messages in _sizes(quick):
        runs = [await _through_gateway(conversations, messages) for _ in range(repeat)]
        out[f"{conversations}"] = _summary(runs)
    return out


async def scenario_latency500(repeat: int, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conversations, messages in (
        [(1, 5), (50, 4), (500, 2)] if quick else [(1, 10), (50, 6), (500, 3)]
    ):
        runs = [await _through_gateway(conversations, messages, 0.5) for _ in range(repeat)]
        direct = [await _direct(conversations, messages, 0.5) for _ in range(repeat)]
        out[f"{conversations}"] = {"botmux": _summary(runs), "direct": _summary(direct)}
    return out


async def scenario_ceiling(repeat: int, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conversations, messages in _sizes(quick):
        runs = [await _direct(conversations, messages) for _ in range(repeat)]
        out[f"{conversations}"] = _summary(runs)
    return out


async def scenario_hermes(repeat: int, quick: bool) -> dict[str, Any]:
    from tests.bench import hermes

    python = hermes.ensure_hermes_venv(Path("/tmp/hermes-venv"))
    out: dict[str, Any] = {}
    for conversations, messages in [(1, 10), (50, 2)] if quick else [(1, 20), (50, 4)]:
        hermes_runs, botmux_runs = [], []
        for _ in range(repeat):
            async with _procs.fake_model() as model:
                with tempfile.TemporaryDirectory() as tmp:
                    port = _procs.free_port()
                    async with hermes.run_hermes_api_server(
                        python, model.url, "bench", "sk-bench", port, Path(tmp)
                    ) as server:
                        async with aiohttp.ClientSession(headers=server.headers) as http:
                            send = _load.completions(http, server.base_url)
                            # Warm up as botmux is warmed up: hermes's first turn is slow.
                            await _load.closed_loop(
                                _load.completions(http, server.base_url, "warm"), 4, 1
                            )
                            cpu0 = _procs.cpu_seconds(server.pid)
                            result = await _load.closed_loop(send, conversations, messages)
                            cpu = _procs.cpu_seconds(server.pid) - cpu0
                        rss = _procs.memory_kib(server.pid)["VmHWM"] / 1024
            hermes_runs.append(
                {
                    "turns_per_s": result.turns_per_s,
                    "p50_ms": result.p50_ms,
                    "cpu_ms_per_turn": 1000 * cpu / result.turns,
                    "peak_rss_mb": rss,
                }
            )
            botmux_runs.append(
                await _through_gateway(conversations, max(messages, 10), route="completions")
            )
        h, b = _summary(hermes_runs), _summary(botmux_runs)
        out[f"{conversations}"] = {
            "hermes": h,
            "botmux": b,
            "ratio_turns_per_s": b["turns_per_s"]["median"] / h["turns_per_s"]["median"],
        }
    return out


async def scenario_idle(repeat: int, quick: bool) -> dict[str, Any]:
    """Conversations that each sent one message, then went idle: memory per live actor.

    ``idle_evict_s`` is long enough that no actor is evicted while the load runs; afterwards
    the figures are taken again once the router has evicted them all.
    """
    count = 2000 if quick else 10_000
    evict_s = 20 if quick else 90
    runs = []
    for _ in range(repeat):
        async with _procs.fake_model() as model:
            with tempfile.TemporaryDirectory() as tmp:
                keys = f"idle_evict_s = {evict_s}\n"
                async with _procs.gateway(Path(tmp), model.url, keys) as gw:
                    connector = aiohttp.TCPConnector(limit=100)
                    async with aiohttp.ClientSession(connector=connector) as http:
                        # Warm up (imports, pools, caches), and let those actors go first.
                        await _load.closed_loop(_load.peer_chat(http, gw.url, "warm"), 100, 1)
                        await _until_no_live_actors(http, gw.url, evict_s * 2)
                        before = _procs.memory_kib(gw.pid)["VmRSS"]
                        started = time.perf_counter()
                        await _load.closed_loop(_load.peer_chat(http, gw.url, "idle"), count, 1)
                        load_s = time.perf_counter() - started
                        live = _live_sessions(await _metrics(http, gw.url))
                        loaded = _procs.memory_kib(gw.pid)["VmRSS"]
                        await _until_no_live_actors(http, gw.url, evict_s * 2)
                        after = _procs.memory_kib(gw.pid)["VmRSS"]
        runs.append(
            {
                "conversations": float(count),
                "live_actors": live,
                "load_seconds": load_s,
                "rss_before_mb": before / 1024,
                "rss_loaded_mb": loaded / 1024,
                "kib_per_live_conversation": (loaded - before) / max(1.0, live),
                "rss_after_eviction_mb": after / 1024,
            }
        )
    return _summary(runs)


async def _until_no_live_actors(http: aiohttp.ClientSession, url: str, limit_s: float) -> None:
    deadline = time.perf_counter() + limit_s
    while _live_sessions(await _metrics(http, url)) > 0:
        if time.perf_counter() > deadline:
            raise RuntimeError("idle actors were not evicted in time")
        await asyncio.sleep(1)


async def _metrics(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(f"{url}/metrics") as r:
        return await r.text()


def _live_sessions(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("botmux_live_sessions "):
            return float(line.split()[1])
    return 0.0


async def scenario_store(repeat: int, quick: bool) -> dict[str, Any]:
    """The store's threads' CPU under the 50-conversation load, and raw aiosqlite's limit."""
    runs = []
    for _ in range(repeat):
        async with _procs.fake_model() as model:
            with tempfile.TemporaryDirectory() as tmp:
                async with _procs.gateway(Path(tmp), model.url) as gw:
                    async with aiohttp.ClientSession() as http:
                        send = _load.peer_chat(http, gw.url)
                        await _load.closed_loop(send, 50, 2)
                        store0 = _procs.cpu_seconds(gw.pid, threads="others")
                        started = time.perf_counter()
                        result = await _load.closed_loop(send, 50, 10 if quick else 20)
                        wall = time.perf_counter() - started
                        store_cpu = _procs.cpu_seconds(gw.pid, threads="others") - store0
        # Each turn writes 2 message rows, 1 outbox row, and 3 row updates.
        rows = result.turns * 3
        raw = await store_push.raw(Path(tempfile.mkdtemp()) / "raw.db", 50_000, index=False)
        runs.append(
            {
                "turns_per_s": result.turns_per_s,
                "store_rows_per_s": rows / wall,
                "raw_aiosqlite_rows_per_s": raw,
                "ratio_of_raw": (rows / wall) / raw,
                "store_threads_core_share": store_cpu / wall,
            }
        )
    return _summary(runs)


async def scenario_startup(repeat: int, quick: bool) -> dict[str, Any]:
    """Ready time and idle RSS with the bench config (a model), and the idle RSS of the
    embedded defaults (no model: openai is not loaded), on a free port."""
    runs = []
    for _ in range(max(repeat, 3)):
        async with _procs.fake_model() as model:
            with tempfile.TemporaryDirectory() as tmp:
                async with _procs.gateway(Path(tmp), model.url) as gw:
                    runs.append(
                        {
                            "seconds_to_ready": time.perf_counter() - gw.started_at,
                            "idle_rss_mb": _procs.memory_kib(gw.pid)["VmRSS"] / 1024,
                        }
                    )
        runs[-1]["idle_rss_no_model_mb"] = await _idle_rss_without_model()
    return _summary(runs)


async def _idle_rss_without_model() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        port = _procs.free_port()
        config = Path(tmp) / "botmux.toml"
        config.write_text(
            f'[store]\npath = "{tmp}/botmux.db"\n[peer]\nlisten = "127.0.0.1:{port}"\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        env["PYTHONPATH"] = str(_procs.ROOT)
        popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
            [sys.executable, "-m", "gateway", "run", "--config", str(config)],
            cwd=tmp,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        try:
            await _procs.wait_http(f"http://127.0.0.1:{port}/readyz")
            return _procs.memory_kib(popen.pid)["VmRSS"] / 1024
        finally:
            popen.terminate()
            popen.wait()


async def scenario_telegram(repeat: int, quick: bool) -> dict[str, Any]:
    from tests.bench.platforms import telegram_updates_per_s

    return _summary([await telegram_updates_per_s(4 if quick else 10) for _ in range(repeat)])


async def scenario_slack(repeat: int, quick: bool) -> dict[str, Any]:
    from tests.bench.platforms import slack_messages_per_s

    return _summary([await slack_messages_per_s(4 if quick else 10) for _ in range(repeat)])


async def scenario_discord(repeat: int, quick: bool) -> dict[str, Any]:
    from tests.bench.platforms import discord_messages_per_s

    return _summary([await discord_messages_per_s(4 if quick else 10) for _ in range(repeat)])


async def scenario_versus(repeat: int, quick: bool) -> dict[str, Any]:
    """The bare client and both peer routes, interleaved in each repetition: ratios are taken
    within a repetition (the machine's drift over minutes cancels out), then summarised."""
    sizes = [(1, 50), (50, 10)] if quick else [(1, 200), (50, 20)]
    out: dict[str, Any] = {}
    for conversations, messages in sizes:
        runs: dict[str, list[Result]] = {"direct": [], "session": [], "v1": []}
        ratios: list[Result] = []
        for _ in range(repeat):
            direct = await _direct(conversations, messages)
            session = await _through_gateway(conversations, messages)
            v1 = await _through_gateway(conversations, messages, route="v1")
            runs["direct"].append(direct)
            runs["session"].append(session)
            runs["v1"].append(v1)
            ratios.append(
                {
                    "session_over_direct": session["turns_per_s"] / direct["turns_per_s"],
                    "v1_over_direct": v1["turns_per_s"] / direct["turns_per_s"],
                    "session_added_p50_ms": session["p50_ms"] - direct["p50_ms"],
                    "v1_added_p50_ms": v1["p50_ms"] - direct["p50_ms"],
                }
            )
        out[f"{conversations}"] = {k: _summary(v) for k, v in runs.items()}
        out[f"{conversations}"]["same_run"] = _summary(ratios)
    return out


SCENARIOS: dict[str, Callable[[int, bool], Awaitable[dict[str, Any]]]] = {
    "versus": scenario_versus,
    "throughput": scenario_throughput,
    "ceiling": scenario_ceiling,
    "latency500": scenario_latency500,
    "store": scenario_store,
    "startup": scenario_startup,
    "idle": scenario_idle,
    "hermes": scenario_hermes,
    "telegram": scenario_telegram,
    "discord": scenario_discord,
    "slack": scenario_slack,
}


def _print(name: str, data: Any, indent: str = "") -> None:
    if isinstance(data, dict) and "median" in data:
        print(
            f"{indent}{name:<28} {data['median']:10.2f}   [{data['min']:.2f} .. {data['max']:.2f}]"
        )
        return
    if isinstance(data, dict):
        print(f"{indent}{name}")
        for key, value in data.items():
            _print(key, value, indent + "  ")
        return
    print(f"{indent}{name:<28} {data:10.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer turns per run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "repeat": args.repeat,
    }
    for name in args.scenarios:
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        results[name] = await SCENARIOS[name](args.repeat, args.quick)
        _print(name, results[name])
        print(f"   ({time.perf_counter() - started:.0f} s)", flush=True)
    if "throughput" in results and "ceiling" in results:
        ratio = {
            n: results["throughput"][n]["turns_per_s"]["median"]
            / results["ceiling"][n]["turns_per_s"]["median"]
            for n in results["throughput"]
        }
        added = (
            results["throughput"]["1"]["p50_ms"]["median"]
            - results["ceiling"]["1"]["p50_ms"]["median"]
        )
        results["ratios"] = {"throughput_over_ceiling": ratio, "added_p50_ms_one_client": added}
        _print("ratios", results["ratios"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
