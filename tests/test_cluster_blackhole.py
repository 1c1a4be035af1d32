"""SIGTERM while the database is black-holed (a partition: connections stay open, nothing
answers): botmux still exits within its deadlines, says what it left pending, and loses
nothing it had committed.

botmux runs as a real process, talking to PostgreSQL through a TCP proxy (in this test's
process) that stops forwarding without closing anything.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.store._pg_connection import CLOSE_DEADLINE_S
from tests.fakes.openai_server import Hold, ok, open_fake_model
from tests.fakes.tcp_proxy import proxy_to
from tests.harness import GatewayProcess, cluster_node, pg_fetch

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.process]

TURNS = 6
LEASE_S = 5.0  # longer than the drain: the turns still run at its deadline
HEARTBEAT_S = 0.5
DRAIN_S = 1.5
COMMAND_TIMEOUT_S = 1.0
#: The interpreter's own start of the exit (threads joined, logs flushed) after botmux
#: returned: no deadline of ours covers it.
EXIT_MARGIN_S = 2.0


def node(tmp_path: Path, url: str, model_url: str, name: str) -> GatewayProcess:
    made = cluster_node(
        tmp_path,
        url,
        model_url,
        name,
        lease_s=LEASE_S,
        heartbeat_s=HEARTBEAT_S,
        extra=f"[gateway]\ndrain_timeout_s = {DRAIN_S}\n",
    )
    text = made.config_path.read_text()
    made.config_path.write_text(
        text.replace("[store]\n", f"[store]\ncommand_timeout_s = {COMMAND_TIMEOUT_S}\n", 1)
    )
    return made


async def test_sigterm_against_a_black_holed_database_exits_within_its_deadlines(
    tmp_path: Path, postgres_url: str
) -> None:
    async with open_fake_model() as model, proxy_to(postgres_url) as proxy:
        model.default = lambda r: Hold(ok(f"done: {r.last_user}"))  # turns run till the end
        a = node(tmp_path, proxy.url(postgres_url), model.base_url, "a")
        b = node(tmp_path, postgres_url, model.base_url, "b")  # the restart, straight to it
        try:
            await a.start()
            statuses: list[int] = []
            async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:

                async def ask(i: int) -> None:
                    try:  # a stops before it has a reply: the client hears so, or nothing
                        r = await http.post(
                            f"{a.url}/api/sessions/s{i}/chat",
                            json={"message": f"m{i}"},
                            headers={"Idempotency-Key": f"k{i}"},
                        )
                        statuses.append(r.status)
                    except aiohttp.ClientError:
                        statuses.append(0)

                for i in range(TURNS):
                    tg.start_soon(ask, i)
                with anyio.fail_after(20):
                    await model.wait_for_requests(TURNS)  # every message admitted, committed
                proxy.stall()  # the database stops answering; no connection closes
                a.signal(signal.SIGTERM)
                sent = time.monotonic()
                with anyio.fail_after(60):
                    code = await a.wait()
                elapsed = time.monotonic() - sent
            # The deadlines after SIGTERM, one after the other: the drain; the cluster's
            # last release (one statement) and the LISTEN connection's close; the store's
            # writer settling what is queued; the pool's and the writer's closes.
            bound = (
                DRAIN_S
                + COMMAND_TIMEOUT_S
                + CLOSE_DEADLINE_S
                + COMMAND_TIMEOUT_S
                + 2 * CLOSE_DEADLINE_S
                + EXIT_MARGIN_S
            )
            assert code == 0, a.log_tail()
            assert 200 not in statuses, statuses  # no reply came out of a
            assert elapsed < bound, (elapsed, bound, a.log_tail())
            log = a.log()
            assert "drain deadline reached; unfinished turns stay pending" in log, log
            assert f"turns={TURNS}" in log, log
            assert "cluster: leases not released at stop" in log
            print(
                "\nSIGTERM against a black-holed database:",
                {"exit_s": round(elapsed, 2), "bound_s": bound},
            )

            # Nothing committed is lost: the admitted rows wait, and another node, straight
            # to the database, answers every one once a's lease has run out.
            rows = await pg_fetch(postgres_url, "SELECT state FROM messages WHERE role = 'user'")
            assert sorted(r["state"] for r in rows) == ["pending"] * TURNS
            model.release()
            model.default = lambda r: ok(f"done: {r.last_user}")
            await b.start()
            with anyio.fail_after(30):
                while True:
                    rows = await pg_fetch(
                        postgres_url,
                        "SELECT u.content, a.content AS reply FROM messages u"
                        " LEFT JOIN messages a ON a.user_row_id = u.id AND a.role = 'assistant'"
                        " WHERE u.role = 'user' AND u.state = 'answered' ORDER BY u.id",
                    )
                    if len(rows) == TURNS:
                        break
                    await anyio.sleep(0.1)
            assert sorted(r["reply"] for r in rows) == sorted(f"done: m{i}" for i in range(TURNS))
        finally:
            await a.kill()
            await b.kill()
