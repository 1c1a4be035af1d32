"""SQLite rows as the store's types: the columns a message is read with, and the two mappings.

Apart from :mod:`gateway.store.sqlite` so the store's module stays the store.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from gateway.messages import Inbound, MessageState, OutboxChunk, StoredMessage
from gateway.store._attachments import REF_COLUMNS

MSG_COLUMNS = (
    "id, conversation, role, content, state, created_at, platform, platform_message_id,"
    " user_row_id, failure, reply_target, prompt_tokens, completion_tokens"
)
REFS_OF_ROW = f"SELECT user_row_id, position, {REF_COLUMNS} FROM attachments WHERE user_row_id = ?"


def row_to_message(r: sqlite3.Row | tuple[Any, ...]) -> StoredMessage:
    return StoredMessage(
        id=r[0],
        conversation=r[1],
        role=r[2],
        content=r[3],
        state=r[4],
        created_at=r[5],
        platform=r[6],
        platform_message_id=r[7],
        user_row_id=r[8],
        failure=r[9],
        reply_target=r[10],
        prompt_tokens=r[11],
        completion_tokens=r[12],
    )


def admitted(m: Inbound, row_id: int, now: float) -> StoredMessage:
    """A user row just inserted, as reading it back would give it."""
    return StoredMessage(
        id=row_id,
        conversation=m.conversation,
        role="user",
        content=m.text,
        state=str(MessageState.PENDING),
        created_at=now,
        platform=m.platform,
        platform_message_id=m.platform_message_id,
        reply_target=m.reply_target,
    )


def row_to_chunk(r: sqlite3.Row | tuple[Any, ...]) -> OutboxChunk:
    return OutboxChunk(
        id=r[0],
        conversation=r[1],
        platform=r[2],
        message_id=r[3],
        user_row_id=r[4],
        seq=r[5],
        text=r[6],
        created_at=r[7],
        reply_target=r[8],
        state=r[9],
    )
