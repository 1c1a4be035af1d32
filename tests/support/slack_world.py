"""The Slack test world: the fake Slack (tests/fakes/slack_server.py) with its people and
channels, the ``[slack]`` section that points botmux at it, and botmux running in front of it
in process. The Slack end-to-end tests, the crash and outage tests and the benchmark share it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.app import GatewayApp
from platforms.slack import SlackAdapter
from tests.fakes.openai_server import FakeModel
from tests.fakes.slack_server import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
)
from tests.harness import Events, free_port, make_config, running_gateway

ALICE = "U0ALICE01"  # on allow_users
BOB = "U0BOB0001"  # a member of the open channel, not on allow_users
STRANGER = "U0STRANGE"  # DMs the bot, needs pairing
OTHER_BOT = "U0OTHERBT"  # another app's bot user
ALICE_DM = "D0ALICE01"
STRANGER_DM = "D0STRANGE"
CHANNEL = "C0GENERAL"  # on allow_channels: everyone may talk to the bot there
CLOSED = "C0CLOSED1"  # not on allow_channels: only allowed and paired users


def slack_toml(slack: FakeSlack, extra: str = "", *, events: bool = False, listen: str = "") -> str:
    """The world's ``[slack]`` section: Socket Mode, or (``events``) the Events API on
    ``listen`` (a free port when not given)."""
    way = (
        f'signing_secret = "{SIGNING_SECRET}"\nlisten = "{listen or f"127.0.0.1:{free_port()}"}"\n'
        if events
        else f'app_token = "{APP_TOKEN}"\n'
    )
    return (
        "[slack]\n"
        f'bot_token = "{BOT_TOKEN}"\n'
        f'api_base = "{slack.api_base}"\n'
        f'allow_users = ["{ALICE}"]\n'
        f'allow_channels = ["{CHANNEL}"]\n'
        "ping_interval_s = 1\n" + way + extra
    )


def key(channel: str, thread_ts: str | None = None) -> str:
    return f"slack:{TEAM}:{channel}" + (f":thread:{thread_ts}" if thread_ts else "")


def mention(text: str) -> str:
    return f"<@{BOT_USER}> {text}"


def adapter_of(app: GatewayApp) -> SlackAdapter:
    (found,) = [a for a in app.adapters if isinstance(a, SlackAdapter)]
    return found


@asynccontextmanager
async def running_botmux(
    tmp_path: Path,
    slack: FakeSlack,
    model: FakeModel,
    extra: str = "",
    *,
    events: bool = False,
    record: Events | None = None,
) -> AsyncIterator[GatewayApp]:
    """botmux in process in front of the world (its store: ``tmp_path/botmux.db``); with
    ``events``, the fake posts to its Events API listener; ``record`` keeps what the gateway
    reported."""
    section = slack_toml(slack, extra, events=events)
    config = make_config(tmp_path / "botmux.db", model.base_url, extra=section)
    async with running_gateway(config, events=record) as (app, _):
        if events:
            port = adapter_of(app).events_port
            slack.events_url = f"http://127.0.0.1:{port}/slack/events"
        yield app
