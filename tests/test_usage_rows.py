"""The model's token counts on the reply rows (both backends), an old store migrated to carry
them, and a turn whose failed attempt was shown to a peer client is not re-run."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.messages import Failure, Inbound, TurnResult, Usage
from gateway.session import Commit, Rerun, TurnState, plan
from gateway.store import AdmitRow, AnswerTurn, ReplyTo, Transcript, open_sqlite_store
from gateway.store._schema import MIGRATIONS
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


def inbound(text: str, pmid: str, conversation: str = "peer:u") -> Inbound:
    return Inbound(platform="peer", conversation=conversation, platform_message_id=pmid, text=text)


async def test_reply_rows_carry_the_models_token_counts(open_store: Opener) -> None:
    failure = Failure("server", True)
    async with open_store() as store:
        rows = [
            (await store.submit(AdmitRow(inbound(f"q{i}", f"m{i}", f"peer:u{i}")))).row
            for i in range(4)
        ]
        results = [
            TurnResult(reply="a0", model="m", usage=Usage(10, 4)),
            TurnResult(reply="a1", model="m", usage=Usage(20, 8)),
            TurnResult(reply="failed", failure=failure),  # no usage: the model counted none
            TurnResult(reply="a3", model="m", usage=Usage(1, 1)),
        ]
        outcomes: dict[int, Any] = {}

        async def answer(i: int) -> None:  # at once: one batch, one statement for them all
            outcomes[i] = await store.submit(
                AnswerTurn(rows[i], results[i], tuple([results[i].reply]))
            )

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(answer, i)
        transcript = [m for i in range(4) for m in await store.read(Transcript(f"peer:u{i}"))]
        reply = await store.read(ReplyTo(rows[1].id))
    assert [outcomes[i].usage for i in range(4)] == [r.usage for r in results]
    replies = [
        (m.content, m.prompt_tokens, m.completion_tokens)
        for m in transcript
        if m.role == "assistant"
    ]
    assert sorted(replies) == [("a0", 10, 4), ("a1", 20, 8), ("a3", 1, 1), ("failed", None, None)]
    assert reply is not None and (reply.prompt_tokens, reply.completion_tokens) == (20, 8)


async def test_an_old_sqlite_store_is_migrated_to_token_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # a store as the previous release left it
        for script in MIGRATIONS[:2]:
            conn.executescript(script)
        conn.execute("PRAGMA user_version = 2")
        conn.execute("INSERT INTO conversations VALUES ('peer:o', 'peer', 0, 0, 0)")
        conn.execute(
            "INSERT INTO messages (id, conversation, role, content, state, platform,"
            " platform_message_id, created_at) VALUES (1, 'peer:o', 'user', 'q', 'answered',"
            " 'peer', 'x', 0)"
        )
        conn.execute(
            "INSERT INTO messages (id, conversation, role, content, state, platform,"
            " user_row_id, created_at) VALUES (2, 'peer:o', 'assistant', 'a', 'final', 'peer', 1, 0)"
        )
    async with open_sqlite_store(str(path)) as store:
        transcript = await store.read(Transcript("peer:o"))
    assert [(m.content, m.prompt_tokens) for m in transcript] == [("q", None), ("a", None)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)


def test_a_failure_after_text_reached_a_peer_is_the_answer_not_a_rerun() -> None:
    transient = Failure("connection", True)
    hidden = TurnResult(reply="x", failure=transient)
    shown = TurnResult(reply="x", failure=transient, shown=True)
    assert plan(TurnState(runs=1, result=hidden)) == Rerun("connection")
    assert plan(TurnState(runs=1, result=shown)) == Commit(shown)
