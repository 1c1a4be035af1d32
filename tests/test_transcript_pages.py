"""Conversations read a page at a time (issue 37, review 2026-12-05 L-8): the transcript route
(``limit``, ``before``, ``next``), A2A ``ListTasks`` (``pageSize``, ``pageToken``) and the
previous turn of a ``/v1/responses`` id read only the rows they show, on both stores; paging
through a long conversation gives every row once, in order; bad paging input is a 400.

The store's reads run on SQLite and PostgreSQL (``open_store``); the routes on a gateway whose
SQLite store was filled beforehand, driven by aiohttp and the a2a-sdk client.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from a2a.types import a2a_pb2 as pb

from gateway.messages import Inbound, TurnResult
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    PreviousTurn,
    TaskPage,
    Transcript,
    TranscriptPage,
    open_sqlite_store,
)
from gateway.store.base import Store
from gateway.store.transcripts import task_page_sqlite, transcript_page_sqlite
from tests.harness import make_config, running_gateway
from tests.support.a2a import A2A, a2a_client
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio

TURNS = 125  # 250 rows: a user row and its answer each


async def fill(store: Store, conversation: str, turns: int, pmid: str = "") -> None:
    """``turns`` answered turns in ``conversation``: user rows ``question <n>`` with platform
    message ids ``<pmid><n>`` (default ``<conversation>/<n>``), answered ``answer <n>``."""
    platform = conversation.partition(":")[0]
    for n in range(turns):
        admitted = await store.submit(
            AdmitRow(
                Inbound(platform, conversation, f"{pmid or conversation + '/'}{n}", f"question {n}")
            )
        )
        reply = TurnResult(reply=f"answer {n}")
        await store.submit(AnswerTurn(admitted.row, reply, (reply.reply,)))


async def back_to_front(store: Store, conversation: str, limit: int) -> list[list[int]]:
    """Every page of the transcript, newest page first, each as its row ids."""
    pages: list[list[int]] = []
    before: int | None = None
    while True:
        page = await store.read(TranscriptPage(conversation, limit, before))
        assert len(page.rows) <= limit
        pages.append([r.id for r in page.rows])
        if not page.more:
            return pages
        before = page.rows[0].id


# -- the store, both backends ----------------------------------------------------------------


async def test_paging_a_250_row_transcript_gives_every_row_once_in_order(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        await fill(store, "peer:long", TURNS)
        await fill(store, "peer:other", 3)  # another conversation's rows are never in a page
        every = [r.id for r in await store.read(Transcript("peer:long"))]
        pages = await back_to_front(store, "peer:long", 40)
        whole = await store.read(TranscriptPage("peer:long", 1000))
        small = await store.read(TranscriptPage("peer:other", 100))
        previous = {
            r.id: await store.read(PreviousTurn("peer:long", r.id))
            for r in await store.read(Transcript("peer:long"))
            if r.role == "user"
        }
    assert len(every) == 2 * TURNS
    assert [len(p) for p in pages] == [40] * 6 + [10]
    assert [i for page in reversed(pages) for i in page] == every  # once each, oldest first
    assert [r.id for r in whole.rows] == every and not whole.more
    assert [r.content for r in small.rows] == [
        text for n in range(3) for text in (f"question {n}", f"answer {n}")
    ]
    users = every[::2]
    assert previous == {row: (users[n - 1] if n else None) for n, row in enumerate(users)}


async def test_a_task_page_holds_its_tasks_newest_first_and_only_their_rows(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        await fill(store, "a2a:ctx", 5, pmid="abc:t")  # the token's tasks
        await fill(store, "a2a:ctx", 2, pmid="zzz:t")  # another token's
        pending = await store.submit(AdmitRow(Inbound("a2a", "a2a:ctx", "abc:t9", "waits")))
        first = await store.read(TaskPage("a2a:ctx", "abc:", 2))
        rest = await store.read(TaskPage("a2a:ctx", "abc:", 10, before=first.tasks[-1].id))
        answered = await store.read(TaskPage("a2a:ctx", "abc:", 10, states=("answered",)))
        waiting = await store.read(TaskPage("a2a:ctx", "abc:", 10, states=("pending",)))
    assert [t.content for t in first.tasks] == ["waits", "question 4"]
    assert first.more and first.total == 6
    # The rows of the page's turns only: question 4's answer.
    assert [(r.role, r.content) for r in first.related] == [("assistant", "answer 4")]
    assert [t.content for t in rest.tasks] == [f"question {n}" for n in (3, 2, 1, 0)]
    assert not rest.more
    assert [t.content for t in answered.tasks] == [f"question {n}" for n in (4, 3, 2, 1, 0)]
    assert answered.total == 5
    assert [t.id for t in waiting.tasks] == [pending.row.id] and waiting.total == 1


async def test_a_page_reads_only_its_rows_from_the_database(tmp_path: Path) -> None:
    """Bounded, not merely sliced: every row SQLite hands back passes the row factory, so
    counting them counts what a read loaded. The whole transcript loads every row."""
    path = str(tmp_path / "s.db")
    async with open_sqlite_store(path) as store:
        await fill(store, "peer:long", 500)
        await fill(store, "a2a:ctx", 500, pmid="-:t")
    loaded = 0

    def counted(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> tuple[Any, ...]:
        nonlocal loaded
        loaded += 1
        return row

    db = sqlite3.connect(path)
    db.row_factory = counted
    try:
        page = transcript_page_sqlite(db, TranscriptPage("peer:long", 10))
        page_loaded, loaded = loaded, 0
        tasks = task_page_sqlite(db, TaskPage("a2a:ctx", "-:", 10))
        tasks_loaded, loaded = loaded, 0
        db.execute("SELECT * FROM messages WHERE conversation = 'peer:long'").fetchall()
        whole_loaded = loaded
    finally:
        db.close()
    assert [r.content for r in page.rows] == [
        text for n in range(495, 500) for text in (f"question {n}", f"answer {n}")
    ]
    assert len(tasks.tasks) == 10 and tasks.total == 500 and len(tasks.related) == 10
    assert page_loaded <= 11  # the page and one row to know whether more are left
    assert tasks_loaded <= 11 + 10 + 1  # the tasks (and one), their answers, the count
    assert whole_loaded == 1000


# -- the routes ------------------------------------------------------------------------------


async def filled(path: Path, conversation: str, turns: int, pmid: str = "") -> list[int]:
    """Fill the store at ``path`` before the gateway opens it: the conversation's row ids."""
    async with open_sqlite_store(str(path)) as store:
        await fill(store, conversation, turns, pmid)
        return [r.id for r in await store.read(Transcript(conversation))]


@pytest.mark.gateway
async def test_the_transcript_route_pages_through_250_rows(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    every = await filled(db, "peer:long", TURNS)
    async with (
        running_gateway(make_config(db, None)) as (_, url),
        aiohttp.ClientSession() as http,
    ):

        async def get(query: str, session: str = "long") -> tuple[int, dict[str, Any]]:
            async with http.get(f"{url}/api/sessions/{session}/messages{query}") as r:
                return r.status, await r.json()

        status, default = await get("")
        pages: list[list[dict[str, Any]]] = []
        cursor = ""
        while True:
            status, body = await get(f"?limit=40{cursor}")
            assert status == 200, body
            pages.append(body["messages"])
            if body["next"] is None:
                break
            cursor = f"&before={body['next']}"
        bad = {q: await get(q) for q in BAD_QUERIES}
        _, short = await get("", session="new")
    # Without parameters: the newest 100 rows, oldest first, and where the older ones start.
    assert [m["id"] for m in default["messages"]] == every[-100:]
    assert default["next"] == every[-100]
    rows = [m for page in reversed(pages) for m in page]
    assert [m["id"] for m in rows] == every  # every row once, in order
    assert [m["content"] for m in rows[:4]] == ["question 0", "answer 0", "question 1", "answer 1"]
    assert [len(p) for p in pages] == [40] * 6 + [10]
    assert short == {"messages": [], "next": None}
    for query, (status, body) in bad.items():
        assert status == 400, (query, body)
        assert body["error"]["param"] == BAD_QUERIES[query], (query, body)
        assert BAD_QUERIES[query] + " must be" in body["error"]["message"], (query, body)


#: Paging input refused, and the parameter the error names.
BAD_QUERIES = {
    "?limit=0": "limit",
    "?limit=1001": "limit",
    "?limit=ten": "limit",
    "?limit=-5": "limit",
    "?limit=": "limit",
    "?before=0": "before",
    "?before=abc": "before",
    "?before=1.5": "before",
    "?before=99999999999999999999": "before",
}


@pytest.mark.gateway
async def test_list_tasks_pages_through_a_250_row_context(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    every = await filled(db, "a2a:long", TURNS, pmid="-:t")
    tasks: list[pb.Task] = []
    sizes: list[int] = []
    async with (
        running_gateway(make_config(db, None, extra=A2A)) as (_, url),
        a2a_client(url) as client,
    ):
        token = ""
        while True:
            page = await client.list_tasks(
                pb.ListTasksRequest(context_id="long", page_size=40, page_token=token)
            )
            assert page.total_size == TURNS
            tasks.extend(page.tasks)
            sizes.append(len(page.tasks))
            if not page.next_page_token:
                break
            token = page.next_page_token
    assert sizes == [40, 40, 40, 5]
    assert [int(t.id) for t in tasks] == every[::2][::-1]  # each task once, newest first
    assert {t.status.state for t in tasks} == {pb.TASK_STATE_COMPLETED}
    assert [t.history[0].parts[0].text for t in tasks[:2]] == ["question 124", "question 123"]
    assert ["".join(p.text for a in t.artifacts for p in a.parts) for t in tasks[-2:]] == [
        "answer 1",
        "answer 0",
    ]
