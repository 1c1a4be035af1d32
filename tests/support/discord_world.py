"""The Discord test world: the fake Discord (tests/fakes/discord_server.py) with its users,
guilds and channels, the ``[discord]`` section that points botmux at it, and botmux running
in front of it in process. The Discord end-to-end tests, the crash tests and the hostile
updates share it; ``seen`` builds the adapter's pure rules' input (platforms/discord/convert.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.app import GatewayApp
from platforms.discord.convert import Seen
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.openai_server import FakeModel
from tests.harness import config_text, make_config, running_gateway

TOKEN = "discord-test-token"
BOT_ID = 990_000_000_000_000_001
OTHER_BOT_ID = 990_000_000_000_000_002
ALICE = 990_000_000_000_000_010  # on allow_users
BOB = 990_000_000_000_000_011  # a guild member, not on allow_users
STRANGER = 990_000_000_000_000_012  # DMs the bot, needs pairing
GUILD_ID = 990_000_000_000_000_100
CHANNEL_ID = 990_000_000_000_000_101  # mention required
OPEN_CHANNEL_ID = 990_000_000_000_000_102  # answer_all_channels
THREAD_ID = 990_000_000_000_000_103
OTHER_GUILD_ID = 990_000_000_000_000_200  # not on allow_guilds
OTHER_CHANNEL_ID = 990_000_000_000_000_201
DM_ID = 990_000_000_000_000_300  # alice's DM
STRANGER_DM_ID = 990_000_000_000_000_301


@asynccontextmanager
async def open_world() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token=TOKEN, bot_user_id=BOT_ID) as dc:
        dc.add_user(ALICE, "alice")
        dc.add_user(BOB, "bob")
        dc.add_user(OTHER_BOT_ID, "otherbot", bot=True)
        dc.add_guild(GUILD_ID, "botmux guild", member_ids=[ALICE, BOB, OTHER_BOT_ID])
        dc.add_text_channel(GUILD_ID, CHANNEL_ID, "general")
        dc.add_text_channel(GUILD_ID, OPEN_CHANNEL_ID, "ask-the-bot")
        dc.add_thread(GUILD_ID, CHANNEL_ID, THREAD_ID, "a thread")
        dc.add_guild(OTHER_GUILD_ID, "elsewhere", member_ids=[ALICE])
        dc.add_text_channel(OTHER_GUILD_ID, OTHER_CHANNEL_ID, "random")
        dc.add_dm_channel(DM_ID, ALICE)
        dc.add_dm_channel(STRANGER_DM_ID, STRANGER)
        yield dc


def discord_toml(dc: FakeDiscord, extra: str = "") -> str:
    """The test world's section; guilds open to every member unless ``extra`` decides."""
    access = "" if "guild_access" in extra else 'guild_access = "everyone"\n'
    return (
        "[discord]\n"
        f'token = "{TOKEN}"\n'
        f'api_base = "{dc.api_base}"\n'
        f'gateway_url = "{dc.gateway_url}"\n'
        f"allow_users = [{ALICE}]\n"
        f"allow_guilds = [{GUILD_ID}]\n"
        f"answer_all_channels = [{OPEN_CHANNEL_ID}]\n"
        "guild_ready_timeout_s = 0.05\n"
        "identify_delay_s = 0\n"
        "connect_timeout_s = 10\n" + access + extra
    )


def discord_config_text(tmp_path: Path, dc: FakeDiscord, model: FakeModel, **kw: str) -> str:
    return config_text(
        tmp_path / "botmux.db", model.base_url, extra=discord_toml(dc, kw.get("extra", ""))
    )


@asynccontextmanager
async def running_botmux(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel, extra: str = ""
) -> AsyncIterator[GatewayApp]:
    """botmux in process in front of the world (its store: ``tmp_path/botmux.db``)."""
    config = make_config(tmp_path / "botmux.db", model.base_url, extra=discord_toml(dc, extra))
    async with running_gateway(config) as (app, _):
        yield app


def mention(text: str) -> str:
    return f"<@{BOT_ID}> {text}"


# -- the adapter's pure rules -------------------------------------------------------------------

SEEN_BOT_ID = 42  # the bot, in the messages ``seen`` builds


def seen(content: str, **kw: object) -> Seen:
    """A guild message as the adapter's rules see it; ``kw`` replaces any field."""
    base: dict[str, object] = {
        "message_id": 1000,
        "channel_id": 100,
        "guild_id": 7,
        "parent_id": None,
        "author_id": 5,
        "author_name": "bob",
        "author_is_bot": False,
        "content": content,
        "mentions_bot": f"<@{SEEN_BOT_ID}>" in content or f"<@!{SEEN_BOT_ID}>" in content,
        "replies_to_bot": False,
    }
    return Seen(**{**base, **kw})  # type: ignore[arg-type]
