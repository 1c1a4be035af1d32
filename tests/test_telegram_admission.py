"""Exactly-once admission on Telegram: the polling offset moves only after the commit.

The adapter runs against the loopback Bot API with a stand-in for the runtime's Intake port
whose admission the test holds open, so the moment between "fetched" and "committed" can be
inspected: Telegram must still hold the update then, and again after a stop in that moment.
The last test does the same through a real gateway that is draining.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gateway.config import TelegramConfig, parse_config
from gateway.events import Event
from platforms.telegram import TelegramAdapter
from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model
from tests.fakes.runtime import HeldIntake
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.harness import config_text, running_gateway, telegram_section

pytestmark = pytest.mark.anyio

ALICE = 42


def adapter(tg: FakeTelegram, intake: HeldIntake) -> TelegramAdapter:
    config = TelegramConfig(token=tg.token, api_base=tg.origin, poll_timeout_s=5)
    events: list[Event] = []
    return TelegramAdapter(config, ledger=intake, access=intake, observe=events.append)


async def test_the_offset_advances_only_after_the_admission_commits(tg: FakeTelegram) -> None:
    intake = HeldIntake()
    intake.hold = True
    async with anyio.create_task_group() as group:
        await group.start(adapter(tg, intake).run, intake)
        first = tg.inject_message(ALICE, "first")["update_id"]
        second = tg.inject_message(ALICE, "second")["update_id"]
        with anyio.fail_after(10):
            await intake.entered.wait()
        # Fetched by the poller, admission in progress: Telegram still holds both updates and
        # no further getUpdates (which would carry the advanced offset) was made.
        polls = len(tg.calls_to("getUpdates"))
        await anyio.wait_all_tasks_blocked()
        assert not tg.is_confirmed(first) and not tg.is_confirmed(second)
        assert len(tg.calls_to("getUpdates")) == polls
        intake.released.set()
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(second)
        group.cancel_scope.cancel()
    assert [a.text for a in intake.admitted] == ["first", "second"]
    assert [a.platform_message_id for a in intake.admitted] == ["42:1", "42:2"]


async def test_stopping_during_an_admission_leaves_the_update_with_telegram(
    tg: FakeTelegram,
) -> None:
    crashed = HeldIntake()
    crashed.hold = True  # never completes: the process "dies" in the middle of admitting
    async with anyio.create_task_group() as group:
        await group.start(adapter(tg, crashed).run, crashed)
        update_id = tg.inject_message(ALICE, "in flight")["update_id"]
        with anyio.fail_after(10):
            await crashed.entered.wait()
        group.cancel_scope.cancel()
    # The stop's final getUpdates confirmed only what was admitted: nothing.
    assert not tg.is_confirmed(update_id)
    assert [u["update_id"] for u in tg.pending_updates()] == [update_id]

    restarted = HeldIntake()
    async with anyio.create_task_group() as group:
        await group.start(adapter(tg, restarted).run, restarted)
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(update_id)
        group.cancel_scope.cancel()
    assert [a.text for a in restarted.admitted] == ["in flight"]


async def test_a_failed_admission_is_fetched_again_and_admitted_once(tg: FakeTelegram) -> None:
    intake = HeldIntake()
    intake.fail_first = 1
    async with anyio.create_task_group() as group:
        await group.start(adapter(tg, intake).run, intake)
        one = tg.inject_message(ALICE, "one")["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(one)
        two = tg.inject_message(ALICE, "two")["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(two)
        group.cancel_scope.cancel()
    assert intake.attempts == 3  # "one" failed, came back, was admitted; then "two"
    assert [a.text for a in intake.admitted] == ["one", "two"]


@pytest.mark.gateway
async def test_updates_arriving_while_draining_are_not_acknowledged(tmp_path: Path) -> None:
    async with open_fake_model() as model, open_fake_telegram() as tg:
        await _drain_then_restart(tmp_path, model, tg)


async def _drain_then_restart(tmp_path: Path, model: FakeModel, tg: FakeTelegram) -> None:
    section = telegram_section(tg) + f"allow_users = [{ALICE}]\ntyping_interval_s = 0.05\n"
    text = config_text(tmp_path / "botmux.db", model.base_url, extra=section)
    model.default = lambda r: Hold(ok(f"answer to {r.last_user}"))
    async with running_gateway(parse_config(text, source="test", env={})) as (app, _):
        tg.inject_message(ALICE, "before the drain")
        with anyio.fail_after(10):
            await model.wait_for_requests(1)
        app.stop.set()  # draining: the running turn may finish, nothing new is taken
        late = tg.inject_message(ALICE, "during the drain")["update_id"]
        (telegram,) = app.adapters
        with anyio.fail_after(10):  # typing keeps calling the fake, so this is re-checked
            await tg.wait_until(lambda: telegram.statistics().held >= 1)  # type: ignore[attr-defined]
        model.release()
    assert tg.sent_messages(ALICE) == ["answer to before the drain"]
    assert not tg.is_confirmed(late)
    assert len(model.requests) == 1

    model.default = lambda r: ok(f"answer to {r.last_user}")
    async with running_gateway(parse_config(text, source="test", env={})):
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, ALICE)
            await tg.wait_for_confirmed(late)
    assert tg.sent_messages(ALICE) == ["answer to before the drain", "answer to during the drain"]
