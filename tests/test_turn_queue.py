"""A session actor's queue (``gateway.turn_queue``), decided with no I/O: what waits, what a
``/stop`` or a newer row cuts, how bursts are taken with the time passed in."""

from __future__ import annotations

from gateway.messages import AttachmentRef, StoredMessage
from gateway.queue import QueuePolicy, TakeBurst, WaitForMore
from gateway.turn_queue import CutBurst, CutTurn, KeepRunning, TurnQueue, cut, header

FOLLOWUP = QueuePolicy()
COLLECT = QueuePolicy(mode="collect", debounce_s=1.5, debounce_max_s=5.0)
INTERRUPT = QueuePolicy(mode="interrupt")


def row(row_id: int, text: str = "hi", *, at: float = 100.0, files: int = 0) -> StoredMessage:
    refs = tuple(AttachmentRef("document", f"f{i}", "text/plain", 1, "x") for i in range(files))
    return StoredMessage(
        row_id, "peer:a", "user", text, "pending", at, "peer", f"m{row_id}", attachments=refs
    )


# -- cut -----------------------------------------------------------------------------------------


def test_a_stop_cancels_the_running_turn() -> None:
    found = cut("stop", running=True, collecting=False, binding=False, already=None)
    assert found == CutTurn("stop")


def test_a_stop_while_a_burst_is_collected_cancels_the_burst() -> None:
    found = cut("stop", running=False, collecting=True, binding=False, already=None)
    assert found == CutBurst()


def test_a_stop_outranks_an_interruption_already_made() -> None:
    found = cut("interrupt", running=True, collecting=False, binding=False, already="stop")
    assert found == CutTurn("stop")
    found = cut("stop", running=True, collecting=False, binding=False, already="interrupt")
    assert found == CutTurn("stop")


def test_an_interruption_spares_a_turn_a_peer_client_already_saw() -> None:
    found = cut("interrupt", running=True, collecting=False, binding=True, already=None)
    assert found == KeepRunning()
    assert cut("stop", running=True, collecting=False, binding=True, already=None) == (
        CutTurn("stop")  # a stop is obeyed all the same
    )


def test_nothing_running_nothing_to_cut() -> None:
    for why in ("stop", "interrupt"):
        assert cut(why, running=False, collecting=False, binding=False, already=None) == (
            KeepRunning()
        )


# -- the queue -----------------------------------------------------------------------------------


def test_a_row_of_an_idle_conversation_starts_whole_and_later_ones_wait_as_headers() -> None:
    queue = TurnQueue()
    assert queue.admitted(row(1, "first"), collecting=False)
    assert queue.waiting == [row(1, "first")]  # whole: its turn does not read it back
    burst = queue.take(FOLLOWUP, now=100.0)
    assert burst == TakeBurst((row(1, "first"),))
    queue.start((row(1, "first"),))
    assert queue.admitted(row(2, "second"), collecting=False)
    assert queue.waiting == [header(row(2, "second"))]  # behind a turn: read at its turn
    assert queue.waiting[0].content == ""
    assert len(queue) == 2 and queue.has(1) and queue.has(2)


def test_a_row_with_attachments_or_in_a_burst_window_is_queued_as_a_header() -> None:
    queue = TurnQueue()
    assert not queue.starts_now(row(1, files=1), collecting=False)
    assert not queue.starts_now(row(1), collecting=True)
    assert queue.starts_now(row(1), collecting=False)


def test_a_redelivered_or_already_loaded_row_is_not_queued_twice() -> None:
    queue = TurnQueue()
    assert not queue.loaded([row(1), row(2)])
    assert queue.floor == 2
    assert not queue.admitted(row(2), collecting=False)  # loaded at start
    assert not queue.admitted(row(1), collecting=False)
    assert queue.admitted(row(3), collecting=False)
    assert not queue.admitted(row(3), collecting=False)
    assert [r.id for r in queue.waiting] == [1, 2, 3]


def test_rows_admitted_out_of_order_wait_in_id_order() -> None:
    queue = TurnQueue()
    for row_id in (5, 3, 4):
        queue.admitted(row(row_id), collecting=True)
    assert [r.id for r in queue.waiting] == [3, 4, 5]


def test_a_row_loaded_from_another_node_newer_than_the_running_turn_says_so() -> None:
    queue = TurnQueue()
    queue.loaded([row(1)])
    taken = queue.take(FOLLOWUP, now=100.0)
    assert isinstance(taken, TakeBurst)
    queue.start(taken.rows)
    assert queue.loaded([row(1), row(2)])  # newer than the running turn
    assert not queue.loaded([row(2)])  # queued already


def test_collect_waits_for_the_burst_to_be_quiet_then_takes_it_whole() -> None:
    queue = TurnQueue()
    queue.admitted(row(1, "a", at=100.0), collecting=False)
    queue.admitted(row(2, "b", at=101.0), collecting=True)
    assert queue.take(COLLECT, now=101.5) == WaitForMore(1.0)  # 1.5 s after the last row
    assert all(r.content == "" for r in queue.waiting)  # they wait as headers
    taken = queue.take(COLLECT, now=102.5)
    assert isinstance(taken, TakeBurst) and [r.id for r in taken.rows] == [1, 2]
    assert queue.waiting == [] and queue.take(COLLECT, now=103.0) is None


def test_a_stopped_burst_is_handed_out_whole_to_start_stopped() -> None:
    queue = TurnQueue()
    queue.admitted(row(1, at=100.0), collecting=False)
    assert isinstance(queue.take(COLLECT, now=100.1), WaitForMore)
    assert queue.stopped_burst() == ()  # not stopped: nothing
    queue.cut = "stop"
    stopped = queue.stopped_burst()
    assert [r.id for r in stopped] == [1] and queue.waiting == []


def test_a_requeued_turn_waits_again_and_a_finished_one_leaves() -> None:
    queue = TurnQueue()
    queue.loaded([row(1), row(2)])
    taken = queue.take(INTERRUPT, now=100.0)
    assert isinstance(taken, TakeBurst) and len(taken.rows) == 2
    queue.start(taken.rows)
    queue.cut = "interrupt"
    queue.admitted(row(3), collecting=False)
    queue.finish(requeue=True)  # interrupted: 1 and 2 are answered with 3 next
    assert queue.cut is None and queue.running == ()
    assert [r.id for r in queue.waiting] == [1, 2, 3] and len(queue) == 3
    taken = queue.take(INTERRUPT, now=100.0)
    assert isinstance(taken, TakeBurst)
    queue.start(taken.rows)
    queue.finish(requeue=False)
    assert len(queue) == 0 and queue.waiting == []


def test_closing_forgets_what_has_not_started() -> None:
    queue = TurnQueue()
    queue.loaded([row(1), row(2), row(3)])
    taken = queue.take(FOLLOWUP, now=100.0)
    assert isinstance(taken, TakeBurst)
    queue.start(taken.rows)
    queue.close()
    assert queue.waiting == [] and len(queue) == 1  # the running turn only
    queue.finish(requeue=False)
    assert len(queue) == 0
