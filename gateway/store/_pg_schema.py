"""The PostgreSQL schema and its forward migrations.

The same tables as SQLite (``_schema``) with the columns several nodes need: a conversation's
owner and fence (its lease lasts while the owner node's heartbeat in ``nodes`` is fresh) and
its admission sequence (``next_seq``), the node that received a user row (``received_by``, for
the peer API's reply), the nodes, and named leases (the Telegram poller, Discord shards).
``botmux_schema`` holds the version; migrations run under an advisory lock, so nodes starting
together migrate once. Append-only, as in SQLite.
"""

from __future__ import annotations

import asyncpg

from gateway.errors import StoreError

_MIGRATION_LOCK = 0x626F746D7578  # "botmux": one node migrates, the others wait for it

MIGRATIONS: tuple[str, ...] = (
    # 1: conversations with leases, the transcript, the outbox, pairing, nodes, named leases.
    """
    CREATE TABLE conversations (
        key          TEXT PRIMARY KEY,
        platform     TEXT NOT NULL,
        created_at   DOUBLE PRECISION NOT NULL,
        updated_at   DOUBLE PRECISION NOT NULL,
        reset_after  BIGINT NOT NULL DEFAULT 0,
        owner        TEXT,
        fence        BIGINT NOT NULL DEFAULT 0,
        next_seq     BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX conversations_by_owner ON conversations (owner) WHERE owner IS NOT NULL;
    CREATE SEQUENCE messages_id_seq;
    CREATE TABLE messages (
        id                  BIGINT PRIMARY KEY,
        conversation        TEXT NOT NULL REFERENCES conversations(key),
        role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content             TEXT NOT NULL,
        state               TEXT NOT NULL,
        platform            TEXT NOT NULL,
        platform_message_id TEXT,
        user_row_id         BIGINT REFERENCES messages(id),
        failure             TEXT,
        reply_target        TEXT NOT NULL DEFAULT '',
        sender              TEXT NOT NULL DEFAULT '',
        model               TEXT NOT NULL DEFAULT '',
        seq                 BIGINT,
        received_by         TEXT,
        created_at          DOUBLE PRECISION NOT NULL,
        UNIQUE (platform, platform_message_id)
    );
    CREATE INDEX messages_by_conversation ON messages (conversation, id);
    CREATE INDEX messages_pending ON messages (conversation, seq) WHERE state = 'pending';
    CREATE INDEX messages_by_user_row ON messages (user_row_id) WHERE user_row_id IS NOT NULL;
    CREATE SEQUENCE outbox_id_seq;
    CREATE TABLE outbox (
        id                  BIGINT PRIMARY KEY,
        conversation        TEXT NOT NULL,
        platform            TEXT NOT NULL,
        message_id          BIGINT NOT NULL REFERENCES messages(id),
        user_row_id         BIGINT NOT NULL,
        seq                 INTEGER NOT NULL,
        text                TEXT NOT NULL,
        reply_target        TEXT NOT NULL DEFAULT '',
        state               TEXT NOT NULL DEFAULT 'pending',
        platform_message_id TEXT,
        created_at          DOUBLE PRECISION NOT NULL,
        delivered_at        DOUBLE PRECISION
    );
    CREATE INDEX outbox_pending ON outbox (platform, id) WHERE state = 'pending';
    CREATE INDEX outbox_by_conversation ON outbox (conversation, id) WHERE state = 'pending';
    CREATE TABLE pairing_codes (
        platform    TEXT NOT NULL,
        code        TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        label       TEXT NOT NULL DEFAULT '',
        created_at  DOUBLE PRECISION NOT NULL,
        expires_at  DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (platform, code)
    );
    CREATE INDEX pairing_codes_by_user ON pairing_codes (platform, user_id);
    CREATE TABLE approved_users (
        platform    TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        approved_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (platform, user_id)
    );
    CREATE TABLE nodes (
        node        TEXT PRIMARY KEY,
        started_at  DOUBLE PRECISION NOT NULL,
        last_seen   DOUBLE PRECISION NOT NULL,
        lease_s     DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE leases (
        name        TEXT PRIMARY KEY,
        owner       TEXT,
        lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
        fence       BIGINT NOT NULL DEFAULT 0
    );
    """,
    # 2: the model's token counts on assistant rows (NULL: not reported, or answered before).
    """
    ALTER TABLE messages ADD COLUMN prompt_tokens INTEGER;
    ALTER TABLE messages ADD COLUMN completion_tokens INTEGER;
    """,
    # 3: chat previews' messages, by the user row whose turn they preview (SPEC 8).
    """
    CREATE TABLE previews (
        user_row_id BIGINT PRIMARY KEY,
        message_id  TEXT NOT NULL,
        created_at  DOUBLE PRECISION NOT NULL
    );
    """,
    # 4 (context): the one compaction summary of each conversation (SPEC 11).
    """
    CREATE TABLE summaries (
        conversation TEXT PRIMARY KEY,
        content      TEXT NOT NULL,
        through      BIGINT NOT NULL,
        updated_at   DOUBLE PRECISION NOT NULL
    );
    """,
    # 5 (attachments, SPEC 9): each user row's attachment references, in order, and the
    # bytes fetched, content-addressed, shared by every row that sent the same file.
    """
    CREATE TABLE attachments (
        user_row_id  BIGINT NOT NULL,
        position     INTEGER NOT NULL,
        conversation TEXT NOT NULL,
        kind         TEXT NOT NULL,
        name         TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size         BIGINT,
        source       TEXT NOT NULL,
        sha256       TEXT,
        text         TEXT,
        PRIMARY KEY (user_row_id, position)
    );
    CREATE INDEX attachments_by_conversation ON attachments (conversation, sha256);
    CREATE INDEX attachments_by_sha256 ON attachments (sha256);
    CREATE TABLE blobs (
        sha256     TEXT PRIMARY KEY,
        data       BYTEA NOT NULL,
        size       BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
    """,
    # 6 (a2a): A2A tasks' push notification configs, by the task's user row (SPEC 12).
    """
    CREATE TABLE a2a_push_configs (
        user_row_id BIGINT NOT NULL,
        config_id   TEXT NOT NULL,
        config      TEXT NOT NULL,
        created_at  DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (user_row_id, config_id)
    );
    """,
    # 7 (queue modes, SPEC 10): the assistant row that answered a user row, for every row of a
    # merged turn (NULL: answered before, or linked through the reply's user_row_id alone).
    """
    ALTER TABLE messages ADD COLUMN answered_by BIGINT REFERENCES messages(id);
    """,
    # 8 (growth): indexes for every read that scanned a table as the store grew: the console's
    # pages and the retention sweep by activity, the outbox's undelivered chunks by id and
    # those in flight, a conversation's or a turn's chunks, and the failures.
    """
    CREATE INDEX conversations_by_activity ON conversations (updated_at, key);
    CREATE INDEX outbox_pending_by_id ON outbox (id) WHERE state = 'pending';
    CREATE INDEX outbox_undelivered ON outbox (id)
        WHERE state IN ('pending', 'sending', 'expired', 'failed');
    CREATE INDEX outbox_by_turn ON outbox (conversation, user_row_id);
    CREATE INDEX outbox_sending ON outbox (id) WHERE state = 'sending';
    CREATE INDEX messages_failed ON messages (conversation, id) WHERE failure IS NOT NULL;
    CREATE INDEX messages_failed_by_id ON messages (id) WHERE failure IS NOT NULL;
    """,
    # 9 (tools, SPEC 15): a tool step is an assistant row (state 'step') with the calls the
    # model asked for; each call is a 'tool' row (state awaiting/approved/denied/started/
    # finished) with its result as content, whether it is an error, and for an approval when
    # it was asked and who decided.
    """
    ALTER TABLE messages DROP CONSTRAINT messages_role_check;
    ALTER TABLE messages ADD CONSTRAINT messages_role_check
        CHECK (role IN ('user', 'assistant', 'tool'));
    ALTER TABLE messages ADD COLUMN tool_calls TEXT;
    ALTER TABLE messages ADD COLUMN call_id TEXT;
    ALTER TABLE messages ADD COLUMN tool TEXT;
    ALTER TABLE messages ADD COLUMN is_error BOOLEAN NOT NULL DEFAULT FALSE;
    ALTER TABLE messages ADD COLUMN requested_at DOUBLE PRECISION;
    ALTER TABLE messages ADD COLUMN decided_by TEXT;
    CREATE UNIQUE INDEX messages_calls ON messages (user_row_id, call_id) WHERE role = 'tool';
    """,
    # 10 (schedules, SPEC 16): scheduled messages, from the config or made by a conversation;
    # ``cursor`` is the latest due time fired or skipped, the last_* columns what the last
    # firing was (its user row: its answer and delivery are read through it).
    """
    CREATE TABLE schedules (
        id              TEXT PRIMARY KEY,
        conversation    TEXT NOT NULL,
        kind            TEXT NOT NULL,
        spec            TEXT NOT NULL,
        action          TEXT NOT NULL,
        body            TEXT NOT NULL,
        timezone        TEXT NOT NULL DEFAULT 'UTC',
        catch_up        TEXT NOT NULL DEFAULT 'latest',
        enabled         BOOLEAN NOT NULL DEFAULT TRUE,
        origin          TEXT NOT NULL,
        created_by      TEXT NOT NULL DEFAULT '',
        version         BIGINT NOT NULL DEFAULT 1,
        first_seen      DOUBLE PRECISION NOT NULL,
        created_at      DOUBLE PRECISION NOT NULL,
        cursor          DOUBLE PRECISION,
        last_due        DOUBLE PRECISION,
        last_row        BIGINT,
        last_fired_at   DOUBLE PRECISION,
        missed          BIGINT NOT NULL DEFAULT 0,
        last_failure    TEXT,
        last_failure_at DOUBLE PRECISION
    );
    CREATE INDEX schedules_by_conversation ON schedules (conversation);
    """,
    # 11 (Slack on several nodes, SPEC 17): answers that are not turns (a command's, a
    # refusal), claimed by the first node to answer; kept a day (``claims``).
    """
    CREATE TABLE answer_claims (
        platform   TEXT NOT NULL,
        message_id TEXT NOT NULL,
        claimed_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (platform, message_id)
    );
    CREATE INDEX answer_claims_by_age ON answer_claims (claimed_at);
    """,
)


async def migrate(db: asyncpg.Connection) -> None:
    """Bring the schema up to date; refuse one newer than this botmux knows."""
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await db.execute("CREATE TABLE IF NOT EXISTS botmux_schema (version INTEGER NOT NULL)")
        version = await db.fetchval("SELECT MAX(version) FROM botmux_schema") or 0
        if version > len(MIGRATIONS):
            raise StoreError(
                f"the store's schema version {version} is newer than this botmux knows"
                f" ({len(MIGRATIONS)}): upgrade botmux"
            )
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            await db.execute(script)
            await db.execute("INSERT INTO botmux_schema (version) VALUES ($1)", number)
