"""The shared harness for "a real SessionActor on a real store": one actor (``session``) or a
router of them (``router_world``), on an SQLite store in the test's directory, replying
through a recording outlet (:class:`Platform`), with the real agent against the loopback fake
model or a stand-in runner.

Only the platform is a stand-in: the store, the actor, its queue and plan, the agent and its
failure policy are the real ones.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from agent import Agent, ClientPool
from agent.tool_loop import AgentTools
from gateway.approvals import Approvals
from gateway.config_tools import ResolvedProfile
from gateway.errors import PlatformError
from gateway.events import Event
from gateway.mailbox import TurnAdmitted
from gateway.messages import AttachmentRef, Inbound, StoredMessage, TurnOutcome
from gateway.ports import ApprovalRequest, Asker, ToolBox, TurnRunner, Watch
from gateway.queue import QueuePolicy
from gateway.router import Router
from gateway.session import SessionActor, SessionDeps
from gateway.steps import Decisions, StoredSteps
from gateway.store import AdmitRow, Store, Transcript, open_sqlite_store
from tests.fakes.openai_server import FakeModel
from tests.harness import FAST, make_config

KEY = "peer:s"


@dataclass
class Platform:
    """The outlet of a platform that takes whatever it is handed (the courier's side)."""

    platform: str = "peer"
    delivered: list[TurnOutcome] = field(default_factory=list)
    typing: int = 0
    arrived: anyio.Event = field(default_factory=anyio.Event)
    asking: bool = False  # approvals can be asked here (SPEC 15): ``asked`` records them
    asked: list[ApprovalRequest] = field(default_factory=list)
    was_asked: anyio.Event = field(default_factory=anyio.Event)

    def render(self, text: str) -> list[str]:
        return [text]

    def delivered_as(self, row: StoredMessage) -> None:
        return None

    async def deliver(self, outcome: TurnOutcome) -> None:
        self.delivered.append(outcome)
        self.arrived.set()

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        self.typing += 1
        yield

    def watching(self, row: StoredMessage) -> Watch | None:
        return None

    def asker(self, row: StoredMessage) -> Asker | None:
        return self if self.asking else None

    async def ask(self, request: ApprovalRequest) -> None:
        self.asked.append(request)
        self.was_asked.set()

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        raise PlatformError(f"no bytes for {ref.name}", status=404)

    async def wait_delivered(self, count: int) -> None:
        """Until ``count`` outcomes were handed over (at most 10 s)."""
        with anyio.fail_after(10):
            while len(self.delivered) < count:
                self.arrived = anyio.Event()
                await self.arrived.wait()


class Admitter:
    """Stores user rows of one conversation with platform ids m1, m2, ..."""

    def __init__(self, store: Store, key: str = KEY) -> None:
        self.store = store
        self.key = key
        self._number = itertools.count(1)

    async def stored(self, text: str, key: str | None = None) -> StoredMessage:
        inbound = Inbound("peer", key or self.key, f"m{next(self._number)}", text)
        return (await self.store.submit(AdmitRow(inbound))).row


@dataclass
class Session:
    """One running actor and what the test looks at."""

    actor: SessionActor
    platform: Platform
    events: list[Event]
    store: Store
    admitter: Admitter
    queues: dict[str, QueuePolicy]
    ended: anyio.Event  # the actor's run returned
    approvals: Approvals  # a person's answer to a tool call's approval

    async def decide(self, request: ApprovalRequest, approve: bool, user: str = "") -> str:
        """Answer an approval as its turn's owner (the peer client)."""
        decided = await self.approvals.decide("peer", request.call_row, user, approve, owner=True)
        return decided.text

    async def admit(self, text: str) -> StoredMessage:
        """Store a row and hand it to the actor, as the intake does."""
        row = await self.admitter.stored(text)
        await self.actor.send(TurnAdmitted(row))
        return row

    async def rows(self) -> list[tuple[str, str, str, str | None]]:
        """The transcript as (role, content, state, failure)."""
        found = await self.store.read(Transcript(self.actor.key))
        return [(r.role, r.content, r.state, r.failure) for r in found]

    async def delivered(self, count: int) -> None:
        await self.platform.wait_delivered(count)


@asynccontextmanager
async def session(
    tmp_path: Path,
    model: FakeModel | TurnRunner,
    *,
    policy: QueuePolicy | None = None,
    preload: tuple[str, ...] = (),
    platform: Platform | None = None,
    holds: Callable[[str], Awaitable[bool]] | None = None,
    model_extra: str = FAST,
    toolbox: ToolBox | None = None,
    tools: tuple[str, ...] = ("*",),
    agent_extra: str = "",
    approval_timeout_s: float = 600.0,
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[Session]:
    """An actor of ``peer:s`` on a fresh store. ``model``: the fake model (the real agent
    calls it) or a stand-in runner. ``preload``: rows admitted before the actor starts (as
    after a restart); ``policy``: the queue mode. ``toolbox``: the tools the agent may call
    (its profile offers ``tools``), their steps stored in the same store (SPEC 15). ``clock``:
    the agent's monotonic clock (its tool loop's ``max_turn_s``, its policy's benches)."""
    clients = ClientPool()
    platform = platform or Platform()
    events: list[Event] = []
    queues = {"peer": policy} if policy is not None else {}
    decisions = Decisions()
    try:
        async with open_sqlite_store(str(tmp_path / "b.db")) as store:
            approvals = Approvals(store, decisions, approvers=tuple, observe=events.append)
            runner: TurnRunner
            if isinstance(model, FakeModel):
                extra = f"\n[agent]\n{agent_extra}\n" if agent_extra else ""
                config = make_config(
                    tmp_path / "b.db", model.base_url, model_extra=model_extra, extra=extra
                )
                agent_tools = None
                if toolbox is not None:
                    steps = StoredSteps(store, decisions, wall=wall, poll_s=0.05)
                    agent_tools = AgentTools(toolbox, steps, lambda: approval_timeout_s, wall)
                resolved = ResolvedProfile(
                    "test", config.agent.system_prompt, tools, None, config.model
                )
                runner = Agent(
                    config.model,
                    config.agent,
                    clients,
                    # The tool loop's events with the actor's (the model's decisions are not).
                    observe=events.append if toolbox is not None else lambda event: None,
                    profile=lambda key: resolved,
                    tools=agent_tools,
                    clock=clock,
                )
            else:
                runner = model
            admitter = Admitter(store)
            for text in preload:
                await admitter.stored(text)
            deps = SessionDeps(
                store=store,
                runner=runner,
                outlets={"peer": platform},
                limiter=anyio.CapacityLimiter(4),
                history_messages=20,
                mailbox_size=8,
                observe=events.append,
                holds=holds,
                queues=queues,
            )
            actor = SessionActor(KEY, deps)
            ended = anyio.Event()

            async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await actor.run(task_status=task_status)
                ended.set()

            async with anyio.create_task_group() as tg:
                await tg.start(run)
                try:
                    yield Session(
                        actor, platform, events, store, admitter, queues, ended, approvals
                    )
                finally:
                    actor.close()
    finally:
        await clients.aclose()


@dataclass
class RouterWorld:
    """A router of actors on one store, each conversation's rows admitted through it."""

    router: Router
    store: Store
    platform: Platform
    admitter: Admitter

    async def admit(self, key: str, text: str) -> StoredMessage:
        row = await self.admitter.stored(text, key)
        await self.router.deliver(row)
        return row


@asynccontextmanager
async def router_world(
    tmp_path: Path,
    runner: TurnRunner,
    *,
    mailbox_size: int = 4,
    outlets: Mapping[str, Platform] | None = None,
) -> AsyncIterator[RouterWorld]:
    """A router spawning real actors (a stand-in ``runner`` for the model)."""
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        platform = Platform()
        deps = SessionDeps(
            store=store,
            runner=runner,
            outlets=outlets or {"peer": platform},
            limiter=anyio.CapacityLimiter(8),
            history_messages=20,
            mailbox_size=mailbox_size,
        )
        router = Router(lambda key: SessionActor(key, deps), idle_s=3600, clock=time.monotonic)
        async with anyio.create_task_group() as tg:
            await tg.start(router.run)
            try:
                yield RouterWorld(router, store, platform, Admitter(store))
            finally:
                router.close()
