"""The typing indicator, tied to a turn's lifetime with a hard deadline.

``keep_typing`` sends the platform's typing action at once and then every ``every`` seconds
while its block runs, and stops when the block ends, however it ends (answer, failure,
``/stop``, shutdown), or at ``deadline`` at the latest, or once ``until`` is set (the
first preview of the answer appeared). A failed typing call is logged and
never fails the turn: it is decoration.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

log = logging.getLogger(__name__)


@asynccontextmanager
async def keep_typing(
    send_action: Callable[[], Awaitable[object]],
    *,
    every: float = 4.0,
    deadline: float = 300.0,
    conversation: str = "",
    until: anyio.Event | None = None,
) -> AsyncIterator[None]:
    async def pulse() -> None:
        with anyio.move_on_after(deadline):
            while until is None or not until.is_set():
                try:
                    await send_action()
                except Exception as exc:  # decoration only: never fail the turn
                    log.info(
                        "typing indicator failed",
                        extra={"conversation": conversation, "error": type(exc).__name__},
                    )
                if until is None:
                    await anyio.sleep(every)
                    continue
                with anyio.move_on_after(every):
                    await until.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pulse)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
