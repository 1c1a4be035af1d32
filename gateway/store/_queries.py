"""Reads both backends run word for word (no parameters, portable SQL), kept in one place so
the two stores cannot drift apart."""

from __future__ import annotations

CONVERSATIONS_WITH_PENDING = (
    "SELECT conversation, MIN(id) FROM messages WHERE state = 'pending'"
    " GROUP BY conversation ORDER BY MIN(id)"
)
OUTBOX_PENDING = "SELECT platform, COUNT(*) FROM outbox WHERE state = 'pending' GROUP BY platform"
CONVERSATIONS = (
    "SELECT c.key, c.platform, c.created_at, c.updated_at,"
    " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key),"
    " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key AND m.state = 'pending')"
    " FROM conversations c ORDER BY c.updated_at DESC"
)
