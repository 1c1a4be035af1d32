"""The admin API's view of scheduled messages (SPEC 16): each schedule with its next due time,
its last firing, that firing's delivery (fired and never delivered shows as such) and its last
failure, as ``GET /api/admin/schedules`` returns them and the console's Schedules view shows.
"""

from __future__ import annotations

from typing import Any

from gateway.messages import ScheduleRecord

#: A schedule's text or prompt, at most this much of it.
BODY_CHARS = 300

SCHEDULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        *("id", "origin", "conversation", "when", "action", "body", "catch_up", "enabled"),
        *("next_due", "last_due", "last_row", "delivery", "delivered_at", "delivered_id"),
        *("answer_failure", "missed", "last_failure", "last_failure_at"),
    ],
    "properties": {
        "id": {"type": "string"},
        "origin": {"enum": ["config", "conversation"]},
        "conversation": {"type": "string"},
        "when": {"type": "string", "description": "cron ..., every ... or at ..."},
        "action": {"enum": ["prompt", "text"]},
        "body": {"type": "string", "description": f"At most {BODY_CHARS} characters."},
        "catch_up": {"enum": ["latest", "skip"]},
        "enabled": {"type": "boolean"},
        "next_due": {"type": ["number", "null"]},
        "last_due": {"type": ["number", "null"]},
        "last_row": {"type": ["integer", "null"]},
        "delivery": {
            "enum": [
                *("never fired", "waiting", "delivering", "delivered", "not delivered"),
                "cancelled",
            ],
            "description": "The last firing's: 'not delivered' is fired and never delivered"
            " (the platform refused it for good, or it expired).",
        },
        "delivered_at": {"type": ["number", "null"]},
        "delivered_id": {
            "type": ["string", "null"],
            "description": "The platform's id of the first message delivered.",
        },
        "answer_failure": {"type": ["string", "null"]},
        "missed": {"type": "integer"},
        "last_failure": {"type": ["string", "null"]},
        "last_failure_at": {"type": ["number", "null"]},
    },
}
SCHEDULES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schedules", "undelivered"],
    "properties": {
        "schedules": {"type": "array", "items": SCHEDULE_SCHEMA},
        "undelivered": {
            "type": "integer",
            "description": "Schedules whose last firing was fired and never delivered.",
        },
    },
}


def schedules_json(records: list[ScheduleRecord]) -> dict[str, Any]:
    listed = [schedule_json(r) for r in records]
    return {
        "schedules": listed,
        "undelivered": sum(1 for s in listed if s["delivery"] == "not delivered"),
    }


def schedule_json(r: ScheduleRecord) -> dict[str, Any]:
    s = r.schedule
    when = {"cron": f"cron {s.spec}", "every": f"every {s.spec}", "at": f"at {s.spec}"}[s.kind]
    if s.kind == "cron" and s.timezone != "UTC":
        when += f" ({s.timezone})"
    return {
        "id": s.id,
        "origin": s.origin,
        "conversation": s.conversation,
        "when": when,
        "action": s.action,
        "body": s.body[:BODY_CHARS],
        "catch_up": s.catch_up,
        "enabled": s.enabled,
        "next_due": r.next_due,
        "last_due": r.last_due,
        "last_row": r.last_row,
        "delivery": r.delivery,
        "delivered_at": r.delivered_at,
        "delivered_id": r.delivered_id,
        "answer_failure": r.answer_failure,
        "missed": r.missed,
        "last_failure": r.last_failure,
        "last_failure_at": r.last_failure_at,
    }
