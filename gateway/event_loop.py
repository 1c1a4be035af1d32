"""Which event loop ``botmux run`` runs on: uvloop where it is installed, else asyncio's own.

uvloop (libuv under asyncio's interface) runs the same gateway with less CPU per event: the
loop's own bookkeeping, socket reads and writes, and the wake-ups from the store's threads are
C instead of Python. Measured on the 50-conversation load (docs/BENCHMARKS-HISTORY.md, "Issue
20, third round"): 7% fewer instructions per turn, 13% with one client. It is a dependency on the
platforms it is built for (not Windows); ``BOTMUX_EVENT_LOOP=asyncio`` runs asyncio's loop
instead, to tell a loop problem from ours. The tests run in-process on asyncio's loop (the
anyio pytest plugin); the real-process tests run ``botmux run``, so on uvloop.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from gateway.errors import ConfigError

CHOICES = ("uvloop", "asyncio")


def chosen(environ: Mapping[str, str]) -> str:
    """``uvloop`` or ``asyncio``: the environment's choice, else uvloop when installed."""
    wanted = environ.get("BOTMUX_EVENT_LOOP", "").strip().lower()
    if wanted and wanted not in CHOICES:
        raise ConfigError(
            "BOTMUX_EVENT_LOOP", f"must be one of {', '.join(CHOICES)}, not {wanted!r}"
        )
    if wanted == "asyncio":
        return "asyncio"
    if importlib.util.find_spec("uvloop") is None:
        if wanted == "uvloop":
            raise ConfigError("BOTMUX_EVENT_LOOP", "uvloop is asked for, but it is not installed")
        return "asyncio"
    return "uvloop"


def backend_options(loop: str) -> dict[str, Any]:
    """What ``anyio.run`` is given for ``loop``."""
    return {"use_uvloop": loop == "uvloop"}
