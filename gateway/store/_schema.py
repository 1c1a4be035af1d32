"""The SQLite schema and its forward migrations.

``PRAGMA user_version`` holds the schema version; opening a store applies every migration
above it, in order, each in its own transaction. Migrations are append-only: a released
migration is never edited, a change is a new one.
"""

from __future__ import annotations

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
    # context: the one compaction summary of each conversation (SPEC 11).
    """
    CREATE TABLE summaries (
        conversation TEXT PRIMARY KEY,
        content      TEXT NOT NULL,
        through      INTEGER NOT NULL,
        updated_at   REAL NOT NULL
    );
    """,
)
