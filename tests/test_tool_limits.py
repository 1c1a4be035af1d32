"""The tool loop's limits (SPEC 15, docs/TOOLS.md "The tool loop") on a real session actor,
store and agent against the fake model: ``[agent] max_parallel_tools`` (the calls of one step
run at once, that many at a time), ``max_turn_s`` (the whole loop's time budget, on a clock
the test moves) and ``max_tool_result_chars`` (a result is cut, with a note, before the model
and the store get it). The step limit and repeats are in tests/test_tool_loop.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.events_tools import ToolLoopStopped
from gateway.messages import ToolOutcome, ToolSpec
from gateway.metrics import Metrics
from gateway.store import Transcript, TurnSteps
from tests.actors import Session, session
from tests.fakes.openai_server import calls, ok, open_fake_model
from tests.fakes.toolbox import RecordingToolBox, tool
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio


@dataclass
class GatedToolBox(RecordingToolBox):
    """A toolbox whose calls each wait for the test to open their gate (by their ``text``
    argument), and which counts how many run at once: a spy, it changes no result."""

    gates: dict[str, anyio.Event] = field(default_factory=dict)
    running: int = 0
    most: int = 0  # the most calls running at once
    order: list[str] = field(default_factory=list)  # ``text`` of each call, as it began
    moved: anyio.Event = field(default_factory=anyio.Event)

    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, conversation: str = ""
    ) -> ToolOutcome:
        text = str(arguments["text"])
        self.running += 1
        self.most = max(self.most, self.running)
        self.order.append(text)
        self._moved()
        try:
            await self.gates.setdefault(text, anyio.Event()).wait()
            return await super().call(spec, arguments, conversation=conversation)
        finally:
            self.running -= 1
            self._moved()

    def _moved(self) -> None:
        moved, self.moved = self.moved, anyio.Event()
        moved.set()

    async def began(self, count: int) -> None:
        """Until ``count`` calls began (at most 10 s)."""
        with anyio.fail_after(10):
            while len(self.order) < count:
                await self.moved.wait()

    def release(self, text: str) -> None:
        self.gates.setdefault(text, anyio.Event()).set()


async def settled(world: Session) -> None:
    """Until every call past the limiter has begun, which a test cannot wait for as such (it
    must not happen). Between the limiter and the tool, a call stores its row (a write) and
    reads it back (a read); the store settles writes, and its reader answers reads, first in
    first out, each waking its waiters in that order. So once a write of the test's settled
    and then a read of the test's was answered, a call that had passed the limiter before has
    begun (from its read to the tool there is no wait)."""
    await world.admitter.stored("-", key="peer:other")  # another conversation's row
    await world.store.read(Transcript("peer:other"))


async def test_a_step_runs_its_calls_at_most_max_parallel_tools_at_once(tmp_path: Path) -> None:
    """Five calls, a limit of 2: the first two run together and the others wait for a free
    place, one each time a call ends; all five run, and the results go back to the model and
    into the store in the order of the calls, not the order they ended in."""
    box = GatedToolBox().add(tool("kv__get", lambda a: f"value {a['text']}", read_only=True))
    texts = [str(i) for i in range(5)]
    async with open_fake_model() as fake:
        fake.script(calls(*(("kv__get", {"text": t}) for t in texts)), ok("all read"))
        async with session(
            tmp_path, fake, toolbox=box, agent_extra="max_parallel_tools = 2"
        ) as world:
            row = await world.admit("read five")
            await box.began(2)
            await settled(world)
            assert (box.order, box.running) == (texts[:2], 2)
            # End them out of order, the first call last: each end lets the next call start.
            for n in range(2, 5):
                box.release(texts[n - 1])
                await box.began(n + 1)
                await settled(world)
                assert (box.order, box.running) == (texts[: n + 1], 2)
            box.release("4")
            box.release("0")
            await world.delivered(1)
            (step,) = await world.store.read(TurnSteps(row.id))
            rows = await world.store.read(Transcript("peer:s"))
    assert world.platform.delivered[0].reply == "all read"
    assert box.most == 2
    assert box.executed == {"kv__get": 5}
    expected = [(f"call_{n + 1}", f"value {t}") for n, t in enumerate(texts)]  # call order
    _, second = fake.requests
    assert second.tool_results == expected
    assert [(c.call_id, c.result) for c in step.stored] == expected
    assert {c.state for c in step.stored} == {"finished"}
    assert [(r.call_id, r.content) for r in rows if r.role == "tool"] == expected


async def test_the_turn_budget_stops_the_loop_and_the_reply_says_so(tmp_path: Path) -> None:
    """``max_turn_s`` is the whole loop's: each call takes 25 s of a 60 s budget, so the
    model is asked three times (at 0, 25 and 50 s) and not at 75 s; the turn answers that the
    time limit was reached and what was done, stores every call finished, and the event and
    the metric say why it stopped."""
    clock = Clock()

    def slow(arguments: Mapping[str, Any]) -> str:
        clock.now += 25  # the call takes 25 s of the turn's time
        return f"page {arguments['text']}"

    box = RecordingToolBox().add(tool("web__fetch", slow, read_only=True))
    async with open_fake_model() as fake:
        fake.script(
            *(calls(("web__fetch", {"text": str(i)}), ids=f"s{i}") for i in range(6)),
            ok("never asked for"),
        )
        async with session(
            tmp_path, fake, toolbox=box, agent_extra="max_turn_s = 60", clock=clock
        ) as world:
            row = await world.admit("read the web")
            await world.delivered(1)
            steps = await world.store.read(TurnSteps(row.id))
            rows = await world.store.read(Transcript("peer:s"))
    outcome = world.platform.delivered[0]
    assert outcome.failure is None
    assert outcome.reply == (
        "I stopped before finishing: the turn ran for 60 s, its limit. What was done:\n"
        "- web__fetch: ok\n- web__fetch: ok\n- web__fetch: ok"
    )
    assert len(fake.requests) == 3  # not a fourth model call past the budget
    assert box.executed == {"web__fetch": 3}
    assert [[(c.call_id, c.state) for c in s.stored] for s in steps] == [
        [(f"s{i}_1", "finished")] for i in range(3)
    ]
    assert [(r.role, r.state) for r in rows] == [
        ("user", "answered"),
        *[("assistant", "step"), ("tool", "finished")] * 3,
        ("assistant", "final"),
    ]
    assert rows[-1].content == outcome.reply
    stopped = [e for e in world.events if isinstance(e, ToolLoopStopped)]
    assert [e.reason for e in stopped] == ["time"]
    metrics = Metrics()
    for event in world.events:
        metrics.observe(event)
    assert (
        metrics.registry.get_sample_value("botmux_tool_loops_stopped_total", {"reason": "time"})
        == 1
    )


async def test_a_long_result_is_cut_with_a_note_for_the_model_and_the_store(
    tmp_path: Path,
) -> None:
    """A 10,000-character result under a limit of 500: the model's next request and the tool
    row both hold its first 500 characters and the note; a result of exactly 500 is whole."""
    long = "".join(f"{i:04d}|" for i in range(2000))  # 10,000 characters, each place distinct
    exact = "y" * 500
    results = {"long": long, "exact": exact}
    box = RecordingToolBox().add(tool("docs__read", lambda a: results[a["text"]], read_only=True))
    async with open_fake_model() as fake:
        fake.script(
            calls(("docs__read", {"text": "long"}), ("docs__read", {"text": "exact"})),
            ok("read"),
        )
        async with session(
            tmp_path, fake, toolbox=box, agent_extra="max_tool_result_chars = 500"
        ) as world:
            row = await world.admit("read the docs")
            await world.delivered(1)
            (step,) = await world.store.read(TurnSteps(row.id))
    assert len(long) == 10_000
    cut = long[:500] + "\n[cut: the result had 10000 characters, 500 kept]"
    assert world.platform.delivered[0].reply == "read"
    assert fake.requests[1].tool_results == [("call_1", cut), ("call_2", exact)]
    assert {c.call_id: c.result for c in step.stored} == {"call_1": cut, "call_2": exact}
