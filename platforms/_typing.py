"""The typing indicator, tied to a turn's lifetime with a hard deadline.

``keep_typing`` sends the platform's typing action at once and then every ``every`` seconds
while its block runs, and stops when the block ends, however it ends (answer, failure,
``/stop``, shutdown), or at ``deadline`` at the latest, or once ``until`` is set (the
first preview of the answer appeared). While ``quiet()`` holds (the turn waits for a person
to approve a tool call, SPEC 15) no typing action is sent: "typing…" under a question that
waits for the user would say the opposite of what is happening. A failed typing call is
logged and never fails the turn: it is decoration.

A typing call still under way when the block ends is let finish, for at most ``settle``
seconds, before the block is left. Cancelling it would close its kept-alive connection
(aiohttp drops a connection whose response was not read), so that the next Bot API or REST
call opens a new one: a TLS handshake in production, for about one call in three under a
fast model. Waiting also keeps the order the user sees: the answer is committed, and so
sent, only after the block, so a typing action cannot reach the platform after the reply
and show "typing..." under it. A call slower than ``settle`` is cancelled as before.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

log = logging.getLogger(__name__)

SETTLE_S = 1.0  # a typing call's round trip is tens of ms; a platform slower than this is cut


@asynccontextmanager
async def keep_typing(
    send_action: Callable[[], Awaitable[object]],
    *,
    every: float = 4.0,
    deadline: float = 300.0,
    conversation: str = "",
    until: anyio.Event | None = None,
    settle: float = SETTLE_S,
    quiet: Callable[[], bool] = lambda: False,
) -> AsyncIterator[None]:
    calling = False
    ended = False

    async def pulse() -> None:
        nonlocal calling
        with anyio.move_on_after(deadline):
            while until is None or not until.is_set():
                if not quiet():
                    calling = True
                    try:
                        await send_action()
                    except Exception as exc:  # decoration only: never fail the turn
                        log.info(
                            "typing indicator failed",
                            extra={"conversation": conversation, "error": type(exc).__name__},
                        )
                    finally:
                        calling = False
                    if ended:  # the block ended during the call: it was let finish
                        return
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
            ended = True
            if calling:  # let it finish (pulse returns after it), within ``settle``
                tg.cancel_scope.deadline = anyio.current_time() + settle
            else:
                tg.cancel_scope.cancel()
