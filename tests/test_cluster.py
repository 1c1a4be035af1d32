"""Several botmux nodes on one PostgreSQL database, as real processes.

- The run: 3 nodes, 100 conversations x 10 messages through the peer API, each message sent
  to a different node than the one before; mid-run one node is SIGKILLed and another frozen
  (SIGSTOP) for longer than the lease. Every message is answered exactly once, in order per
  conversation, and no two turns of one conversation ever overlap in the model (the fake
  model records each conversation's concurrency across all nodes).
- Fencing: a node frozen past its lease right after its model call, then resumed, cannot
  commit its late answer; the new owner's answer is the one stored and returned.
- Control commands sent to a node that does not run the conversation reach the one that does.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from tests.fakes.openai_server import FakeModel, Hold, Ok, Sleep, open_fake_model
from tests.harness import GatewayProcess, cluster_node, pg_fetch

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180), pytest.mark.process]

LEASE_S = 2.0
HEARTBEAT_S = 0.4
CONVERSATIONS = 100
MESSAGES = 10


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.session_of = lambda r: r.last_user.split("#")[0]
        yield fake


def node(tmp_path: Path, url: str, model_url: str, name: str) -> GatewayProcess:
    return cluster_node(
        tmp_path,
        url,
        model_url,
        name,
        lease_s=LEASE_S,
        heartbeat_s=HEARTBEAT_S,
        extra="[gateway]\nmax_concurrent_turns = 200\n",
    )


fetch = pg_fetch


def overlap_report(model: FakeModel, killed_at: float) -> str:
    """Which model calls of one conversation overlapped, from which nodes, and when."""
    lines = [
        f"{len(model.overlaps)} overlapping model calls (monotonic times; kill at wall {killed_at:.2f}):"
    ]
    for late, running in model.overlaps[:10]:
        lines.append(
            f"  {late.last_user} from {late.api_key} at {late.started:.3f} while "
            + ", ".join(f"{r.last_user} from {r.api_key} since {r.started:.3f}" for r in running)
        )
    return "\n".join(lines)


async def test_three_nodes_survive_a_kill_and_a_freeze(
    tmp_path: Path, postgres_url: str, model: FakeModel
) -> None:
    model.default = lambda r: Sleep(0.03, Ok(f"echo: {r.last_user}"))
    nodes = [node(tmp_path, postgres_url, model.base_url, f"n{i}") for i in range(3)]
    for n in nodes:
        await n.start()
    by_name = {n.log_path.stem: n for n in nodes}
    # Chosen at the kill: the node holding the most conversations is killed, and the busier
    # of the others frozen (on a slow machine a node may hold nothing at that moment).
    killed, frozen = nodes[0], nodes[1]
    replies: dict[str, list[str]] = defaultdict(list)
    retries = 0
    answered = 0
    progress = anyio.Event()  # set when 30% are answered
    later = anyio.Event()  # 60%
    killed_at = 0.0  # wall clock: compared with the rows' created_at
    orphaned: set[str] = set()  # conversations the killed node held at the kill

    async def send(http: aiohttp.ClientSession, conversation: int, n: int) -> None:
        nonlocal retries, answered
        key = f"c{conversation}-m{n}"
        text = f"c{conversation}#{n}"
        target = (conversation + n) % 3
        while True:
            gw = nodes[target]
            try:
                async with http.post(
                    f"{gw.url}/api/sessions/c{conversation}/chat",
                    json={"message": text},
                    headers={"Idempotency-Key": key},
                    timeout=aiohttp.ClientTimeout(total=4 * LEASE_S),
                ) as r:
                    if r.status == 200:
                        body = await r.json()
                        break
            except (aiohttp.ClientError, TimeoutError):
                pass
            # The node died or froze: retry, with the same key, on the next node (a client
            # behind a load balancer does the same).
            retries += 1
            target = (target + 1) % 3
        replies[f"c{conversation}"].append(body["message"]["content"])
        answered += 1
        if answered >= CONVERSATIONS * MESSAGES * 0.3:
            progress.set()
        if answered >= CONVERSATIONS * MESSAGES * 0.6:
            later.set()

    async def conversation(http: aiohttp.ClientSession, c: int) -> None:
        for n in range(MESSAGES):  # each conversation's messages in order, one at a time
            await send(http, c, n)

    async def chaos() -> None:
        nonlocal killed_at, killed, frozen
        await progress.wait()
        held = await fetch(
            postgres_url,
            "SELECT owner, count(*) AS n FROM conversations WHERE owner IS NOT NULL"
            " GROUP BY owner ORDER BY n DESC, owner",
        )
        busiest = [by_name[r["owner"]] for r in held]
        busiest += [n for n in nodes if n not in busiest]
        killed, frozen = busiest[0], busiest[1]
        killed_at = time.time()
        await killed.kill()  # SIGKILL
        name = killed.log_path.stem
        orphaned.update(
            r["key"]
            for r in await fetch(
                postgres_url, f"SELECT key FROM conversations WHERE owner = '{name}'"
            )
        )
        await later.wait()
        frozen.signal(signal.SIGSTOP)
        await anyio.sleep(LEASE_S * 1.75)  # longer than the lease
        frozen.signal(signal.SIGCONT)

    started = time.monotonic()
    try:
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
            tg.start_soon(chaos)
            for c in range(CONVERSATIONS):
                tg.start_soon(conversation, http, c)
        elapsed = time.monotonic() - started
        user_rows = await fetch(
            postgres_url,
            "SELECT conversation, content, state, id FROM messages WHERE role = 'user' ORDER BY id",
        )
        assistant_rows = await fetch(
            postgres_url,
            "SELECT u.content AS question, a.content AS answer, a.failure, a.conversation,"
            " a.created_at FROM messages a JOIN messages u ON u.id = a.user_row_id"
            " WHERE a.role = 'assistant'",
        )
    finally:
        frozen.signal(signal.SIGCONT)
        survivors = [n for n in nodes if n is not killed]
        for n in survivors:
            n.signal(signal.SIGTERM)
        codes = []
        for n in survivors:
            with anyio.fail_after(20):
                codes.append(await n.wait())
        await killed.kill()  # if the run failed before the kill
    # The survivors lived through it all and stopped cleanly at SIGTERM.
    for n, code in zip(survivors, codes, strict=True):
        assert code == 0, f"{n.log_path.name} exited {code}:\n{n.log_tail()}"

    # Every message answered exactly once, and the client saw that answer, in order.
    for c in range(CONVERSATIONS):
        assert replies[f"c{c}"] == [f"echo: c{c}#{n}" for n in range(MESSAGES)]
    assert len(user_rows) == CONVERSATIONS * MESSAGES
    assert {r["state"] for r in user_rows} == {"answered"}
    assert len(assistant_rows) == CONVERSATIONS * MESSAGES
    assert sorted(r["question"] for r in assistant_rows) == sorted(r["content"] for r in user_rows)
    assert all(
        r["failure"] is None and r["answer"] == f"echo: {r['question']}" for r in assistant_rows
    )
    # Order per conversation: admission order (ids) is the order the client sent, and the
    # model saw each conversation's messages in that order (a turn re-run after a takeover
    # repeats its message; nothing ran ahead of it).
    by_conversation: dict[str, list[int]] = defaultdict(list)
    for r in user_rows:
        by_conversation[r["conversation"]].append(int(r["content"].split("#")[1]))
    assert all(seq == list(range(MESSAGES)) for seq in by_conversation.values())
    seen: dict[str, list[tuple[int, str, float]]] = defaultdict(list)
    for request in model.requests:
        c, n = request.last_user.split("#")
        if not seen[c] or seen[c][-1][0] != int(n):
            seen[c].append((int(n), request.api_key.removeprefix("sk-test-node-"), request.started))
    disorder = {
        c: calls for c, calls in seen.items() if [n for n, _, _ in calls] != list(range(MESSAGES))
    }
    assert not disorder, f"model calls out of order (message, node, monotonic time): {disorder}"
    # No two turns of one conversation overlapped, on any node.
    assert not model.overlaps, overlap_report(model, killed_at)
    assert len(model.max_concurrency) == CONVERSATIONS
    # The survivors took the dead node's conversations over.
    assert "took over conversations" in "".join(n.log() for n in survivors)
    # Takeover time: from the kill to the first answer the new owner committed for each
    # conversation the dead node held.
    takeover: dict[str, float] = {}
    for r in assistant_rows:
        if r["conversation"] in orphaned and r["created_at"] > killed_at:
            seconds = r["created_at"] - killed_at
            takeover[r["conversation"]] = min(takeover.get(r["conversation"], seconds), seconds)
    assert orphaned and len(takeover) == len(orphaned)
    rerun = len(model.requests) - CONVERSATIONS * MESSAGES
    report = {
        "nodes": 3,
        "messages": CONVERSATIONS * MESSAGES,
        "seconds": round(elapsed, 1),
        "client_retries": retries,
        "model_calls_repeated_after_takeover": rerun,
        "lease_s": LEASE_S,
        "conversations_taken_over": len(takeover),
        "takeover_s_median": round(statistics.median(takeover.values()), 2),
        "takeover_s_max": round(max(takeover.values()), 2),
    }
    print("\ncluster run:", json.dumps(report))
    out = os.environ.get("BOTMUX_CLUSTER_REPORT")
    if out:
        await anyio.Path(out).write_text(json.dumps(report, indent=2) + "\n")


async def test_a_node_frozen_past_its_lease_cannot_commit_its_late_answer(
    tmp_path: Path, postgres_url: str, model: FakeModel
) -> None:
    a = node(tmp_path, postgres_url, model.base_url, "a")
    b = node(tmp_path, postgres_url, model.base_url, "b")
    model.script(Ok("late answer from a"), Ok("answer from b"))
    # a freezes itself right after the model answered, before its answer commit.
    await a.start(env={"BOTMUX_FAILPOINT": "after_model_call:stop"})
    await b.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with anyio.create_task_group() as tg:
                reply: dict[str, object] = {}

                async def ask() -> None:
                    async with http.post(
                        f"{a.url}/api/sessions/s/chat",
                        json={"message": "s#0"},
                        headers={"Idempotency-Key": "k1"},
                        timeout=aiohttp.ClientTimeout(total=30),
                    ) as r:
                        reply.update(status=r.status, body=await r.json())

                tg.start_soon(ask)
                with anyio.fail_after(20):
                    await model.wait_for_completed(2)  # b took over and asked the model
                    while not await fetch(  # noqa: ASYNC110 - another process: poll
                        postgres_url, "SELECT 1 FROM messages WHERE role = 'assistant'"
                    ):
                        await anyio.sleep(0.05)
                a.signal(signal.SIGCONT)  # a wakes up with its late answer
            rows = await fetch(
                postgres_url,
                "SELECT role, content, state FROM messages ORDER BY id",
            )
            owner = await fetch(postgres_url, "SELECT owner, fence FROM conversations")
        with anyio.fail_after(10):
            while "lease lost" not in a.log():  # noqa: ASYNC110 - another process: poll
                await anyio.sleep(0.05)
    finally:
        a.signal(signal.SIGCONT)
        for gw in (a, b):
            gw.signal(signal.SIGTERM)
        for gw in (a, b):
            with anyio.fail_after(20):
                await gw.wait()
    assert [(r["role"], r["content"], r["state"]) for r in rows] == [
        ("user", "s#0", "answered"),
        ("assistant", "answer from b", "final"),
    ]
    assert reply["status"] == 200
    assert reply["body"]["message"]["content"] == "answer from b"  # type: ignore[index]
    assert owner[0]["fence"] == 2  # claimed by a, then by b
    assert "lease lost: answer discarded" in a.log()
    assert "late answer from a" not in a.log() + b.log()


async def test_stop_and_new_reach_the_node_running_the_conversation(
    tmp_path: Path, postgres_url: str, model: FakeModel
) -> None:
    a = node(tmp_path, postgres_url, model.base_url, "a")
    b = node(tmp_path, postgres_url, model.base_url, "b")
    await a.start()
    await b.start()

    async def chat(http: aiohttp.ClientSession, gw: GatewayProcess, text: str) -> str:
        async with http.post(f"{gw.url}/api/sessions/s/chat", json={"message": text}) as r:
            assert r.status == 200
            return str((await r.json())["message"]["content"])

    try:
        async with aiohttp.ClientSession() as http:
            assert await chat(http, a, "s#0") == "echo: s#0"  # a holds peer:s now
            model.script(Hold())
            async with anyio.create_task_group() as tg:
                stopped: list[str] = []

                async def held_turn() -> None:
                    stopped.append(await chat(http, a, "s#1"))

                tg.start_soon(held_turn)
                with anyio.fail_after(10):
                    await model.wait_for_requests(2)
                # /stop arrives at b, which does not run the conversation: a stops the turn.
                assert await chat(http, b, "/stop") == "Stopping the current reply."
            assert stopped == ["The turn was stopped before it answered."]
            # /new at b: a forgets its cached history, so the next turn has none.
            assert await chat(http, b, "/new") == (
                "Started a fresh context: earlier messages no longer count."
            )
            assert await chat(http, a, "s#2") == "echo: s#2"
            assert await chat(http, b, "/stop") == "Nothing is running."
    finally:
        for gw in (a, b):
            gw.signal(signal.SIGTERM)
        for gw in (a, b):
            with anyio.fail_after(20):
                await gw.wait()
    last = model.requests[-1]
    assert [m["content"] for m in last.messages if m["role"] != "system"] == ["s#2"]
    rows = await fetch(postgres_url, "SELECT content, state FROM messages WHERE role = 'user'")
    assert [(r["content"], r["state"]) for r in rows] == [
        ("s#0", "answered"),
        ("s#1", "cancelled"),
        ("s#2", "answered"),
    ]


async def test_a_draining_node_hands_queued_work_to_the_others_at_once(
    tmp_path: Path, postgres_url: str, model: FakeModel
) -> None:
    a = node(tmp_path, postgres_url, model.base_url, "a")
    b = node(tmp_path, postgres_url, model.base_url, "b")
    await a.start()
    await b.start()
    answers: dict[str, str] = {}
    seen: list[str] = []

    async def chat(http: aiohttp.ClientSession, session: str, text: str) -> None:
        for gw in (a, b):  # a client retries on the next node when one goes away
            try:
                async with http.post(
                    f"{gw.url}/api/sessions/{session}/chat",
                    json={"message": text},
                    headers={"Idempotency-Key": text},
                ) as r:
                    if r.status == 200:
                        answers[text] = (await r.json())["message"]["content"]
                        return
                    seen.append(f"{text} at {gw.url}: {r.status} {await r.text()}")
            except aiohttp.ClientError as exc:
                seen.append(f"{text} at {gw.url}: {exc!r}")
        raise AssertionError(f"{text} was not answered: {seen}")

    try:
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
            await chat(http, "long", "long#0")
            await chat(http, "short", "short#0")  # a holds both conversations
            model.script(Hold(), model=None)
            tg.start_soon(chat, http, "long", "long#1")  # runs until released
            with anyio.fail_after(10):
                await model.wait_for_requests(3)
            model.script(Sleep(0.3, Ok("short#1 done")))
            tg.start_soon(chat, http, "short", "short#1")
            with anyio.fail_after(10):
                await model.wait_for_requests(4)
            tg.start_soon(chat, http, "short", "short#2")  # queued behind short#1
            with anyio.fail_after(10):
                while not await fetch(  # noqa: ASYNC110 - another process: poll
                    postgres_url, "SELECT 1 FROM messages WHERE content = 'short#2'"
                ):
                    await anyio.sleep(0.02)
            a.signal(signal.SIGTERM)  # a drains: long#1 keeps running, short#2 is not started
            with anyio.fail_after(10):
                while "short#2" not in answers:  # noqa: ASYNC110 - answered by b
                    await anyio.sleep(0.02)
            assert "long#1" not in answers  # a is still draining its long turn
            model.release()
        with anyio.fail_after(20):
            assert await a.wait() == 0
    finally:
        for gw in (a, b):
            if gw.proc is not None and gw.proc.returncode is None:
                gw.signal(signal.SIGTERM)
        with anyio.fail_after(20):
            await b.wait()
    assert answers["short#1"] == "short#1 done"
    assert answers["short#2"] == "echo: short#2"
    assert answers["long#1"] == "echo: long#1"
    assert "turn_completed  conversation=peer:short" in b.log()  # short#2 ran on b
    rows = await fetch(postgres_url, "SELECT state FROM messages WHERE role = 'user'")
    assert {r["state"] for r in rows} == {"answered"} and len(rows) == 5
