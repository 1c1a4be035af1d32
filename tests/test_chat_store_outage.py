"""No acknowledgement without a stored row, on Telegram, on Discord and on Slack.

A real gateway (in process, real SQLite store), real python-telegram-bot and discord.py, the
loopback fakes. The store fails on demand from outside the gateway, as it would in
production: the test holds SQLite's write lock from another connection (``BEGIN EXCLUSIVE``:
the gateway's writer waits out its busy timeout, then its commit fails), or renames a table
the allowlist and pairing checks read or write. While the store fails nothing is
acknowledged (Telegram keeps the update; Discord's adapter keeps the message and tries it
again; Slack's envelope stays unacknowledged and its HTTP event is answered 503, so Slack
delivers it again); once it recovers the message is answered, exactly once.

Refusals (``Refused``: too many turns waiting, a message over the limit) are answers, not
store failures: the user gets a short notice and the message is acknowledged. They are
raised by ``Intake.admit`` before anything is stored, so a stand-in for the Intake port
raises them here.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import pytest

from gateway.app import GatewayApp
from gateway.config import DiscordConfig, TelegramConfig
from gateway.errors import MessageTooLong, Overloaded, Refused
from gateway.events_platforms import SlackAdmissionDeferred
from gateway.messages import Admission, Inbound
from platforms._refusals import BUSY_TEXT, too_long_text
from platforms.discord import DiscordAdapter
from platforms.discord.adapter import STORE_BUSY
from platforms.telegram import TelegramAdapter
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.openai_server import FakeModel, ok, open_fake_model
from tests.fakes.runtime import HeldIntake
from tests.fakes.slack_server import open_fake_slack
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.harness import Events, free_port, make_config, running_gateway, telegram_section
from tests.support.slack_world import ALICE as S_ALICE
from tests.support.slack_world import ALICE_DM as S_ALICE_DM
from tests.support.slack_world import running_botmux as slack_botmux

pytestmark = pytest.mark.anyio

ALICE = 42  # Telegram: allowed; her private chat has the same id
STRANGER = 77  # Telegram: not allowed, gets a pairing code

D_TOKEN = "discord-test-token"
D_BOT = 990_000_000_000_000_001
D_ALICE = 990_000_000_000_000_010
D_STRANGER = 990_000_000_000_000_012
D_GUILD = 990_000_000_000_000_100
D_DM = 990_000_000_000_000_300
D_STRANGER_DM = 990_000_000_000_000_301


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok(f"answer to {r.last_user}")
        yield fake


class LogWatch(logging.Handler):
    """Counts log records whose message starts with ``prefix`` and wakes whoever waits."""

    def __init__(self, prefix: str) -> None:
        super().__init__(logging.DEBUG)
        self.prefix = prefix
        self.count = 0
        self._changed = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.count += 1
            self._changed.set()
            self._changed = anyio.Event()

    async def wait(self, count: int = 1) -> None:
        while self.count < count:
            await self._changed.wait()


@contextmanager
def watching(prefix: str) -> Iterator[LogWatch]:
    watch = LogWatch(prefix)
    root = logging.getLogger()
    root.addHandler(watch)
    try:
        yield watch
    finally:
        root.removeHandler(watch)


@contextmanager
def write_lock(db: Path) -> Iterator[None]:
    """Hold SQLite's write lock from another connection: every commit of the gateway fails
    (after its busy timeout) until the block ends."""
    conn = sqlite3.connect(db, isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield
        conn.execute("COMMIT")
    finally:
        conn.close()


@contextmanager
def table_gone(db: Path, table: str) -> Iterator[None]:
    """``table`` is missing until the block ends: every read or write of it fails."""
    with sqlite3.connect(db, isolation_level=None, timeout=10) as conn:
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        yield
    finally:
        with sqlite3.connect(db, isolation_level=None, timeout=10) as conn:
            conn.execute(f"ALTER TABLE {table}_away RENAME TO {table}")


def user_rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        query = "SELECT content, state FROM messages WHERE role = 'user' ORDER BY id"
        return list(conn.execute(query))


def pairing_requests(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT user_id FROM pairing_codes")]


def deferred(app: GatewayApp) -> int:
    """The chat adapter's admissions the store failed (to be tried again)."""
    (adapter,) = app.adapters
    assert isinstance(adapter, TelegramAdapter | DiscordAdapter)
    return adapter.statistics().deferred


# -- Telegram ----------------------------------------------------------------------------------


@asynccontextmanager
async def telegram_gateway(
    tmp_path: Path, model: FakeModel, webhook: str = ""
) -> AsyncIterator[tuple[GatewayApp, FakeTelegram]]:
    async with open_fake_telegram() as tg:
        section = (
            telegram_section(tg) + f"allow_users = [{ALICE}]\ntyping_interval_s = 1\n{webhook}"
        )
        config = make_config(tmp_path / "botmux.db", model.base_url, extra=section)
        async with running_gateway(config) as (app, _):
            yield app, tg


@pytest.mark.gateway
async def test_telegram_update_is_not_confirmed_while_the_store_cannot_commit(
    tmp_path: Path, model: FakeModel
) -> None:
    db = tmp_path / "botmux.db"
    with anyio.fail_after(60):
        async with telegram_gateway(tmp_path, model) as (app, tg):
            with write_lock(db):
                update = tg.inject_message(ALICE, "while locked")["update_id"]
                await tg.wait_until(lambda: deferred(app) >= 1)
                assert not tg.is_confirmed(update)
                assert tg.sent_messages(ALICE) == []
            await tg.wait_for_sent(1, ALICE)
            await tg.wait_for_confirmed(update)
            tg.inject_message(ALICE, "after")
            await tg.wait_for_sent(2, ALICE)
    assert tg.sent_messages(ALICE) == ["answer to while locked", "answer to after"]
    assert user_rows(db) == [("while locked", "answered"), ("after", "answered")]
    assert [r.last_user for r in model.requests] == ["while locked", "after"]


@pytest.mark.gateway
async def test_telegram_webhook_answers_503_while_the_store_cannot_commit(
    tmp_path: Path, model: FakeModel
) -> None:
    db = tmp_path / "botmux.db"
    port = free_port()
    webhook = (
        f'mode = "webhook"\nwebhook_listen = "127.0.0.1:{port}"\n'
        f'webhook_url = "http://127.0.0.1:{port}/hook"\nwebhook_secret = "s3cret"\n'
    )
    with anyio.fail_after(60):
        async with telegram_gateway(tmp_path, model, webhook) as (_, tg):
            tg.inject_message(ALICE, "while locked")
            with write_lock(db):
                assert await tg.deliver_webhook() == [503]  # Telegram keeps it, sends it again
            assert len(tg.pending_updates()) == 1
            assert await tg.deliver_webhook() == [200]
            await tg.wait_for_sent(1, ALICE)
    assert tg.sent_messages(ALICE) == ["answer to while locked"]
    assert user_rows(db) == [("while locked", "answered")]


@pytest.mark.gateway
@pytest.mark.parametrize("table", ["approved_users", "pairing_codes"])
async def test_telegram_access_check_failing_in_the_store_leaves_the_update_with_telegram(
    tmp_path: Path, model: FakeModel, table: str
) -> None:
    """``approved_users``: ``is_approved`` fails; ``pairing_codes``: ``request_pairing``."""
    db = tmp_path / "botmux.db"
    with anyio.fail_after(60):
        async with telegram_gateway(tmp_path, model) as (app, tg):
            await tg.wait_for_poller()
            with table_gone(db, table):
                update = tg.inject_message(STRANGER, "let me in")["update_id"]
                await tg.wait_until(lambda: deferred(app) >= 1)
                assert not tg.is_confirmed(update)
            await tg.wait_for_confirmed(update)
            [code] = await tg.wait_for_sent(1, STRANGER)
            tg.inject_message(ALICE, "am I in?")  # handled in order: after the stranger
            await tg.wait_for_sent(1, ALICE)
    assert "botmux pairing approve telegram" in code
    assert tg.sent_messages(STRANGER) == [code]  # one code, however often it was tried
    assert pairing_requests(db) == [str(STRANGER)]
    assert user_rows(db) == [("am I in?", "answered")]


# -- Discord -----------------------------------------------------------------------------------


@asynccontextmanager
async def discord_world() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token=D_TOKEN, bot_user_id=D_BOT) as dc:
        dc.add_user(D_ALICE, "alice")
        dc.add_guild(D_GUILD, "botmux guild", member_ids=[D_ALICE])
        dc.add_dm_channel(D_DM, D_ALICE)
        dc.add_dm_channel(D_STRANGER_DM, D_STRANGER)
        yield dc


def discord_section(dc: FakeDiscord) -> str:
    return (
        f'[discord]\ntoken = "{D_TOKEN}"\napi_base = "{dc.api_base}"\n'
        f'gateway_url = "{dc.gateway_url}"\nallow_users = [{D_ALICE}]\n'
        "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\nconnect_timeout_s = 10\n"
    )


@asynccontextmanager
async def discord_gateway(
    tmp_path: Path, model: FakeModel
) -> AsyncIterator[tuple[GatewayApp, FakeDiscord]]:
    async with discord_world() as dc:
        config = make_config(tmp_path / "botmux.db", model.base_url, extra=discord_section(dc))
        async with running_gateway(config) as (app, _):
            yield app, dc


@pytest.mark.gateway
async def test_discord_message_is_kept_and_admitted_once_the_store_commits_again(
    tmp_path: Path, model: FakeModel
) -> None:
    db = tmp_path / "botmux.db"
    with anyio.fail_after(60), watching("discord message not admitted") as failed:
        async with discord_gateway(tmp_path, model) as (_, dc):
            with write_lock(db):
                await dc.inject_message(D_DM, "while locked", author_id=D_ALICE)
                await dc.inject_message(D_DM, "behind it", author_id=D_ALICE)
                await failed.wait()
                assert dc.sent_messages(D_DM) == []
            replies = await dc.wait_for_messages(D_DM, 2)
    assert [m["content"] for m in replies] == ["answer to while locked", "answer to behind it"]
    assert user_rows(db) == [("while locked", "answered"), ("behind it", "answered")]
    assert [r.last_user for r in model.requests] == ["while locked", "behind it"]


@pytest.mark.gateway
@pytest.mark.parametrize("table", ["approved_users", "pairing_codes"])
async def test_discord_access_check_failing_in_the_store_is_tried_again(
    tmp_path: Path, model: FakeModel, table: str
) -> None:
    db = tmp_path / "botmux.db"
    with anyio.fail_after(60), watching("discord message not admitted") as failed:
        async with discord_gateway(tmp_path, model) as (_, dc):
            with table_gone(db, table):
                await dc.inject_message(D_STRANGER_DM, "let me in", author_id=D_STRANGER)
                await failed.wait()
                assert dc.sent_messages(D_STRANGER_DM) == []
            [code] = await dc.wait_for_messages(D_STRANGER_DM, 1)
            await dc.inject_message(D_DM, "am I in?", author_id=D_ALICE)
            await dc.wait_for_messages(D_DM, 1)
    assert "botmux pairing approve discord" in code["content"]
    assert len(dc.sent_messages(D_STRANGER_DM)) == 1
    assert pairing_requests(db) == [str(D_STRANGER)]
    assert user_rows(db) == [("am I in?", "answered")]


@pytest.mark.gateway
async def test_discord_slash_command_the_store_failed_is_told_to_try_again(
    tmp_path: Path, model: FakeModel
) -> None:
    """An interaction cannot wait for the store nor come again: the user is told."""
    db = tmp_path / "botmux.db"
    with anyio.fail_after(60):
        async with discord_gateway(tmp_path, model) as (_, dc):
            await dc.wait_for_calls("PUT", "/applications/{application_id}/commands")
            with table_gone(db, "approved_users"):
                await dc.inject_interaction(D_STRANGER_DM, "status", user_id=D_STRANGER)
                await dc.wait_until(lambda: len(dc.interaction_responses) == 1)
            await dc.inject_interaction(D_STRANGER_DM, "status", user_id=D_STRANGER)
            await dc.wait_until(lambda: len(dc.interaction_responses) == 2)
    [failed, refused] = [r["data"] for r in dc.interaction_responses]
    assert failed["content"] == STORE_BUSY and failed["flags"] & 64  # only they see it
    assert refused["content"] == "You're not on this bot's allow list."


# -- refusals: a notice, and the message acknowledged -------------------------------------------


class RefusingIntake(HeldIntake):
    """The Intake port refusing admissions as ``Intake.admit`` does, before storing."""

    def __init__(self, refusals: list[Refused]) -> None:
        super().__init__()
        self.refusals = refusals

    async def admit(self, inbound: Inbound) -> Admission:
        if self.refusals:
            raise self.refusals.pop(0)
        return await super().admit(inbound)


def refusals() -> list[Refused]:
    busy = Overloaded("too many turns wait", retry_after=5.0, scope="conversation")
    return [
        MessageTooLong("too long", limit=100, length=150),
        busy,
        Overloaded("still too many", retry_after=5.0, scope="conversation"),
    ]


async def test_telegram_refusals_are_answered_and_acknowledged() -> None:
    intake = RefusingIntake(refusals())
    async with open_fake_telegram() as tg, anyio.create_task_group() as group:
        config = TelegramConfig(token=tg.token, api_base=tg.origin, poll_timeout_s=5)
        adapter = TelegramAdapter(config, ledger=intake, access=intake, observe=lambda event: None)
        await group.start(adapter.run, intake)
        ids = [tg.inject_message(ALICE, text)["update_id"] for text in ("long", "one", "two")]
        last = tg.inject_message(ALICE, "admitted")["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(last)
            await tg.wait_for_sent(2, ALICE)
        group.cancel_scope.cancel()
    assert all(tg.is_confirmed(update) for update in ids)
    # The second busy notice within the minute is not sent: one per chat is enough.
    assert tg.sent_messages(ALICE) == [too_long_text(100), BUSY_TEXT]
    assert [a.text for a in intake.admitted] == ["admitted"]
    assert adapter.statistics().refused == 3


async def test_discord_refusals_are_answered_and_the_next_message_is_admitted() -> None:
    intake = RefusingIntake(refusals())
    async with discord_world() as dc, anyio.create_task_group() as group:
        config = DiscordConfig(
            token=D_TOKEN,
            api_base=dc.api_base,
            gateway_url=dc.gateway_url,
            allow_users=(D_ALICE,),
            guild_ready_timeout_s=0.05,
            identify_delay_s=0,
            connect_timeout_s=10,
            slash_commands=False,
        )
        adapter = DiscordAdapter(config, ledger=intake, access=intake)
        await group.start(adapter.run, intake)
        for text in ("long", "one", "two", "admitted", "/status"):
            await dc.inject_message(D_DM, text, author_id=D_ALICE)
        with anyio.fail_after(10):
            replies = await dc.wait_for_messages(D_DM, 3)  # the command: handled last
        group.cancel_scope.cancel()
    answers = sorted(m["content"] for m in replies)  # each sent by a task of its own
    assert answers == sorted([too_long_text(100), BUSY_TEXT, "ran /status"])
    assert [a.text for a in intake.admitted] == ["admitted"]
    assert adapter.statistics().refused == 3


# -- Slack -------------------------------------------------------------------------------------


@pytest.mark.gateway
@pytest.mark.parametrize("events", [False, True], ids=["socket", "events"])
async def test_slack_envelope_stays_unacknowledged_until_the_store_commits_again(
    tmp_path: Path, model: FakeModel, events: bool
) -> None:
    """While the store cannot commit, the envelope is not acknowledged (the Events API's post
    is answered 503); Slack's retry after the store is back is admitted and answered once."""
    db = tmp_path / "botmux.db"
    seen = Events()
    with anyio.fail_after(60):
        async with (
            open_fake_slack() as slack,
            slack_botmux(tmp_path, slack, model, events=events, record=seen),
        ):
            with write_lock(db):
                await slack.send(S_ALICE_DM, "while locked", user=S_ALICE)
                [envelope] = slack.envelopes
                await seen.wait_for(SlackAdmissionDeferred)
                assert not envelope.acked and slack.bot_messages(S_ALICE_DM) == []
            if events:
                await slack.wait_until(lambda: envelope.answers == [503])
            await slack.redeliver()  # Slack's retry
            await slack.wait_acked(envelope)
            [reply] = await slack.wait_for_bot_messages(S_ALICE_DM, 1)
    assert reply["text"] == "answer to while locked"
    assert user_rows(db) == [("while locked", "answered")]
    assert [r.last_user for r in model.requests] == ["while locked"]


@pytest.mark.gateway
async def test_slack_command_the_store_failed_runs_on_slacks_next_try(
    tmp_path: Path, model: FakeModel
) -> None:
    """A command's answer is claimed in the store before it runs (so the other event of a
    mention's pair, maybe on another node, does not answer again). When the command itself
    then fails in the store, the claim is given up with it: the envelope stays
    unacknowledged, and Slack's next try runs the command and answers it, once."""
    db = tmp_path / "botmux.db"
    seen = Events()
    with anyio.fail_after(60):
        async with (
            open_fake_slack() as slack,
            slack_botmux(tmp_path, slack, model, record=seen),
        ):
            with table_gone(db, "conversations"):  # /new's reset fails; the claim does not
                await slack.send(S_ALICE_DM, "/new", user=S_ALICE)
                [envelope] = slack.envelopes
                await seen.wait_for(SlackAdmissionDeferred)
                assert not envelope.acked and slack.bot_messages(S_ALICE_DM) == []
            await slack.redeliver()  # Slack's retry
            await slack.wait_acked(envelope)
            [answer] = await slack.wait_for_bot_messages(S_ALICE_DM, 1)
    assert answer["text"] == "Started a fresh context: earlier messages no longer count."
    assert model.requests == []
