"""Slack on several botmux nodes (one PostgreSQL store), as real processes.

Each node holds a Socket Mode connection of its own; the fake Slack gives each envelope to one
open connection in turn, as Slack spreads events over an app's connections. A mention comes as
two envelopes (``message`` and ``app_mention``), which may go to two nodes: admission is keyed
on channel and ``ts``, so one of them admits the turn and the other finds it stored. Every
message is answered once (the replies the fake received, the rows in PostgreSQL), whichever
node took which envelope, and each node sends the replies of the conversations it runs. (Two
connections keep no order between them: messages sent in quick succession may be admitted in
either order, as with Slack itself.)
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel
from tests.fakes.slack_server import FakeSlack, open_fake_slack
from tests.harness import cluster_nodes, pg_fetch, start_all
from tests.support.slack_world import ALICE, ALICE_DM, BOB, CHANNEL, mention, slack_toml

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.timeout(90)]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with open_fake_slack() as fake:
        yield fake


async def test_two_nodes_with_a_connection_each_answer_every_message_once(
    tmp_path: Path, postgres_url: str, model: FakeModel, slack: FakeSlack
) -> None:
    async with cluster_nodes(
        tmp_path, postgres_url, model.base_url, lease_s=2.0, heartbeat_s=0.4
    ) as make:
        nodes = [make(name, slack_toml(slack)) for name in ("n1", "n2")]
        await start_all(nodes)
        with anyio.fail_after(60):
            await slack.wait_until(lambda: slack.hellos >= 2)
            threads = []
            for i in range(6):
                threads.append(await slack.send(CHANNEL, mention(f"question {i}"), user=BOB))
                await slack.send(ALICE_DM, f"dm {i}", user=ALICE)
            await slack.wait_until(
                lambda: (
                    len(slack.bot_messages(CHANNEL)) >= 6
                    and len(slack.bot_messages(ALICE_DM)) >= 6
                    and not slack.unacked()
                )
            )
    # Envelopes went to both connections, and the pairs of a mention were split at times.
    assert len({id(e.on) for e in slack.envelopes}) == 2
    for i, ts in enumerate(threads):
        assert slack.texts(CHANNEL, ts) == [f"echo: question {i}"]
    # Two connections keep no order between them: the DMs' replies are all there, once each.
    assert sorted(slack.texts(ALICE_DM)) == [f"echo: dm {i}" for i in range(6)]
    users = await pg_fetch(
        postgres_url, "SELECT content, state FROM messages WHERE role = 'user' ORDER BY id"
    )
    counts = Counter(r["content"] for r in users)
    assert len(users) == 12 and set(counts.values()) == {1}
    assert {r["state"] for r in users} == {"answered"}


async def test_a_command_whose_two_events_reach_two_nodes_is_answered_once(
    tmp_path: Path, postgres_url: str, model: FakeModel, slack: FakeSlack
) -> None:
    """A command's answer and a refusal are not turns, so no stored row de-duplicates them:
    the claim in the store does. The ``message`` event goes to one node, the ``app_mention``
    to the other."""
    async with cluster_nodes(
        tmp_path, postgres_url, model.base_url, lease_s=2.0, heartbeat_s=0.4
    ) as make:
        section = slack_toml(slack) + "[gateway]\nmax_message_chars = 60\n"
        nodes = [make(name, section) for name in ("n1", "n2")]
        await start_all(nodes)
        with anyio.fail_after(60):
            await slack.wait_until(lambda: slack.hellos >= 2)
            one, other = slack.connections()
            asked = [
                await slack.send(CHANNEL, mention("/help"), user=BOB, on=(one, other)),
                await slack.send(CHANNEL, mention("/status"), user=BOB, on=(other, one)),
                await slack.send(CHANNEL, mention("x" * 100), user=BOB, on=(one, other)),
            ]
            await slack.wait_until(
                lambda: not slack.unacked() and all(slack.bot_messages(CHANNEL, t) for t in asked)
            )
            await anyio.sleep(1.5)  # a second answer, if any, has been sent by now
    assert [len(slack.texts(CHANNEL, ts)) for ts in asked] == [1, 1, 1]
    assert "too long" in slack.texts(CHANNEL, asked[2])[0]
    assert not await pg_fetch(postgres_url, "SELECT id FROM messages")  # no turn stored


async def test_a_follow_up_in_a_thread_is_answered_by_a_node_that_did_not_admit_its_start(
    tmp_path: Path, postgres_url: str, model: FakeModel, slack: FakeSlack
) -> None:
    """The thread started on one node (its mention's ``message`` event only); a follow-up
    without a mention reaches the other node, then (after that node's restart, its memory
    gone) the restarted one: each is answered once, the thread being a stored conversation."""
    async with cluster_nodes(
        tmp_path, postgres_url, model.base_url, lease_s=2.0, heartbeat_s=0.4
    ) as make:
        nodes = [make(name, slack_toml(slack)) for name in ("n1", "n2")]
        await start_all(nodes)
        with anyio.fail_after(75):
            await slack.wait_until(lambda: slack.hellos >= 2)
            first, second = slack.connections()
            ts = await slack.send(
                CHANNEL, mention("start"), user=BOB, mention_event=False, on=(first,)
            )
            await slack.wait_for_bot_messages(CHANNEL, 1, ts)
            await slack.send(CHANNEL, "more", user=BOB, thread_ts=ts, on=(second,))
            await slack.wait_for_bot_messages(CHANNEL, 2, ts)
            # One node restarts (either: it comes back remembering no thread).
            nodes[0].signal(signal.SIGTERM)
            assert await nodes[0].wait() == 0
            await nodes[0].start()
            await slack.wait_until(lambda: len(slack.connections()) == 2)
            (fresh,) = [c for c in slack.connections() if c not in (first, second)]
            await slack.send(CHANNEL, "and more", user=BOB, thread_ts=ts, on=(fresh,))
            await slack.wait_for_bot_messages(CHANNEL, 3, ts)
            await slack.wait_until(lambda: not slack.unacked())
    assert slack.texts(CHANNEL, ts) == ["echo: start", "echo: more", "echo: and more"]
