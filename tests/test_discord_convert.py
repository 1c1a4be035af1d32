"""The Discord adapter's pure rules: what becomes a turn, how replies are marked (their
rendering and cutting: test_discord_render.py)."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.config import DiscordConfig, parse_config
from gateway.errors import ConfigError
from gateway.messages import OutboxChunk
from platforms.discord import convert
from platforms.discord.convert import Command, Ignore, Seen, Turn
from tests.support.discord_world import SEEN_BOT_ID as BOT
from tests.support.discord_world import seen

CONFIG = DiscordConfig(token="t", allow_guilds=(7,), answer_all_channels=(500,))


@pytest.mark.parametrize(
    ("message", "decision"),
    [
        (seen("hello"), Ignore("not_addressed")),
        (seen(f"<@{BOT}>  hello   there"), Turn("hello there")),
        (seen(f"hey <@!{BOT}>, look"), Turn("hey look")),
        (seen("sure?", replies_to_bot=True), Turn("sure?")),
        (seen("open", channel_id=500), Turn("open")),
        (
            seen("in a thread of an open channel", channel_id=501, parent_id=500),
            Turn("in a thread of an open channel"),
        ),
        (seen("dm", guild_id=None), Turn("dm")),
        (seen(f"<@{BOT}>", guild_id=None), Ignore("empty")),
        (seen(f"<@{BOT}> hi", author_is_bot=True), Ignore("bot")),
        (seen("echo", author_id=BOT, guild_id=None), Ignore("bot")),
        (seen(f"<@{BOT}> hi", guild_id=8), Ignore("guild_not_allowed")),
        (seen(f"<@{BOT}> /status"), Command("status")),
        (seen("/new please", guild_id=None), Command("new")),
        (seen("/start", guild_id=None), Command("help")),
        (seen("/Stop@botmux", guild_id=None), Command("stop")),
        (seen("/etc/passwd is a file", guild_id=None), Turn("/etc/passwd is a file")),
        (seen("/status"), Ignore("not_addressed")),  # a guild command must be addressed too
    ],
)
def test_decide(message: Seen, decision: convert.Decision) -> None:
    assert convert.decide(message, CONFIG, BOT) == decision


def test_mention_policy_per_guild_and_globally() -> None:
    message = seen("anything")
    assert convert.decide(message, CONFIG, BOT) == Ignore("not_addressed")
    per_guild = dataclasses.replace(CONFIG, answer_all_guilds=(7,))
    assert convert.decide(message, per_guild, BOT) == Turn("anything")
    everywhere = dataclasses.replace(CONFIG, require_mention=False)
    assert convert.decide(message, everywhere, BOT) == Turn("anything")
    anywhere = dataclasses.replace(CONFIG, allow_guilds=())
    assert convert.decide(seen("<@42> x", guild_id=99), anywhere, BOT) == Turn("x")


def test_other_mentions_are_named_for_the_model() -> None:
    text = convert.turn_text(f"<@{BOT}>: ask <@77>, and <@!78>", BOT, {77: "alice"})
    assert text == "ask @alice, and <@!78>"


def test_keys_and_inbound() -> None:
    assert convert.conversation_key(123) == "discord:123"
    assert convert.channel_of("discord:123") == 123
    with pytest.raises(ValueError):
        convert.channel_of("telegram:123")
    inbound = convert.inbound(seen("x"), "x")
    assert (inbound.platform_message_id, inbound.reply_target, inbound.sender) == (
        "1000",
        "1000",
        "5",
    )


def chunk(chunk_id: int, seq: int = 0, created_at: float = 1_900_000_000.123) -> OutboxChunk:
    return OutboxChunk(chunk_id, "discord:1", "discord", 9, 8, seq, "t", created_at, "555")


def test_nonce_is_short_stable_and_distinct() -> None:
    huge = chunk(10**15, created_at=4_000_000_000.999)
    assert len(convert.nonce(huge)) <= 25
    assert convert.nonce(chunk(7)) == convert.nonce(chunk(7))
    assert convert.nonce(chunk(7)) != convert.nonce(chunk(8))
    assert convert.nonce(chunk(7)) != convert.nonce(chunk(7, created_at=1_900_000_001.0))


def test_which_chunks_reply() -> None:
    assert convert.replies(chunk(1, 0), "first") and not convert.replies(chunk(2, 1), "first")
    assert convert.replies(chunk(2, 1), "all")
    assert not convert.replies(chunk(1, 0), "none")
    assert not convert.replies(dataclasses.replace(chunk(1), reply_target=""), "all")


@pytest.mark.parametrize(
    ("line", "path"),
    [
        ("chunk_chars = 2001", "discord.chunk_chars"),
        ("max_lines = 3", "discord.max_lines"),
        ("guild_access = 'some'", "discord.guild_access"),
        ("reply_to = 'last'", "discord.reply_to"),
        ("backfill_messages = 101", "discord.backfill_messages"),
        ("rate_limit_wait_s = 5", "discord.rate_limit_wait_s"),
    ],
)
def test_discord_config_refuses_bad_values(line: str, path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f'[discord]\ntoken = "t"\n{line}\n', source="t.toml", env={})
    assert err.value.path == path


def test_discord_config_defaults() -> None:
    config = parse_config('[discord]\ntoken = "t"\n', source="t.toml", env={}).discord
    assert config is not None
    assert (config.chunk_chars, config.max_lines, config.require_mention) == (2000, 0, True)
    assert (config.guild_access, config.reply_to, config.backfill_messages) == (
        "allowed",
        "first",
        50,
    )
