"""The SQLite schema and its forward migrations.

``PRAGMA user_version`` holds the schema version; opening a store applies every migration
above it, in order, each in its own transaction. Migrations are append-only: a released
migration is never edited, a change is a new one.
"""

from __future__ import annotations

import aiosqlite

from gateway.errors import StoreError

MIGRATIONS: tuple[str, ...] = (
    # 1: conversations, the transcript, the outbox.
    """
    CREATE TABLE conversations (
        key          TEXT PRIMARY KEY,
        platform     TEXT NOT NULL,
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL,
        reset_after  INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE messages (
        id                  INTEGER PRIMARY KEY,
        conversation        TEXT NOT NULL REFERENCES conversations(key),
        role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content             TEXT NOT NULL,
        state               TEXT NOT NULL,
        platform            TEXT NOT NULL,
        platform_message_id TEXT,
        user_row_id         INTEGER REFERENCES messages(id),
        failure             TEXT,
        reply_target        TEXT NOT NULL DEFAULT '',
        sender              TEXT NOT NULL DEFAULT '',
        model               TEXT NOT NULL DEFAULT '',
        created_at          REAL NOT NULL,
        UNIQUE (platform, platform_message_id)
    );
    CREATE INDEX messages_by_conversation ON messages (conversation, id);
    CREATE INDEX messages_pending ON messages (conversation, id) WHERE state = 'pending';
    CREATE TABLE outbox (
        id                  INTEGER PRIMARY KEY,
        conversation        TEXT NOT NULL,
        platform            TEXT NOT NULL,
        message_id          INTEGER NOT NULL REFERENCES messages(id),
        user_row_id         INTEGER NOT NULL,
        seq                 INTEGER NOT NULL,
        text                TEXT NOT NULL,
        reply_target        TEXT NOT NULL DEFAULT '',
        state               TEXT NOT NULL DEFAULT 'pending',
        platform_message_id TEXT,
        created_at          REAL NOT NULL,
        delivered_at        REAL
    );
    CREATE INDEX outbox_pending ON outbox (platform, id) WHERE state = 'pending';
    """,
    # 2: DM pairing: codes waiting for an operator, and the users approved.
    """
    CREATE TABLE pairing_codes (
        platform    TEXT NOT NULL,
        code        TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        label       TEXT NOT NULL DEFAULT '',
        created_at  REAL NOT NULL,
        expires_at  REAL NOT NULL,
        PRIMARY KEY (platform, code)
    );
    CREATE INDEX pairing_codes_by_user ON pairing_codes (platform, user_id);
    CREATE TABLE approved_users (
        platform    TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        approved_at REAL NOT NULL,
        PRIMARY KEY (platform, user_id)
    );
    """,
    # 3: the model's token counts on assistant rows (NULL: not reported, or answered before).
    """
    ALTER TABLE messages ADD COLUMN prompt_tokens INTEGER;
    ALTER TABLE messages ADD COLUMN completion_tokens INTEGER;
    """,
    # 4: chat previews' messages, by the user row whose turn they preview (SPEC 8).
    """
    CREATE TABLE previews (
        user_row_id INTEGER PRIMARY KEY,
        message_id  TEXT NOT NULL,
        created_at  REAL NOT NULL
    );
    """,
    # 5 (context): the one compaction summary of each conversation (SPEC 11).
    """
    CREATE TABLE summaries (
        conversation TEXT PRIMARY KEY,
        content      TEXT NOT NULL,
        through      INTEGER NOT NULL,
        updated_at   REAL NOT NULL
    );
    """,
    # 6 (attachments, SPEC 9): each user row's attachment references, in order, and the
    # bytes fetched, content-addressed, shared by every row that sent the same file.
    """
    CREATE TABLE attachments (
        user_row_id  INTEGER NOT NULL,
        position     INTEGER NOT NULL,
        conversation TEXT NOT NULL,
        kind         TEXT NOT NULL,
        name         TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size         INTEGER,
        source       TEXT NOT NULL,
        sha256       TEXT,
        text         TEXT,
        PRIMARY KEY (user_row_id, position)
    );
    CREATE INDEX attachments_by_conversation ON attachments (conversation, sha256);
    CREATE INDEX attachments_by_sha256 ON attachments (sha256);
    CREATE TABLE blobs (
        sha256     TEXT PRIMARY KEY,
        data       BLOB NOT NULL,
        size       INTEGER NOT NULL,
        created_at REAL NOT NULL
    );
    """,
    # 7 (a2a): A2A tasks' push notification configs, by the task's user row (SPEC 12).
    """
    CREATE TABLE a2a_push_configs (
        user_row_id INTEGER NOT NULL,
        config_id   TEXT NOT NULL,
        config      TEXT NOT NULL,
        created_at  REAL NOT NULL,
        PRIMARY KEY (user_row_id, config_id)
    );
    """,
    # 8 (queue modes, SPEC 10): the assistant row that answered a user row, for every row of a
    # merged turn (NULL: answered before, or linked through the reply's user_row_id alone).
    """
    ALTER TABLE messages ADD COLUMN answered_by INTEGER REFERENCES messages(id);
    """,
    # 9 (growth): indexes for every read that scanned a table as the store grew: the console's
    # pages and the retention sweep by activity, the outbox's undelivered chunks by id and
    # those in flight, a conversation's or a turn's chunks, a user row's reply, and the failures.
    """
    CREATE INDEX conversations_by_activity ON conversations (updated_at, key);
    CREATE INDEX outbox_pending_by_id ON outbox (id) WHERE state = 'pending';
    CREATE INDEX outbox_undelivered ON outbox (id)
        WHERE state IN ('pending', 'sending', 'expired', 'failed');
    CREATE INDEX outbox_by_turn ON outbox (conversation, user_row_id);
    CREATE INDEX outbox_sending ON outbox (id) WHERE state = 'sending';
    CREATE INDEX messages_by_user_row ON messages (user_row_id) WHERE user_row_id IS NOT NULL;
    CREATE INDEX messages_failed ON messages (conversation, id) WHERE failure IS NOT NULL;
    CREATE INDEX messages_failed_by_id ON messages (id) WHERE failure IS NOT NULL;
    """,
    # 10 (tools, SPEC 15): a tool step is an assistant row (state 'step') with the calls the
    # model asked for; each call is a 'tool' row (state awaiting/approved/denied/started/
    # finished) with its result as content, whether it is an error, and for an approval when
    # it was asked and who decided. First the role's CHECK admits 'tool': SQLite's documented
    # way to loosen a constraint, rewriting the table's text in the schema (the migration then
    # bumps schema_version, so every connection reads the new text).
    """
    PRAGMA writable_schema = ON;
    UPDATE sqlite_master SET sql = replace(sql, 'CHECK (role IN (''user'', ''assistant''))',
        'CHECK (role IN (''user'', ''assistant'', ''tool''))')
        WHERE type = 'table' AND name = 'messages';
    PRAGMA writable_schema = OFF
    """,
    # 11 (tools): the columns of a step and of a call.
    """
    ALTER TABLE messages ADD COLUMN tool_calls TEXT;
    ALTER TABLE messages ADD COLUMN call_id TEXT;
    ALTER TABLE messages ADD COLUMN tool TEXT;
    ALTER TABLE messages ADD COLUMN is_error INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN requested_at REAL;
    ALTER TABLE messages ADD COLUMN decided_by TEXT;
    CREATE UNIQUE INDEX messages_calls ON messages (user_row_id, call_id) WHERE role = 'tool';
    """,
    # 12 (schedules, SPEC 16): scheduled messages, from the config or made by a conversation;
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
        enabled         INTEGER NOT NULL DEFAULT 1,
        origin          TEXT NOT NULL,
        created_by      TEXT NOT NULL DEFAULT '',
        version         INTEGER NOT NULL DEFAULT 1,
        first_seen      REAL NOT NULL,
        created_at      REAL NOT NULL,
        cursor          REAL,
        last_due        REAL,
        last_row        INTEGER,
        last_fired_at   REAL,
        missed          INTEGER NOT NULL DEFAULT 0,
        last_failure    TEXT,
        last_failure_at REAL
    );
    CREATE INDEX schedules_by_conversation ON schedules (conversation);
    """,
    # 13 (Slack on several nodes, SPEC 17): answers that are not turns (a command's, a
    # refusal), claimed by the first node to answer; kept a day (``claims``).
    """
    CREATE TABLE answer_claims (
        platform   TEXT NOT NULL,
        message_id TEXT NOT NULL,
        claimed_at REAL NOT NULL,
        PRIMARY KEY (platform, message_id)
    );
    CREATE INDEX answer_claims_by_age ON answer_claims (claimed_at);
    """,
)


async def migrate(db: aiosqlite.Connection) -> None:
    """Apply every migration above the store's ``user_version``, each in its own transaction."""
    (row,) = await db.execute_fetchall("PRAGMA user_version")
    version = row[0]
    if version > len(MIGRATIONS):
        raise StoreError(
            f"the store's schema version {version} is newer than this botmux knows"
            f" ({len(MIGRATIONS)}): upgrade botmux"
        )
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        statements = [s.strip() for s in script.split(";") if s.strip()]
        await db.execute("BEGIN IMMEDIATE")
        try:
            for statement in statements:
                await db.execute(statement)
            if "sqlite_master" in script:  # the schema's text was rewritten: reread it
                ((schema,),) = await db.execute_fetchall("PRAGMA schema_version")
                await db.execute(f"PRAGMA schema_version = {int(schema) + 1}")
            await db.execute(f"PRAGMA user_version = {number}")
            await db.execute("COMMIT")
        except BaseException:
            await db.execute("ROLLBACK")
            raise
