"""Rows as the store's types, for both backends: the columns a message, a chunk and an
attachment reference are read with, the mappings, and SQL written once for both dialects.

A statement both databases run word for word is written with ``?`` placeholders and handed
to PostgreSQL through :func:`numbered`, so the two backends cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from gateway.messages import AttachmentRef, Inbound, MessageState, OutboxChunk, StoredMessage

MSG_COLUMNS = (
    "id, conversation, role, content, state, created_at, platform, platform_message_id,"
    " user_row_id, failure, reply_target, prompt_tokens, completion_tokens, tool_calls,"
    " call_id, tool, sender"
)
CHUNK_COLUMNS = (
    "id, conversation, platform, message_id, user_row_id, seq, text, created_at, reply_target,"
    " state"
)
REF_COLUMNS = "kind, name, content_type, size, source, sha256, text"
#: Pending user rows without their content: what a session actor queues (``PendingHeaders``).
HEADER_COLUMNS = (
    "id, conversation, role, '', state, created_at, platform, platform_message_id,"
    " user_row_id, failure, reply_target"
)


@cache
def numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    count = iter(range(1, sql.count("?") + 1))
    return re.sub(r"\?", lambda _: f"${next(count)}", sql)


#: A row as a driver gives it: a ``sqlite3.Row``, a tuple or an ``asyncpg.Record``.
Row = Any


def to_message(r: Row) -> StoredMessage:
    return StoredMessage(*r)


def to_chunk(r: Row) -> OutboxChunk:
    return OutboxChunk(*r)


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
        sender=m.sender,
    )


def group_refs(rows: Sequence[Row]) -> dict[int, tuple[AttachmentRef, ...]]:
    """Rows of (user_row_id, position, *REF_COLUMNS), by user row, in position order."""
    found: dict[int, list[tuple[int, AttachmentRef]]] = {}
    for r in rows:
        found.setdefault(int(r[0]), []).append((int(r[1]), AttachmentRef(*r[2:])))
    return {row: tuple(ref for _, ref in sorted(refs)) for row, refs in found.items()}


def with_refs(
    messages: list[StoredMessage], refs: dict[int, tuple[AttachmentRef, ...]]
) -> list[StoredMessage]:
    if not refs:
        return messages
    return [dataclasses.replace(m, attachments=refs[m.id]) if m.id in refs else m for m in messages]


def user_rows(messages: Sequence[StoredMessage]) -> list[int]:
    """The ids of the user rows among ``messages``: the ones that may have attachments."""
    return [m.id for m in messages if m.role == "user"]
