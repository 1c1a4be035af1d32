"""Where the event loop stalls: a pytest plugin that samples the loop thread's stack whenever
one callback has run longer than a threshold. Not a test; it prints nothing until the end.

    BOTMUX_STALL_MS=20 .venv/bin/python -m pytest -q -p tests.bench.stalls tests/

A watchdog thread looks every 2 ms at the callback the loop is running (the standard
library's loop: ``asyncio.events.Handle._run`` is timed, so uvloop is not covered) and, once
it has run ``BOTMUX_STALL_MS`` (default 20), records the loop thread's stack once for that
callback: the innermost frames of ours and of the libraries below them. At the end of the
session the stacks, by how often they were seen, go to ``BOTMUX_STALL_OUT``
(default ``stalls.txt``). A stack names the code that was running, not necessarily all of
the callback's time. Only this process's loops are seen (not a gateway run as a subprocess).
"""

from __future__ import annotations

import asyncio.events
import collections
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

_LIMIT_S = float(os.environ.get("BOTMUX_STALL_MS", "20")) / 1e3
_OUT = Path(os.environ.get("BOTMUX_STALL_OUT", "stalls.txt"))
_ROOT = str(Path(__file__).resolve().parents[2]) + os.sep


class _Watch:
    def __init__(self) -> None:
        self.started: float | None = None
        self.thread = 0
        self.serial = 0
        self.sampled = -1
        self.stacks: collections.Counter[str] = collections.Counter()

    def run(self) -> None:
        while True:
            time.sleep(0.002)
            started, serial = self.started, self.serial
            if started is None or serial == self.sampled:
                continue
            if time.perf_counter() - started < _LIMIT_S:
                continue
            self.sampled = serial
            frame = sys._current_frames().get(self.thread)
            if frame is not None:
                self.stacks[_describe(traceback.extract_stack(frame))] += 1


def _describe(summary: traceback.StackSummary) -> str:
    stack = [f for f in summary if f.filename != __file__]
    ours = [f for f in stack if f.filename.startswith(_ROOT) and "site-packages" not in f.filename]
    inner = [f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in stack[-4:]]
    outer = [f"{f.filename.removeprefix(_ROOT)}:{f.lineno}:{f.name}" for f in ours[-4:]]
    return " <- ".join(reversed(outer)) + "  ||  " + " <- ".join(reversed(inner))


_watch = _Watch()
_run = asyncio.events.Handle._run


def _timed(self: asyncio.events.Handle) -> None:
    _watch.thread = threading.get_ident()
    _watch.serial += 1
    _watch.started = time.perf_counter()
    try:
        _run(self)
    finally:
        _watch.started = None


def pytest_configure(config: Any) -> None:
    asyncio.events.Handle._run = _timed  # type: ignore[method-assign]
    threading.Thread(target=_watch.run, name="stall-watch", daemon=True).start()


def pytest_unconfigure(config: Any) -> None:
    asyncio.events.Handle._run = _run  # type: ignore[method-assign]
    lines = [f"{n:5d}  {stack}" for stack, n in _watch.stacks.most_common()]
    _OUT.write_text("\n".join(lines) + "\n")
    print(f"\nloop stalls over {_LIMIT_S * 1e3:.0f} ms: {len(lines)} stacks in {_OUT}")
