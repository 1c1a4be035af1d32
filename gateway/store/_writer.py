"""Group commit, shared by the store backends.

Every write (a typed command, ``commands.Write``) is sent to one writer task. The writer takes all
writes that are waiting and hands them to the backend's ``apply`` as one batch, which the
backend commits as one transaction: under load, many conversations' admissions and answers
share one commit instead of queueing behind one commit each. Each write still settles as a
unit: ``apply`` returns one result per write, and may refuse one write (its result is a
``GatewayError``: ``LeaseLost``, ``Overloaded``) and commit the others; a batch that fails is
retried one write per transaction, so one bad row never sinks the others.
Operations settle in the order they reached the writer, which is the order their ids were
assigned, so the tasks that wait on them resume in admission order.

A commit runs shielded from cancellation (a caller that gives up must not roll back the
others' writes) but within ``deadline_s``: one the database does not finish in time fails
with ``StoreUnavailable`` (its outcome unknown, as after a crash). At close, what is queued
gets the same deadline to settle, or less when the gateway stops (``stop_by``: the stop's
one deadline); what is left after it fails, and is logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

from gateway.errors import GatewayError, StoreClosed, StoreError, StoreUnavailable
from gateway.events import Observe, StoreCommitted
from gateway.store.commands import Write

log = logging.getLogger(__name__)

MAX_BATCH = 512
R = TypeVar("R")

#: What a backend's ``apply`` does with a batch: one result per write, in order.
Apply = Callable[[list[Write[Any]]], Awaitable[Sequence[object]]]


@dataclass(eq=False, slots=True)
class Pending(Generic[R]):
    """One write waiting for the writer; ``settled`` once it committed or failed.

    Its submitter waits on a bare future of the loop, not an anyio Event: both store
    backends' drivers (aiosqlite, asyncpg) are asyncio's anyway, and an anyio Event a write
    (the backend looked up through sniffio, an asyncio Event, the future inside it) was
    close to half of the loop thread's samples when the writer is pushed (py-spy). A submitter
    cancelled while it waits cancels its future; the write still settles. ``result`` is typed
    as the write declares it (``Write[R]``), so ``submit`` returns it with no cast.
    """

    write: Write[R]
    waiter: asyncio.Future[None]
    result: R = field(init=False)
    error: BaseException | None = None
    settled: bool = False

    def settle(self) -> None:
        self.settled = True
        if not self.waiter.done():
            self.waiter.set_result(None)


@dataclass(frozen=True, slots=True)
class WriterStatistics:
    """What a store's writer committed (``GroupWriter.statistics()``)."""

    commits: int  # transactions committed
    operations: int  # writes committed in them
    batch_max: int  # the most writes one transaction took
    retried_batches: int  # batches retried one write at a time (a write in them was refused)


class GroupWriter:
    """The writer task and its mailbox; ``apply(batch)`` commits a batch in one transaction.

    The mailbox is a deque with two events, not a memory object stream: a stream's ``send``
    and ``receive`` each yield to the loop first (a checkpoint), which was a loop round per
    write for nothing, and its wake-up per item became one per batch. A full mailbox
    (``mailbox`` writes) still holds submitters back until the writer takes a batch.
    """

    def __init__(
        self,
        apply: Apply,
        *,
        mailbox: int,
        observe: Observe,
        deadline_s: float = 10.0,
    ) -> None:
        self._apply = apply
        self._observe = observe
        self._deadline_s = deadline_s
        self._committing: anyio.CancelScope | None = None  # the commit under way, shielded
        self._stop_by = math.inf  # when the close must be over (anyio's clock), if stopping
        self._stopped = anyio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None  # the submitters' (at the first)
        self._mailbox = mailbox
        self._queue: deque[Pending[Any]] = deque()
        self._closed = False
        self._arrived: anyio.Event | None = None  # while the writer waits for a write
        self._room: anyio.Event | None = None  # while a submitter waits for a full mailbox
        self._commits = self._operations = self._batch_max = self._retried_batches = 0

    def statistics(self) -> WriterStatistics:
        return WriterStatistics(
            commits=self._commits,
            operations=self._operations,
            batch_max=self._batch_max,
            retried_batches=self._retried_batches,
        )

    async def submit(self, write: Write[R]) -> R:
        """Queue ``write`` and wait until it committed: its result, or its error raised."""
        while len(self._queue) >= self._mailbox and not self._closed:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        if self._closed:
            raise StoreClosed("the store is closed")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        op = Pending(write, waiter := loop.create_future())
        self._queue.append(op)
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None
        await waiter
        if op.error is not None:
            raise op.error
        return op.result

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The writer task for the body's duration; at its end, what is queued settles first,
        within the deadline: a database that stopped answering cannot hold the close up."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.run)
            try:
                yield
            finally:
                self.close()
                until = min(anyio.current_time() + self._deadline_s, self._stop_by)
                with anyio.CancelScope(shield=True, deadline=until):
                    await self._stopped.wait()
                if not self._stopped.is_set():
                    if self._committing is not None:
                        self._committing.cancel()
                    tg.cancel_scope.cancel()

    def stop_by(self, deadline: float) -> None:
        """The gateway stops: what is queued at the close settles by ``deadline`` (anyio's
        clock) at the latest, however long ``deadline_s`` is."""
        self._stop_by = deadline

    def close(self) -> None:
        """No more operations: the writer settles what is queued, then ``run`` returns."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        """The writer (a write arrived, or the close) and any submitter waiting for room."""
        for event in (self._arrived, self._room):
            if event is not None:
                event.set()
        self._arrived = self._room = None

    async def run(self) -> None:
        queue = self._queue
        try:
            while queue or not self._closed:
                if not queue:
                    self._arrived = anyio.Event()
                    await self._arrived.wait()
                    continue
                batch = [queue.popleft() for _ in range(min(len(queue), MAX_BATCH))]
                if self._room is not None:  # room again for whoever waits
                    self._room.set()
                    self._room = None
                with anyio.CancelScope(shield=True) as self._committing:
                    await self._commit(batch)
                self._committing = None
                if any(not op.settled for op in batch):
                    # Cut short by the close deadline: outcome unknown.
                    error = StoreUnavailable("the store closed before this write settled")
                    _fail(batch, error)
        finally:
            self._closed = True  # the writer is gone (cancelled, or a bug): refuse new writes
            self._wake()
            left = list(queue)
            queue.clear()
            if left:
                log.warning(
                    "store: closed with writes not committed (their callers were told)",
                    extra={"writes": len(left), "deadline_s": self._deadline_s},
                )
                _fail(left, StoreClosed("the store closed before this write was committed"))
            self._stopped.set()

    async def _commit(self, batch: list[Pending[Any]]) -> None:
        started = time.perf_counter()
        for op in batch:  # a retried operation starts clean
            op.result, op.error = None, None
        try:
            with anyio.fail_after(self._deadline_s):
                results = await self._apply([op.write for op in batch])
        except TimeoutError:  # the backends raise theirs as StoreErrors: this is the deadline
            _fail(
                batch,
                StoreUnavailable(
                    f"the database did not commit within {self._deadline_s} s (outcome unknown)"
                ),
            )
            return
        except (StoreUnavailable, StoreClosed) as exc:
            # The backend lost its database: whether the batch committed is unknown, so it is
            # not re-applied piecemeal. Each write fails; callers retry as after a crash.
            _fail(batch, exc)
            return
        except Exception as exc:
            # The database refused a statement (a StoreError), or a bug of ours.
            if len(batch) == 1:
                op = batch[0]
                name = type(op.write).__name__
                op.result, op.error = None, StoreError(f"store write {name} failed: {exc}")
                op.error.__cause__ = exc
                op.settle()
                return
            # Settle each write on its own so one bad row cannot sink the rest.
            self._retried_batches += 1
            for op in batch:
                await self._commit([op])
            return
        self._commits += 1
        self._operations += len(batch)
        self._batch_max = max(self._batch_max, len(batch))
        self._observe(StoreCommitted(seconds=time.perf_counter() - started, operations=len(batch)))
        for op, result in zip(batch, results, strict=True):
            if isinstance(result, GatewayError):
                # Refused alone (``LeaseLost``, ``Overloaded``): the others committed.
                op.error = result
            else:
                op.result = result
            op.settle()


def _fail(batch: list[Pending[Any]], exc: StoreError) -> None:
    """Fail every write of ``batch`` not settled yet with (a copy of) ``exc``."""
    for op in batch:
        if op.settled:
            continue
        # An exception of its own for each waiter: one instance raised in many tasks would
        # gather every task's traceback.
        error = type(exc)(str(exc))
        error.__cause__ = exc.__cause__
        op.result, op.error = None, error
        op.settle()
