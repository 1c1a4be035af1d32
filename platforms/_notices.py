"""Direct answers that are not turns (command answers, pairing codes, refusal notices): the
one rule by which both chat adapters retry them, and the small actor that sends them.

Such an answer has no outbox row: it is cheap to lose and must never be doubled. So it is
tried at most :data:`NOTICE_ATTEMPTS` times, again only when ``policy.classify_send`` says a
repeat cannot duplicate it (nothing reached the platform) and the wait the platform asks for
(or the backoff) is short; otherwise it is given up, and the caller logs why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
from anyio.abc import TaskStatus

from gateway.errors import PlatformError
from gateway.messages import Failure
from policy import classify_send
from policy.backoff import Backoff

T = TypeVar("T")
N = TypeVar("N")

NOTICE_ATTEMPTS = 3
NOTICE_MAX_WAIT_S = 30.0
_BACKOFF = Backoff(0.5, 5.0)


async def send_notice(
    send: Callable[[], Awaitable[T]],
    *,
    errors: tuple[type[BaseException], ...],
    translate: Callable[[BaseException], PlatformError],
) -> T | Failure:
    """``send()``'s result, or the failure it was given up on (``errors``: the library's
    exceptions, which ``translate`` turns into ours)."""
    attempt = 0
    while True:
        try:
            return await send()
        except errors as exc:
            failure = classify_send(translate(exc))
            wait = failure.retry_after or _BACKOFF.delay(attempt)
            attempt += 1
            if not failure.retryable or attempt >= NOTICE_ATTEMPTS or wait > NOTICE_MAX_WAIT_S:
                return failure
            await anyio.sleep(wait)


class NoticeBox(Generic[N]):
    """The notice actor of a chat adapter: a bounded mailbox of direct answers, sent one at a
    time in the order given, by ``send`` (which applies :func:`send_notice`'s rule). A full
    mailbox is not waited on (the adapter's actor must go on): ``on_full`` says so, visibly."""

    def __init__(
        self, send: Callable[[N], Awaitable[object]], *, on_full: Callable[[N], None], size: int
    ) -> None:
        self._send = send
        self._on_full = on_full
        self._tx, self._rx = anyio.create_memory_object_stream[N](size)
        self._idle = anyio.Event()
        self._idle.set()

    def __repr__(self) -> str:
        return f"<NoticeBox queued={self._tx.statistics().current_buffer_used}>"

    def send_nowait(self, notice: N) -> None:
        if self._idle.is_set():
            self._idle = anyio.Event()
        try:
            self._tx.send_nowait(notice)
        except anyio.WouldBlock:
            self._on_full(notice)
            self._set_idle_if_empty()

    async def wait_idle(self) -> None:
        """Until every notice given so far was sent (or given up)."""
        await self._idle.wait()

    def close(self) -> None:
        """No more notices: :meth:`run` ends once the queued ones are sent."""
        self._tx.close()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._rx:
            task_status.started()
            async for notice in self._rx:
                await self._send(notice)
                self._set_idle_if_empty()

    def _set_idle_if_empty(self) -> None:
        if self._tx.statistics().current_buffer_used == 0:
            self._idle.set()
