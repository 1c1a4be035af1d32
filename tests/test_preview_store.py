"""A chat preview's message recorded in the store (SPEC 8), on both backends: written before
its first edit, read back by the turn re-run after a crash; a later record replaces it."""

from __future__ import annotations

import anyio
import pytest

from gateway.messages import Inbound
from gateway.store import (
    AdmitRow,
    CancelTurn,
    DeleteConversation,
    PreviewOf,
    RecordPreview,
)
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


async def test_a_preview_message_is_recorded_and_survives_a_reopen(open_store: Opener) -> None:
    async with open_store() as store:
        rows = []
        for i in range(3):
            inbound = Inbound("telegram", f"telegram:{i + 1}", f"{i + 1}:1", f"q{i}")
            rows.append((await store.submit(AdmitRow(inbound))).row)
        async with anyio.create_task_group() as tg:  # at once: one batch of records
            for row in rows[:2]:
                tg.start_soon(store.submit, RecordPreview(row.id, f"{row.id}00"))
        await store.submit(RecordPreview(rows[1].id, "replaced"))
    async with open_store() as store:
        found = [await store.read(PreviewOf(row.id)) for row in rows]
    assert found == [f"{rows[0].id}00", "replaced", None]


async def test_deleting_a_conversation_removes_its_preview_record(open_store: Opener) -> None:
    async with open_store() as store:
        kept = (await store.submit(AdmitRow(Inbound("telegram", "telegram:1", "1:1", "q")))).row
        gone = (await store.submit(AdmitRow(Inbound("telegram", "telegram:2", "2:1", "q")))).row
        await store.submit(RecordPreview(kept.id, "11"))
        await store.submit(RecordPreview(gone.id, "21"))
        await store.submit(CancelTurn(gone.id))
        assert await store.submit(DeleteConversation("telegram:2")) == 1
        assert [await store.read(PreviewOf(kept.id)), await store.read(PreviewOf(gone.id))] == [
            "11",
            None,
        ]
