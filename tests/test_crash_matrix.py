"""The crash matrix: kill -9 at every failpoint of the turn lifecycle, on every platform.

botmux runs as a real process with ``BOTMUX_FAILPOINT=<point>:kill``; a user sends one
message; the process kills itself at that point; it is restarted without the failpoint.
Afterwards the message has exactly one user row and one answer, and the reply reached the
user: once, or (only where a platform accepted a send just before the crash and cannot
deduplicate it) at most twice. docs/RELIABILITY.md has the table.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.failpoints import EVENTS
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeModel, ok, open_fake_model
from tests.fakes.slack_server import FakeSlack, open_fake_slack
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import telegram_section
from tests.support import slack_world
from tests.support.crashes import LONG, assert_one_answer, crash_at, make_gateway, settle
from tests.support.discord_world import BOB, CHANNEL_ID, discord_toml, mention, open_world

pytestmark = pytest.mark.anyio

ALICE = 42
# A text message never fetches a file: the attachment failpoint has its own tests, with files
# (the chat platforms', whose files are fetched; a peer's arrive inline and are never fetched).
ATTACHMENT_POINTS = ("after_attachment_fetch",)
#: The tool loop's (SPEC 15): tests/test_tool_crash.py crashes at each of them.
TOOL_POINTS = (
    "before_step_stored",
    "after_step_stored",
    "after_call_started",
    "after_call_finished",
    "awaiting_approval",
    "after_approval_stored",
)
#: A schedule's firing (SPEC 16): tests/test_schedules_cluster.py crashes at each of them.
SCHEDULE_POINTS = ("before_schedule_admission", "after_schedule_admission")
OWN_TESTS = (*ATTACHMENT_POINTS, *TOOL_POINTS, *SCHEDULE_POINTS)
POINTS = [p for p in EVENTS if p not in OWN_TESTS]
CHUNK_POINTS = ("after_send_before_record", "between_chunks")


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok(LONG)
        yield fake


@pytest.mark.process
@pytest.mark.parametrize("point", [p for p in POINTS if p not in CHUNK_POINTS])
async def test_peer(tmp_path: Path, model: FakeModel, point: str) -> None:
    gateway = make_gateway(tmp_path, model)
    try:
        await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill"})
        async with aiohttp.ClientSession() as http:
            headers = {"Idempotency-Key": "crash-1"}
            url = f"{gateway.url}/api/sessions/crash/chat"
            with pytest.raises(aiohttp.ClientError):
                await http.post(url, json={"message": "hello"}, headers=headers)
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            # The client retries with the same key, as a careful client does after a reset.
            with anyio.fail_after(20):
                r = await http.post(url, json={"message": "hello"}, headers=headers)
                body = await r.json()
    finally:
        await gateway.kill()
    assert r.status == 200 and body["message"]["content"] == LONG
    assert_one_answer(tmp_path / "botmux.db")


@pytest.mark.parametrize(
    ("point", "unrecorded"),
    [(p, "resend") for p in POINTS] + [("after_send_before_record", "drop")],
)
@pytest.mark.process
async def test_telegram(tmp_path: Path, model: FakeModel, point: str, unrecorded: str) -> None:
    async with open_fake_telegram() as tg:
        section = (
            telegram_section(tg)
            + f"allow_users = [{ALICE}]\npoll_timeout_s = 1\nrequest_timeout_s = 3\n"
        )
        keys = f'unrecorded_sends = "{unrecorded}"\n'
        gateway = make_gateway(tmp_path, model, section, keys)
        try:
            await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill"})
            tg.inject_message(ALICE, "hello")
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            with anyio.fail_after(20):
                await tg.wait_until(lambda: "".join(tg.sent_messages(ALICE)).endswith("The end."))
                await settle(gateway)
        finally:
            await gateway.kill()
        sent = tg.sent_messages(ALICE)
    assert_one_answer(tmp_path / "botmux.db")
    # Telegram cannot deduplicate a send: a chunk it took just before the crash is sent again
    # after the restart (the default), or, with unrecorded_sends = "drop", never twice.
    resent = point == "after_send_before_record" and unrecorded == "resend"
    assert_delivered(sent, duplicates_allowed=1 if resent else 0)
    if point == "after_send_before_record":
        assert len(sent) - len(set(sent)) == (1 if resent else 0)


@pytest.mark.process
@pytest.mark.parametrize("point", POINTS)
async def test_discord(tmp_path: Path, model: FakeModel, point: str) -> None:
    async with open_world() as dc:
        gateway = make_gateway(tmp_path, model, discord_toml(dc))
        try:
            await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill"})
            await dc.inject_message(CHANNEL_ID, mention("hello"), author_id=BOB)
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            with anyio.fail_after(20):
                await dc.wait_until(lambda: replies(dc).endswith("The end."))
                await settle(gateway)
        finally:
            await gateway.kill()
        sent = [m["content"] for m in dc.sent_messages(CHANNEL_ID)]
    assert_one_answer(tmp_path / "botmux.db")
    assert_delivered(sent, duplicates_allowed=0)  # the nonce makes a re-sent chunk a no-op


@pytest.mark.process
@pytest.mark.parametrize("point", POINTS)
async def test_slack(tmp_path: Path, model: FakeModel, point: str) -> None:
    """Killed after admission, the envelope was never acknowledged: Slack delivers it again
    to the restarted process's new connection (a duplicate), and the stored row is resumed."""
    async with open_fake_slack() as slack:
        gateway = make_gateway(tmp_path, model, slack_world.slack_toml(slack))
        try:
            await gateway.start(env={"BOTMUX_FAILPOINT": f"{point}:kill"})
            await slack.send(slack_world.ALICE_DM, "hello", user=slack_world.ALICE)
            await crash_at(gateway, point)
            await gateway.start(env={"BOTMUX_FAILPOINT": ""})
            with anyio.fail_after(20):
                await slack.wait_until(lambda: slack_replies(slack).endswith("The end."))
                await settle(gateway)
        finally:
            await gateway.kill()
        sent = slack.texts(slack_world.ALICE_DM)
    assert_one_answer(tmp_path / "botmux.db")
    # Slack cannot deduplicate a post: a chunk it took just before the crash is sent again.
    assert_delivered(sent, duplicates_allowed=1 if point == "after_send_before_record" else 0)


def slack_replies(slack: FakeSlack) -> str:
    return "".join(slack.texts(slack_world.ALICE_DM))


def replies(dc: FakeDiscord) -> str:
    return "".join(m["content"] for m in dc.sent_messages(CHANNEL_ID))


def assert_delivered(sent: list[str], *, duplicates_allowed: int) -> None:
    """Every chunk of the reply arrived, in order, with at most this many extra copies."""
    distinct = list(dict.fromkeys(sent))
    assert "".join("".join(distinct).split()) == "".join(LONG.split()), sent
    assert len(sent) - len(distinct) <= duplicates_allowed, sent


def test_every_failpoint_is_in_the_matrix() -> None:
    assert set(POINTS) | set(OWN_TESTS) == set(EVENTS)
    assert len(POINTS) == 6
    assert os.environ.get("BOTMUX_FAILPOINT") in (None, "")
