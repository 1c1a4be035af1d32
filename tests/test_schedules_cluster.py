"""Scheduled messages fire exactly once (SPEC 16): two nodes on one PostgreSQL database run the
scheduler over the same 20 schedules and fire 100 due times between them, each once, counted at
the fake Telegram and in the store; and a node killed (SIGKILL) at each step of a firing
(before its admission, after it, after the model answered, before the delivery) answers and
delivers that due time exactly once after its restart.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from gateway.app import GatewayApp
from gateway.config import parse_config
from gateway.events_schedules import ScheduleFired
from tests.fakes.openai_server import ok, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import (
    Events,
    GatewayProcess,
    config_text,
    free_port,
    pg_fetch,
    running_gateway,
)
from tests.support.clocks import WallClock

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(180),
    pytest.mark.process,
    pytest.mark.gateway,
]

SCHEDULES, DUE_TIMES = 20, 5
FIRST_CHAT = 5001


def schedules_toml() -> str:
    return "".join(
        f'[[schedules]]\nname = "s{i}"\nconversation = "telegram:{FIRST_CHAT + i}"\n'
        f'every = "1h"\ntext = "tick {i}"\n\n'
        for i in range(SCHEDULES)
    )


async def test_two_nodes_fire_each_of_100_due_times_once(tmp_path: Path, postgres_url: str) -> None:
    clock = WallClock("2026-06-01T09:30:00+00:00", loops=2)
    events = Events()
    async with open_fake_telegram() as tg, open_fake_model() as model:
        extra = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\nallow_users = [42]\n\n'
            + schedules_toml()
        )

        def node(name: str) -> AbstractAsyncContextManager[tuple[GatewayApp, str]]:
            text = config_text(
                tmp_path / "unused.db",
                model.base_url,
                store_url=postgres_url,
                extra=extra + f'[cluster]\nnode_id = "{name}"\nlease_s = 6\nheartbeat_s = 1\n',
            )
            cfg = parse_config(text, source=name, env={})
            return running_gateway(cfg, schedule_clock=clock, events=events)

        async with node("n1"), node("n2"):
            for hour in range(10, 10 + DUE_TIMES):
                await clock.move(f"2026-06-01T{hour:02d}:00:00+00:00")
                k = hour - 9
                await events.wait_for(ScheduleFired, 2 * SCHEDULES * k)  # both nodes tried
                with anyio.fail_after(30):
                    await tg.wait_until(lambda k=k: len(tg.sent_messages()) >= SCHEDULES * k)
            sent = {FIRST_CHAT + i: tg.sent_messages(FIRST_CHAT + i) for i in range(SCHEDULES)}
    fired = Counter(e.outcome for e in events.of(ScheduleFired))
    assert fired["fired"] == SCHEDULES * DUE_TIMES  # one node admitted each due time
    assert fired["fired"] + fired["already"] + fired["duplicate"] == 2 * SCHEDULES * DUE_TIMES
    # The platform got each schedule's message once per due time.
    assert len(tg.sent_messages()) == SCHEDULES * DUE_TIMES
    assert sent == {FIRST_CHAT + i: [f"tick {i}"] * DUE_TIMES for i in range(SCHEDULES)}
    rows = await pg_fetch(
        postgres_url,
        "SELECT u.platform_message_id, COUNT(a.id) AS answers,"
        " (SELECT COUNT(*) FROM outbox o WHERE o.user_row_id = u.id AND o.state = 'delivered')"
        " AS delivered FROM messages u LEFT JOIN messages a ON a.user_row_id = u.id"
        " AND a.role = 'assistant' WHERE u.role = 'user' GROUP BY u.id",
    )
    assert len(rows) == SCHEDULES * DUE_TIMES
    assert {r["platform_message_id"] for r in rows} == {
        f"schedule:s{i}:2026-06-01T{h:02d}:00:00Z"
        for i in range(SCHEDULES)
        for h in range(10, 10 + DUE_TIMES)
    }
    assert all(r["answers"] == 1 and r["delivered"] == 1 for r in rows)


STEPS = [
    "before_schedule_admission",
    "after_schedule_admission",
    "after_model_call",
    "after_answer_commit",
]


@pytest.mark.parametrize("failpoint", STEPS)
async def test_a_node_killed_at_each_step_answers_and_delivers_the_firing_once(
    tmp_path: Path, failpoint: str
) -> None:
    chat = 6001
    async with open_fake_telegram() as tg, open_fake_model() as model:
        model.script(ok("Time for the weekly review."), ok("Time for the weekly review."))
        due = datetime.fromtimestamp(time.time() + 2, UTC).replace(microsecond=0)
        extra = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\nallow_users = [42]\n\n'
            f'[[schedules]]\nname = "review"\nconversation = "telegram:{chat}"\n'
            f'at = "{due.isoformat()}"\nprompt = "Remind me of the weekly review."\n'
        )
        port = free_port()
        path = tmp_path / "botmux.toml"
        path.write_text(
            config_text(tmp_path / "b.db", model.base_url, listen=f"127.0.0.1:{port}", extra=extra)
        )
        node = GatewayProcess(path, port, tmp_path / "node.log")
        with contextlib.suppress(AssertionError):  # killed before /readyz answered: fine
            await node.start({"BOTMUX_FAILPOINT": f"{failpoint}:kill"})
        with anyio.fail_after(30):
            code = await node.wait()
        assert code == -signal.SIGKILL, node.log_tail()
        await node.start()
        try:
            with anyio.fail_after(30):
                await tg.wait_for_sent(1, chat)
                await model.wait_for_requests(1)
        finally:
            node.signal(signal.SIGTERM)  # a drain: what was sent is recorded before it exits
            with anyio.fail_after(30):
                await node.wait()
        rows = _firings(tmp_path / "b.db")
    assert tg.sent_messages(chat) == ["Time for the weekly review."]
    (row,) = rows  # the due time admitted once
    assert row[0] == f"schedule:review:{due.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    assert row[1] == "answered" and row[2] == "delivered"
    # The model was asked again only where the first answer was never stored.
    assert len(model.requests) == (2 if failpoint == "after_model_call" else 1)


def _firings(db: Path) -> list[tuple[str, str, str | None]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return list(
            conn.execute(
                "SELECT u.platform_message_id, u.state, (SELECT MIN(o.state) FROM outbox o"
                " WHERE o.user_row_id = u.id) FROM messages u WHERE u.role = 'user'"
            )
        )
