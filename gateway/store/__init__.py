"""Durable storage: the store interface, its commands (by concern), the SQLite and PostgreSQL
backends, and the factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.config import Config
from gateway.events import Observe
from gateway.store.admission import (
    AdmitRow,
    BacklogOf,
    ConversationsWithPending,
    PendingCount,
    PendingHeaders,
    PendingRows,
)
from gateway.store.answers import AnswerTurn, CancelTurn, ReplyTo
from gateway.store.attachments import AttachmentBytes, Blob, SaveAttachment
from gateway.store.base import Store, StoreStatistics
from gateway.store.claims import ClaimAnswer, ReleaseAnswer
from gateway.store.commands import Query, Write
from gateway.store.console import RecentFailures, SearchConversations
from gateway.store.conversations import (
    ConversationKnown,
    Conversations,
    DeleteConversation,
    DeleteTurn,
    ExpiredConversations,
    PurgeConversation,
    ResetConversation,
)
from gateway.store.outbox import (
    ExpireChunks,
    ExpireInFlight,
    FailChunk,
    MarkDelivered,
    MarkSending,
    OutboxChunks,
    OutboxPending,
    Undelivered,
)
from gateway.store.pairing import (
    ApprovedUsers,
    ApprovePairing,
    IsApproved,
    PairingCodes,
    RejectPairing,
    RequestPairing,
    RevokeUser,
)
from gateway.store.previews import PreviewOf, RecordPreview
from gateway.store.push_configs import PushConfigsOf, SetPushConfig
from gateway.store.sqlite import SqliteStore, open_sqlite_store
from gateway.store.steps import (
    AwaitingCall,
    CallRow,
    DecideCall,
    FinishCall,
    OpenCall,
    RecordStep,
    StartCall,
    TurnSteps,
)
from gateway.store.summaries import SaveSummary, SummaryOf
from gateway.store.transcripts import (
    History,
    Message,
    PreviousTurn,
    TaskPage,
    ToolRow,
    Transcript,
    TranscriptPage,
)


@asynccontextmanager
async def open_store(
    config: Config,
    *,
    observe: Observe = lambda event: None,
) -> AsyncIterator[Store]:
    """The store the config names: PostgreSQL at ``store.url``, else SQLite at ``store.path``."""
    if config.store.shared:
        from gateway.store.postgres import open_postgres_store  # asyncpg only when used

        async with open_postgres_store(
            config.store.url,
            node=config.cluster.node_id or None,
            lease_s=config.cluster.lease_s,
            pool_size=config.store.pool_size,
            command_timeout_s=config.store.command_timeout_s,
            observe=observe,
        ) as shared:
            yield shared
    else:
        async with open_sqlite_store(
            config.store.path, command_timeout_s=config.store.command_timeout_s, observe=observe
        ) as local:
            yield local


def describe(config: Config) -> str:
    """Where the store is, for messages (a PostgreSQL URL without its password)."""
    if config.store.shared:
        from gateway.store._pg_connection import redact

        return f"PostgreSQL at {redact(config.store.url)}"
    return f"SQLite at {config.store.path}"


__all__ = [
    "AdmitRow",
    "AnswerTurn",
    "ApprovePairing",
    "ApprovedUsers",
    "AttachmentBytes",
    "AwaitingCall",
    "BacklogOf",
    "Blob",
    "CallRow",
    "CancelTurn",
    "ClaimAnswer",
    "ConversationKnown",
    "Conversations",
    "ConversationsWithPending",
    "DecideCall",
    "DeleteConversation",
    "DeleteTurn",
    "ExpireChunks",
    "ExpireInFlight",
    "ExpiredConversations",
    "FailChunk",
    "FinishCall",
    "History",
    "IsApproved",
    "MarkDelivered",
    "MarkSending",
    "Message",
    "OpenCall",
    "OutboxChunks",
    "OutboxPending",
    "PairingCodes",
    "PendingCount",
    "PendingHeaders",
    "PendingRows",
    "PreviewOf",
    "PreviousTurn",
    "PurgeConversation",
    "PushConfigsOf",
    "Query",
    "RecentFailures",
    "RecordPreview",
    "RecordStep",
    "RejectPairing",
    "ReleaseAnswer",
    "ReplyTo",
    "RequestPairing",
    "ResetConversation",
    "RevokeUser",
    "SaveAttachment",
    "SaveSummary",
    "SearchConversations",
    "SetPushConfig",
    "SqliteStore",
    "StartCall",
    "Store",
    "StoreStatistics",
    "SummaryOf",
    "TaskPage",
    "ToolRow",
    "Transcript",
    "TranscriptPage",
    "TurnSteps",
    "Undelivered",
    "Write",
    "describe",
    "open_sqlite_store",
    "open_store",
]
