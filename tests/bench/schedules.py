"""Scheduler benchmark (issue 35): 10,000 schedules in the store; what the loop costs while it
waits, what they cost in memory, and how late a firing is (due time to admission committed).

Not a test: it prints figures. The scheduler (``gateway.scheduler.Scheduler``, the real loop
on the system clock) runs in this process on a real SQLite store (or PostgreSQL with
``--postgres URL``); its firings are the real ``FireSchedule`` admissions, without the turns
that would follow (this measures the scheduler, not the model).

    .venv/bin/python -m tests.bench.schedules [--schedules 10000] [--idle-s 30] [--spread-s 20]

idle: the schedules are cron (daily, at minutes spread over the day, UTC and Europe/Berlin) and
``every`` (6 h to 2 d), none due within the window; the process's CPU over ``--idle-s`` s
of the loop sleeping, and its wakes. memory: RSS before the schedules are read and after,
and (``--heap``) the Python heap they hold (tracemalloc). lateness: as many ``at`` schedules, due spread
evenly over ``--spread-s`` s (``--schedules`` firings, ~500/s by default), then a burst of
1,000 due at the same second: p50, p99 and max of (admission committed - due time).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import anyio

from gateway.config_schedules import SchedulerConfig
from gateway.messages import Schedule
from gateway.scheduler import Scheduler
from gateway.store import Store, open_sqlite_store
from gateway.store.schedules import AddSchedule, Fired, FireSchedule


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def idle_schedules(n: int, now: float) -> list[Schedule]:
    out = []
    for i in range(n):
        if i % 2:
            minute = (i // 2) % 1440
            # Not within the next hour: the idle window sees no due time.
            hour = (datetime.fromtimestamp(now, UTC).hour + 2 + minute // 60 % 20) % 24
            spec, kind = f"{minute % 60} {hour} * * *", "cron"
            tz = "Europe/Berlin" if i % 4 == 1 else "UTC"
        else:
            spec, kind, tz = f"{6 + i % 43}h", "every", "UTC"
        out.append(_schedule(f"idle{i}", kind, spec, tz, now))
    return out


def _schedule(sid: str, kind: str, spec: str, tz: str, now: float) -> Schedule:
    return Schedule(
        id=sid,
        conversation=f"peer:bench-{sid}",
        kind=kind,
        spec=spec,
        timezone=tz,
        action="text",
        body="bench",
        first_seen=now,
    )


def at(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def add_all(store: Store, schedules: list[Schedule], now: float) -> None:
    async with anyio.create_task_group() as tg:
        for chunk in range(0, len(schedules), 500):

            async def add(part: list[Schedule]) -> None:
                for s in part:
                    await store.submit(AddSchedule(s, 10**9, 10**9, now))

            tg.start_soon(add, schedules[chunk : chunk + 500])


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_sqlite_store(str(Path(tmp) / "bench.db")) as store:
            now = time.time()
            await add_all(store, idle_schedules(args.schedules, now), now)
            late: list[float] = []
            waiting = {"count": 0, "done": anyio.Event()}

            async def fire(write: FireSchedule) -> Fired:
                fired = await store.submit(write)
                late.append(time.time() - write.due)
                if len(late) == waiting["count"]:
                    waiting["done"].set()  # type: ignore[attr-defined]
                return fired

            async def firings(count: int) -> None:
                waiting["count"], waiting["done"] = count, anyio.Event()
                if len(late) < count:
                    await waiting["done"].wait()  # type: ignore[attr-defined]

            scheduler = Scheduler(
                store,
                settings=SchedulerConfig,
                config_schedules=tuple,
                platforms=lambda: {"peer"},
            )
            gc.collect()
            rss0 = rss_mib()
            if args.heap:  # its own bookkeeping inflates RSS and slows the first read
                tracemalloc.start()
            heap0 = tracemalloc.get_traced_memory()[0]
            async with anyio.create_task_group() as tg:
                started = time.perf_counter()
                await tg.start(scheduler.run, fire)
                load_s = time.perf_counter() - started
                heap = tracemalloc.get_traced_memory()[0] - heap0
                tracemalloc.stop()
                gc.collect()
                rss1 = rss_mib()
                cpu0, wall0 = time.process_time(), time.perf_counter()
                await anyio.sleep(args.idle_s)
                idle_cpu = time.process_time() - cpu0
                idle_wall = time.perf_counter() - wall0
                stats = scheduler.statistics()
                print(f"schedules:           {stats.schedules}")
                print(f"first read + plan:   {load_s * 1000:.0f} ms")
                print(f"RSS:                 {rss0:.1f} -> {rss1:.1f} MiB (+{rss1 - rss0:.1f})")
                if args.heap:
                    print(f"heap they hold:      {heap / 2**20:.1f} MiB (tracemalloc)")
                print(
                    f"idle CPU:            {idle_cpu * 1000:.1f} ms over {idle_wall:.0f} s"
                    f" ({100 * idle_cpu / idle_wall:.3f} %), wakes {stats.wakes},"
                    f" loads {stats.loads}, fired {stats.fired}"
                )

                # Lateness: spread over the window, then a burst at one second.
                start = time.time() + 2
                due = [start + args.spread_s * i / args.schedules for i in range(args.schedules)]
                spread = [
                    _schedule(f"at{i}", "at", at(d), "UTC", time.time()) for i, d in enumerate(due)
                ]
                burst_at = int(start + args.spread_s + 3)
                burst = [
                    _schedule(f"burst{i}", "at", at(burst_at), "UTC", time.time())
                    for i in range(1000)
                ]
                await add_all(store, spread + burst, time.time())
                scheduler.wake()
                cpu0 = time.process_time()
                with anyio.fail_after(args.spread_s + 120):
                    await firings(len(spread))
                    spread_late, late[:] = list(late), []
                    await firings(len(burst))
                busy_cpu = time.process_time() - cpu0
                tg.cancel_scope.cancel()
    # ``at`` times are whole seconds: a due time is up to 1 s before the even spread's.
    for name, values in (("spread", spread_late), ("burst (1,000 at once)", late)):
        q = statistics.quantiles(values, n=100)
        print(
            f"lateness {name}: p50 {q[49] * 1000:.0f} ms, p99 {q[98] * 1000:.0f} ms,"
            f" max {max(values) * 1000:.0f} ms ({len(values)} firings)"
        )
    print(f"CPU while firing:    {busy_cpu:.2f} s for {len(spread_late) + len(late)} firings")
    print(f"python {os.sys.version.split()[0]}, SQLite store")  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--spread-s", type=float, default=20.0)
    parser.add_argument("--heap", action="store_true", help="also the Python heap (tracemalloc)")
    anyio.run(bench, parser.parse_args())


if __name__ == "__main__":
    main()
