"""A crowd of idle conversations: what each costs while it stays live (issue 20, memory).

Two measures, both printed:

* ``gateway``: the real ``botmux run`` (the bench config of ``tests/bench/_procs.py``, with
  ``idle_evict_s`` long enough that nothing is evicted during the run); ``--conversations``
  conversations (100,000 by default) each send one message through the peer API
  (``POST /api/sessions/{id}/chat``, many at once over keep-alive connections), then the
  gateway's RSS (``/proc``) is read: in total, and per live conversation over the RSS after a
  warm-up. Slow: 100,000 turns take minutes on a small machine; the time is printed.
* ``python``: in this process, ``--actors`` real session actors on a real router and SQLite
  store (a stand-in model and platform that answer at once), one turn each, then idle;
  tracemalloc's difference over them is the Python-level bytes of one idle actor (its object,
  queue, cached history, the router's map entry, and whatever else stays per conversation).

``python -m tests.bench.crowd [--conversations N] [--actors N] [--only gateway|python]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from gateway.messages import AttachmentRef, ChatMessage, Inbound, StoredMessage, TurnOutcome
from gateway.messages import TurnResult as Result
from gateway.ports import Watch
from gateway.router import Router
from gateway.session import SessionActor, SessionDeps
from gateway.store import AdmitRow, open_sqlite_store
from tests.bench import _procs


async def gateway_crowd(conversations: int, clients: int = 64) -> dict[str, float]:
    async with _procs.fake_model() as model:
        with tempfile.TemporaryDirectory() as tmp:
            keys = "idle_evict_s = 36000\n"
            async with _procs.gateway(Path(tmp), model.url, keys) as gw:
                connector = aiohttp.TCPConnector(limit=clients)
                async with aiohttp.ClientSession(connector=connector) as http:
                    ready = _procs.memory_kib(gw.pid)["VmRSS"]
                    await _chats(http, gw.url, "warm", 100, clients)
                    before = _procs.memory_kib(gw.pid)["VmRSS"]
                    started = time.perf_counter()
                    cpu0 = _procs.cpu_seconds(gw.pid)
                    marks: dict[int, int] = {}

                    def mark(done: int) -> None:
                        if done in (10_000, conversations):
                            marks[done] = _procs.memory_kib(gw.pid)["VmRSS"]

                    await _chats(http, gw.url, "idle", conversations, clients, mark)
                    seconds = time.perf_counter() - started
                    cpu = _procs.cpu_seconds(gw.pid) - cpu0
                    await asyncio.sleep(1.0)
                    live = await _live(http, gw.url)
                    loaded = _procs.memory_kib(gw.pid)["VmRSS"]
    out = {
        "conversations": float(conversations),
        "live_actors": live,
        "load_seconds": seconds,
        "gateway_cpu_ms_per_turn": cpu * 1000 / conversations,
        "rss_ready_mb": ready / 1024,
        "rss_after_warmup_mb": before / 1024,
        "rss_loaded_mb": loaded / 1024,
        "kib_per_live_conversation": (loaded - before) / max(1.0, live),
    }
    if 10_000 in marks and conversations > 10_000:
        out["rss_at_10k_mb"] = marks[10_000] / 1024
        out["kib_per_conversation_first_10k"] = (marks[10_000] - before) / 10_000
    return out


async def _chats(
    http: aiohttp.ClientSession,
    url: str,
    prefix: str,
    count: int,
    clients: int,
    mark: Any = None,
) -> None:
    numbers = iter(range(count))
    done = itertools.count(1)

    async def client() -> None:
        for c in numbers:
            async with http.post(
                f"{url}/api/sessions/{prefix}{c}/chat", json={"message": "hello"}
            ) as r:
                body = await r.json()
                if r.status != 200 or body.get("failure"):
                    raise RuntimeError(f"turn failed: {r.status} {body}")
            finished = next(done)
            if mark is not None:
                mark(finished)

    await asyncio.gather(*(client() for _ in range(clients)))


async def _live(http: aiohttp.ClientSession, url: str) -> float:
    async with http.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("botmux_live_sessions "):
                return float(line.split()[1])
    return 0.0


class _Model:
    """Answers at once."""

    async def run_turn(
        self,
        conversation: str,
        history: Sequence[ChatMessage],
        text: str,
        **_: Any,
    ) -> Result:
        return Result(reply="hi there", model="bench")

    def status(self) -> dict[str, object]:
        return {}


class _Platform:
    platform = "peer"

    def __init__(self) -> None:
        self.delivered = 0
        self.all = anyio.Event()
        self.expect = 0

    def render(self, text: str) -> list[str]:
        return [text]

    def delivered_as(self, row: StoredMessage) -> None:
        return None

    async def deliver(self, outcome: TurnOutcome) -> None:
        self.delivered += 1
        if self.delivered >= self.expect:
            self.all.set()

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        yield

    def watching(self, row: StoredMessage) -> Watch | None:
        return None

    def asker(self, row: StoredMessage) -> None:
        return None

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        raise NotImplementedError


async def python_crowd(actors: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_sqlite_store(str(Path(tmp) / "crowd.db")) as store:
            platform = _Platform()
            deps = SessionDeps(
                store=store,
                runner=_Model(),
                outlets={"peer": platform},  # type: ignore[dict-item]
                limiter=anyio.CapacityLimiter(1024),
                history_messages=20,
                mailbox_size=256,
            )
            router = Router(lambda key: SessionActor(key, deps), idle_s=36000, clock=time.monotonic)
            async with anyio.create_task_group() as tg:
                await tg.start(router.run)

                async def wave(prefix: str, count: int) -> None:
                    platform.expect = platform.delivered + count
                    platform.all = anyio.Event()
                    for c in range(count):
                        inbound = Inbound("peer", f"peer:{prefix}{c}", f"{prefix}{c}", "hello")
                        await router.deliver((await store.submit(AdmitRow(inbound))).row)
                    await platform.all.wait()
                    await anyio.wait_all_tasks_blocked()

                await wave("warm", 200)
                gc.collect()
                tracemalloc.start()
                before = tracemalloc.take_snapshot()
                await wave("idle", actors)
                gc.collect()
                after = tracemalloc.take_snapshot()
                tracemalloc.stop()
                live = router.statistics().live
                router.close()
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print("  top lines (bytes per actor):")
    for s in stats[:12]:
        frame = s.traceback[0]
        print(f"    {s.size_diff / actors:8.1f}  {frame.filename.split('/')[-1]}:{frame.lineno}")
    return {
        "actors": float(actors),
        "live": float(live),
        "bytes_per_idle_actor": total / actors,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--actors", type=int, default=5_000)
    parser.add_argument("--only", choices=("gateway", "python"))
    args = parser.parse_args()
    if args.only in (None, "python"):
        print("python:", await python_crowd(args.actors))
    if args.only in (None, "gateway"):
        print("gateway:", await gateway_crowd(args.conversations))


if __name__ == "__main__":
    asyncio.run(main())
