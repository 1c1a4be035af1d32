"""The preview scheduler's parts without a platform (platforms/_preview.py): the budget's
windows and pauses, cutting to a limit, and a preview shown through a recording ``show``.
"""

from __future__ import annotations

import anyio
import pytest

from gateway.errors import PlatformError
from gateway.messages import AttemptFailed, ReplyDelta
from platforms._chunking import utf16_len
from platforms._preview import Budget, Preview, Previews, PreviewsStatistics, Rate, cut
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio


def test_the_budget_allows_its_rate_per_key_and_pauses_a_key() -> None:
    clock = Clock(100.0)
    budget = Budget({"chat": Rate(2, 3.0), "all": Rate(3, 1.0)}, clock)
    chat_a, chat_b, everyone = ("chat", 1), ("chat", 2), ("all", "")
    assert budget.ready_at([chat_a, everyone]) == 100.0
    budget.take([chat_a, everyone])
    clock.now = 101.0
    budget.take([chat_a, everyone])
    assert budget.ready_at([chat_a, everyone]) == 103.0  # the first call leaves the window
    assert budget.ready_at([chat_b, everyone]) == 101.0  # another chat is not held up
    budget.take([chat_b, everyone])
    assert budget.ready_at([chat_b, everyone]) == 101.0  # the call at 100 left the window
    budget.take([("chat", 3), everyone])
    assert budget.ready_at([chat_b, everyone]) == 102.0  # the bot's 3 a second
    budget.pause(chat_b, 30)
    assert budget.ready_at([chat_b]) == 131.0
    assert budget.ready_at([("draft", 1)]) == 101.0  # no rate: only pauses count


def test_a_call_counts_from_its_start_and_then_as_of_its_answer() -> None:
    """The platform counts a call on arrival, after we sent it: a window that ran from the
    send would empty before the platform's does, and a burst at its edge would get a 429."""
    clock = Clock(100.0)
    budget = Budget({"chat": Rate(2, 5.0)}, clock)
    chat = [("chat", 1)]
    with budget.spend(chat):
        clock.now = 100.5  # answered half a second after it was sent
    clock.now = 101.0
    with budget.spend(chat):
        assert budget.ready_at(chat) == 105.5  # in flight: counted already
        clock.now = 102.0
    assert budget.ready_at(chat) == 105.5  # the first, as of its answer: not 105.0
    clock.now = 105.5
    assert budget.ready_at(chat) == 105.5
    budget.take(chat)
    assert budget.ready_at(chat) == 107.0  # the second, as of its answer at 102
    clock.now = 120.0
    with pytest.raises(PlatformError), budget.spend(chat):
        clock.now = 130.0  # slower than the window (aged out), and refused
        assert budget.ready_at(chat) == 130.0
        raise PlatformError("slow", status=500)
    clock.now = 131.0
    budget.take(chat)
    assert budget.ready_at(chat) == 135.0  # the slow one counts as of its answer


def test_cut_keeps_a_preview_within_the_limit() -> None:
    assert cut("short", 10) == "short"
    long = "x" * 50
    assert cut(long, 10) == "x" * 9 + "…"
    emoji = "😀" * 3000  # two UTF-16 units each
    shown = cut(emoji, 4096, utf16_len)
    assert utf16_len(shown) <= 4096 and shown.endswith("…")
    assert utf16_len(shown) >= 4090


async def test_a_failed_attempt_is_replaced_and_a_429_pauses_previews() -> None:
    shown: list[tuple[str, str | None]] = []
    refuse = [True]
    first_shown, third = anyio.Event(), anyio.Event()

    async def show(text: str, message_id: str | None) -> str | None:
        shown.append((text, message_id))
        if len(shown) == 3:
            third.set()
        if message_id is not None and refuse[0]:
            refuse[0] = False
            raise PlatformError("429", status=429, retry_after=0.2)
        first_shown.set()
        return message_id or "m1"

    previews = Previews(Budget({}))
    async with anyio.create_task_group() as tg:
        await tg.start(previews.run)
        preview = Preview("c", 7, show, previews.budget, [("chat", 1)], interval=0.05)
        assert previews.open(preview) is preview
        preview.put(ReplyDelta("first attempt ", 1))
        with anyio.fail_after(5):
            await first_shown.wait()
            assert preview.shown.is_set()
            preview.put(AttemptFailed(1, "connection"))
            preview.put(ReplyDelta("second", 2))
            await third.wait()  # the refused edit, then the same text once allowed
            assert await previews.finish("c", 7) == "m1"
        previews.close()
    assert shown == [("first attempt", None), ("second", "m1"), ("second", "m1")]
    assert preview.stats == {"updates": 2, "paused": 1, "failed": 0}
    assert previews.statistics() == PreviewsStatistics(opened=1, refused=0, live=0)
