"""Self-test of the local Discord fake, driven by the real discord.py `Client` alone.

Why: the Discord adapter's end-to-end tests trust `tests/fakes/discord_server.py` to behave
like Discord where it matters (login, READY and GUILD_CREATE, MESSAGE_CREATE in DMs, guild
channels and threads, nonces, 429s, RESUME with replay, re-IDENTIFY, history, and the edits
and per-channel rate limits streaming previews rely on). These tests
pin that down with no botmux code involved, so a failing adapter test points at the adapter.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import pytest

from tests.fakes._rate_limits import Limit
from tests.fakes.discord_server import (
    DiscordLimits,
    FakeDiscord,
    open_fake_discord,
    point_discord_py_at,
)

with warnings.catch_warnings():
    # discord.py imports the stdlib's audioop, deprecated since 3.11: not ours to fix.
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord
    from discord import app_commands

pytestmark = pytest.mark.anyio

TOKEN = "fake.bot.token"
BOT_ID = 1_000
USER_ID = 2_000
GUILD_ID = 3_000
CHANNEL_ID = 3_001
THREAD_ID = 3_002
DM_ID = 4_000
SEND_ROUTE = "/channels/{channel_id}/messages"
RESUME, IDENTIFY = 6, 2


class RecordingClient(discord.Client):
    """A discord.py client that hands its messages and lifecycle events to the test."""

    def __init__(self, *, intents: discord.Intents) -> None:
        # A small guild_ready_timeout: on_ready otherwise waits 2 s after the last GUILD_CREATE.
        super().__init__(intents=intents, guild_ready_timeout=0.1)
        self._messages_in, self.messages = anyio.create_memory_object_stream[discord.Message](100)
        self._lifecycle_in, self.lifecycle = anyio.create_memory_object_stream[str](100)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """Skip the 5 s discord.py sleeps before every IDENTIFY but the first."""

    async def on_ready(self) -> None:
        self._lifecycle_in.send_nowait("ready")

    async def on_resumed(self) -> None:
        self._lifecycle_in.send_nowait("resumed")

    async def on_message(self, message: discord.Message) -> None:
        self._messages_in.send_nowait(message)

    async def next_message(self) -> discord.Message:
        """The next message someone else sent (the fake echoes the bot's own, like Discord)."""
        async for message in self.messages:
            if message.author.id != BOT_ID:
                return message
        raise AssertionError("message stream closed")

    async def aclose_streams(self) -> None:
        for stream in (self._messages_in, self.messages, self._lifecycle_in, self.lifecycle):
            await stream.aclose()


def bot_intents(*, message_content: bool = True, members: bool = False) -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = message_content
    intents.members = members
    return intents


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token=TOKEN, bot_user_id=BOT_ID) as fake:
        fake.add_user(USER_ID, "alice")
        fake.add_guild(GUILD_ID, "botmux test guild", member_ids=[USER_ID])
        fake.add_text_channel(GUILD_ID, CHANNEL_ID, "general")
        fake.add_thread(GUILD_ID, CHANNEL_ID, THREAD_ID, "a thread")
        fake.add_dm_channel(DM_ID, USER_ID)
        yield fake


@asynccontextmanager
async def running_client(
    dc: FakeDiscord, intents: discord.Intents | None = None
) -> AsyncIterator[RecordingClient]:
    """A started, ready client pointed at `dc`; closed (and waited for) on exit."""
    client = RecordingClient(intents=intents or bot_intents())
    point_discord_py_at(client, api_base=dc.api_base, gateway_url=dc.gateway_url)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.start, TOKEN)
            try:
                with anyio.fail_after(10):
                    assert await client.lifecycle.receive() == "ready"
                yield client
            finally:
                await client.close()
    finally:
        await client.aclose_streams()


async def test_messages_in_dm_guild_channel_and_thread_and_replies(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            assert client.user is not None and client.user.id == BOT_ID
            guild = client.get_guild(GUILD_ID)
            assert guild is not None and guild.name == "botmux test guild"
            assert isinstance(client.get_channel(CHANNEL_ID), discord.TextChannel)
            assert isinstance(guild.get_thread(THREAD_ID), discord.Thread)

            await dc.inject_message(DM_ID, "hello bot", author_id=USER_ID)
            dm = await client.next_message()
            assert isinstance(dm.channel, discord.DMChannel)
            assert (dm.author.id, dm.content, dm.guild) == (USER_ID, "hello bot", None)
            await dm.reply("pong")
            [reply] = await dc.wait_for_messages(DM_ID, 1)
            assert reply["content"] == "pong"
            assert reply["message_reference"]["message_id"] == str(dm.id)

            await dc.inject_message(CHANNEL_ID, f"<@{BOT_ID}> in guild", author_id=USER_ID)
            in_guild = await client.next_message()
            assert isinstance(in_guild.channel, discord.TextChannel)
            assert in_guild.guild is not None and in_guild.guild.id == GUILD_ID
            assert client.user in in_guild.mentions
            await in_guild.channel.typing()
            await in_guild.channel.send("hello guild")
            [sent] = await dc.wait_for_messages(CHANNEL_ID, 1)
            assert (sent["content"], sent["guild_id"]) == ("hello guild", str(GUILD_ID))
            assert len(dc.calls("POST", "/channels/{channel_id}/typing")) == 1

            await dc.inject_message(THREAD_ID, "in a thread", author_id=USER_ID)
            in_thread = await client.next_message()
            assert isinstance(in_thread.channel, discord.Thread)
            assert in_thread.channel.parent_id == CHANNEL_ID

        await dc.wait_until(lambda: dc.connections[-1].close_code is not None)
    # Client.close() asks for 1000, but aiohttp first wakes discord.py's reader, which closes
    # with its default 4000 when it is waiting on the socket (it nearly always is).
    assert dc.connections[-1].close_code in (1000, 4000)
    assert dc.connections[0].query == {"v": "10", "encoding": "json", "compress": "zlib-stream"}
    assert {c.headers["Authorization"] for c in dc.rest_calls} == {f"Bot {TOKEN}"}
    assert dc.calls("GET", "/users/@me") and dc.calls("GET", "/oauth2/applications/@me")


async def test_repeated_nonce_creates_one_message(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            first = await channel.send("exactly once", nonce="chunk-1")
            again = await channel.send("exactly once", nonce="chunk-1")
            other = await channel.send("another", nonce="chunk-2")
    assert first.id == again.id != other.id
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["exactly once", "another"]
    bodies = [c.json for c in dc.calls("POST", SEND_ROUTE)]
    assert [(b["nonce"], b["enforce_nonce"]) for b in bodies][:2] == [("chunk-1", True)] * 2


async def test_rate_limited_send_is_waited_out_and_creates_one_message(dc: FakeDiscord) -> None:
    dc.fail_next("POST", SEND_ROUTE, status=429, retry_after=0.2)
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            message = await channel.send("after a 429")
    assert [c.status for c in dc.calls("POST", SEND_ROUTE)] == [429, 200]
    assert [m["id"] for m in dc.sent_messages(CHANNEL_ID)] == [str(message.id)]


async def test_server_error_and_bad_token_surface_as_discord_errors(dc: FakeDiscord) -> None:
    dc.fail_next("POST", f"/channels/{CHANNEL_ID}/messages", status=503)
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            with pytest.raises(discord.DiscordServerError):
                await channel.send("lost to a 503")
            with pytest.raises(discord.HTTPException) as too_long:
                await channel.send("x" * 2001)
            assert (too_long.value.status, too_long.value.code) == (400, 50035)

        intruder = RecordingClient(intents=bot_intents())
        point_discord_py_at(intruder, api_base=dc.api_base, gateway_url=dc.gateway_url)
        try:
            with pytest.raises(discord.LoginFailure):
                await intruder.login("not-the-token")
        finally:
            await intruder.close()
            await intruder.aclose_streams()
    assert dc.sent_messages() == []
    assert dc.rest_calls[-1].status == 401


async def test_upload_edit_and_delete(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            upload = await channel.send("see file", file=discord.File(io.BytesIO(b"hi"), "a.txt"))
            assert [(a.filename, a.size) for a in upload.attachments] == [("a.txt", 2)]
            draft = await channel.send("draft")
            edited = await draft.edit(content="final")
            assert edited.content == "final" and edited.edited_at is not None
            assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["see file", "final"]
            await edited.delete()
    assert [m["content"] for m in dc.sent_messages(CHANNEL_ID)] == ["see file"]


async def test_dropped_websocket_resumes_and_replays_missed_events(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            with dc.connections_held():
                await dc.drop_websocket(resumable=True)
                await dc.inject_message(CHANNEL_ID, f"<@{BOT_ID}> while away", author_id=USER_ID)
            missed = await client.next_message()
            assert missed.content == f"<@{BOT_ID}> while away"
            assert await client.lifecycle.receive() == "resumed"

            await dc.inject_message(CHANNEL_ID, f"<@{BOT_ID}> and after", author_id=USER_ID)
            assert (await client.next_message()).content == f"<@{BOT_ID}> and after"
    assert len(dc.ops(IDENTIFY)) == 1
    [resume] = dc.ops(RESUME)
    assert dc.connections[resume.connection].path == "/resume-gateway"  # READY's resume URL
    assert resume.d["seq"] < dc.statistics()["seq"]


async def test_non_resumable_drop_reidentifies_and_history_has_the_gap(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            with dc.connections_held():
                await dc.drop_websocket(resumable=False)
                gap = await dc.inject_message(CHANNEL_ID, "sent while offline", author_id=USER_ID)
            assert await client.lifecycle.receive() == "ready"  # a fresh session, not a RESUME

            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            recent = [m async for m in channel.history(limit=5)]
            assert [m.id for m in recent] == [int(gap["id"])]

            await dc.inject_message(DM_ID, "back online", author_id=USER_ID)
            assert (await client.next_message()).content == "back online"
    assert (len(dc.ops(RESUME)), len(dc.ops(IDENTIFY))) == (1, 2)
    assert dc.statistics()["sessions"] == 2


async def test_reconnect_and_invalid_session_opcodes_on_a_live_socket(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            await dc.request_reconnect()
            assert await client.lifecycle.receive() == "resumed"
            await dc.invalidate_session(resumable=False)
            assert await client.lifecycle.receive() == "ready"
            shards, url, _ = await client.http.get_bot_gateway()  # AutoShardedClient's lookup
    assert (len(dc.ops(RESUME)), len(dc.ops(IDENTIFY))) == (1, 2)
    assert (shards, url) == (1, dc.gateway_url)


async def test_redelivered_message_create_reaches_the_client_again(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            sent = await dc.inject_message(DM_ID, "say it twice", author_id=USER_ID)
            first = await client.next_message()
            await dc.replay_last(1)
            second = await client.next_message()
            await dc.redispatch(int(sent["id"]))
            third = await client.next_message()
    assert first.id == second.id == third.id == int(sent["id"])


async def test_history_returns_messages_stored_without_dispatch(dc: FakeDiscord) -> None:
    stored = [
        dc.store_message(CHANNEL_ID, f"old {n}", author_id=USER_ID, author_name="alice")
        for n in range(3)
    ]
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            newest_first = [m.content async for m in channel.history(limit=10)]
            after_first = channel.history(after=discord.Object(int(stored[0]["id"])))
            oldest_first = [m.content async for m in after_first]
            two = [m.content async for m in channel.history(limit=2)]
    assert newest_first == ["old 2", "old 1", "old 0"]
    assert oldest_first == ["old 1", "old 2"]
    assert two == ["old 2", "old 1"]
    assert not [e for _, e in dc.delivered if e == "MESSAGE_CREATE"]


async def test_without_message_content_intent_guild_content_is_blank(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc, bot_intents(message_content=False)) as client:
            guild = client.get_guild(GUILD_ID)
            assert guild is not None and guild.get_member(USER_ID) is None  # no members intent
            await dc.inject_message(CHANNEL_ID, "not for the bot", author_id=USER_ID)
            assert (await client.next_message()).content == ""
            await dc.inject_message(CHANNEL_ID, f"<@{BOT_ID}> for the bot", author_id=USER_ID)
            assert (await client.next_message()).content == f"<@{BOT_ID}> for the bot"
            await dc.inject_message(DM_ID, "a dm", author_id=USER_ID)
            assert (await client.next_message()).content == "a dm"


async def test_members_intent_chunks_the_guild_and_commands_sync(dc: FakeDiscord) -> None:
    with anyio.fail_after(20):
        async with running_client(dc, bot_intents(members=True)) as client:
            guild = client.get_guild(GUILD_ID)
            assert guild is not None and guild.chunked
            member = guild.get_member(USER_ID)
            assert member is not None and member.name == "alice"
            [queried] = await guild.query_members(user_ids=[USER_ID])  # op 8, answered in kind
            assert queried.id == USER_ID

            tree = app_commands.CommandTree(client)

            @tree.command(name="ping", description="Is the bot there?")
            async def ping(interaction: discord.Interaction[Any]) -> None:
                """Never invoked: only its registration is under test."""

            synced = await tree.sync()
            tree.copy_global_to(guild=guild)
            in_guild = await tree.sync(guild=guild)
            fetched = await tree.fetch_commands()
    assert [c.name for c in synced] == [c.name for c in fetched] == ["ping"]
    assert [c.id for c in synced] == [c.id for c in fetched]
    assert [c["name"] for c in dc.commands(GUILD_ID)] == [c.name for c in in_guild] == ["ping"]
    assert [op.d["user_ids"] for op in dc.ops(8)] == [[USER_ID]]


# -- streaming: edits and deletes under Discord's per-channel rate limits --------------------


EDIT_ROUTE = "/channels/{channel_id}/messages/{message_id}"


def limited(dc: FakeDiscord, limit: Limit, *, announce: bool) -> None:
    dc.rate_limits = DiscordLimits(per_channel=limit, announce=announce)


async def test_an_edit_past_the_channel_limit_gets_discords_429(dc: FakeDiscord) -> None:
    limited(dc, Limit(2, 60.0), announce=False)  # the client learns of it only from the 429
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            client.http.max_ratelimit_timeout = 30.0  # longer waits raise RateLimited
            channel = client.get_channel(CHANNEL_ID)
            thread = client.get_channel(THREAD_ID)
            assert isinstance(channel, discord.TextChannel)
            assert isinstance(thread, discord.Thread)
            preview = await channel.send("Hel")
            await preview.edit(content="Hello")
            await preview.edit(content="Hello wo")
            with pytest.raises(discord.RateLimited) as caught:
                await preview.edit(content="Hello world")
            other = await thread.send("elsewhere")
            await other.edit(content="another channel has its own window")
            await preview.delete()  # deletes are not limited by default
    assert 59.0 < caught.value.retry_after <= 60.0
    [refused] = dc.rate_limited()
    assert (refused.method, refused.route, refused.status) == ("PATCH", EDIT_ROUTE, 429)
    assert refused.json["content"] == "Hello world"
    assert refused.retry_after == pytest.approx(caught.value.retry_after, abs=1.0)
    assert [(c.method, c.status) for c in dc.calls(route=EDIT_ROUTE)] == [
        ("PATCH", 200),
        ("PATCH", 200),
        ("PATCH", 429),
        ("PATCH", 200),
        ("DELETE", 204),
    ]
    assert dc.visible_contents(CHANNEL_ID) == []
    assert dc.visible_contents(THREAD_ID) == ["another channel has its own window"]
    assert dc.statistics()["rate_limited"] == 1


async def test_the_429_has_discords_body_and_rate_limit_headers(dc: FakeDiscord) -> None:
    limited(dc, Limit(1, 60.0), announce=True)
    message = dc.store_message(CHANNEL_ID, "x", author_id=BOT_ID)
    url = f"{dc.api_base}/channels/{CHANNEL_ID}/messages/{message['id']}"
    auth = {"Authorization": f"Bot {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.patch(url, json={"content": "y"}) as first:
            assert first.status == 200
            assert first.headers["X-RateLimit-Limit"] == "1"
            assert first.headers["X-RateLimit-Remaining"] == "0"
            assert 59.0 < float(first.headers["X-RateLimit-Reset-After"]) <= 60.0
        async with http.patch(url, json={"content": "z"}) as second:
            body, headers = await second.json(), second.headers
    assert second.status == 429
    assert set(body) == {"message", "retry_after", "global"}
    assert (body["message"], body["global"]) == ("You are being rate limited.", False)
    assert 59.0 < body["retry_after"] <= 60.0
    assert headers["Retry-After"] == "60"
    assert (headers["X-RateLimit-Remaining"], headers["X-RateLimit-Scope"]) == ("0", "user")
    assert headers["X-RateLimit-Limit"] == "1" and "X-RateLimit-Bucket" in headers
    assert "Via" in headers  # what discord.py needs to take it for a rate limit, not a ban
    assert [m["content"] for m in dc.history(CHANNEL_ID)] == ["y"]


async def test_discord_py_waits_out_a_short_window_and_no_edit_is_lost(dc: FakeDiscord) -> None:
    limit = Limit(3, 0.3)
    limited(dc, limit, announce=False)
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            preview = await channel.send("0")
            for i in range(1, 6):
                await preview.edit(content=str(i))
    edits = dc.calls("PATCH", EDIT_ROUTE)
    assert dc.rate_limited("PATCH", EDIT_ROUTE)  # discord.py met the limit, waited, retried
    assert [c.json["content"] for c in edits if c.status == 200] == ["1", "2", "3", "4", "5"]
    admitted = [c.arrived for c in edits if c.status == 200]
    # Never more than the limit inside one window.
    assert all(
        later - first >= limit.per_s
        for first, later in zip(admitted, admitted[limit.calls :], strict=False)
    )
    assert dc.visible_contents(CHANNEL_ID) == ["5"]


async def test_announced_limits_let_discord_py_pace_itself_with_no_429(dc: FakeDiscord) -> None:
    limited(dc, Limit(2, 0.2), announce=True)
    with anyio.fail_after(20):
        async with running_client(dc) as client:
            channel = client.get_channel(CHANNEL_ID)
            assert isinstance(channel, discord.TextChannel)
            preview = await channel.send("0")
            for i in range(1, 5):
                await preview.edit(content=str(i))
    assert dc.rate_limited() == []
    assert [c.status for c in dc.calls("PATCH", EDIT_ROUTE)] == [200] * 4
    assert dc.visible_contents(CHANNEL_ID) == ["4"]


async def test_past_the_global_limit_every_route_gets_a_global_429(dc: FakeDiscord) -> None:
    dc.rate_limits = DiscordLimits(overall=Limit(2, 60.0))
    auth = {"Authorization": f"Bot {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        for _ in range(2):
            async with http.get(f"{dc.api_base}/channels/{CHANNEL_ID}") as r:
                assert r.status == 200
        url = f"{dc.api_base}/channels/{THREAD_ID}/messages"
        async with http.post(url, json={"content": "hi"}) as refused:
            body, headers = await refused.json(), refused.headers
    assert refused.status == 429
    assert body["global"] is True and 59.0 < body["retry_after"] <= 60.0
    assert (headers["X-RateLimit-Global"], headers["X-RateLimit-Scope"]) == ("true", "global")
    assert [(c.method, c.status) for c in dc.rate_limited()] == [("POST", 429)]
    assert dc.sent_messages() == []


# -- buttons and component interactions (what approvals rely on) ---------------------------


class ClickingClient(RecordingClient):
    """Answers each click by its button: "yes" updates the message and removes its buttons
    (7), "no" answers the clicker alone (4, ephemeral), "later" only acknowledges (6)."""

    def __init__(self, *, intents: discord.Intents) -> None:
        super().__init__(intents=intents)
        self.clicks: list[tuple[str, int, int]] = []  # custom_id, user, message

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        data: Any = interaction.data or {}
        assert interaction.type is discord.InteractionType.component
        assert interaction.message is not None and interaction.user is not None
        custom_id = str(data["custom_id"])
        self.clicks.append((custom_id, interaction.user.id, interaction.message.id))
        if custom_id == "yes":
            await interaction.response.edit_message(content="approved", view=None)
        elif custom_id == "no":
            await interaction.response.send_message("not yours", ephemeral=True)
        else:
            await interaction.response.defer()


def buttons(*custom_ids: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for custom_id in custom_ids:
        view.add_item(discord.ui.Button(label=custom_id, custom_id=custom_id))
    return view


async def test_clicks_on_buttons_reach_the_bot_and_each_callback_type_does_its_part(
    dc: FakeDiscord,
) -> None:
    client = ClickingClient(intents=bot_intents())
    point_discord_py_at(client, api_base=dc.api_base, gateway_url=dc.gateway_url)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.start, TOKEN)
        try:
            with anyio.fail_after(10):
                assert await client.lifecycle.receive() == "ready"
                channel = client.get_partial_messageable(CHANNEL_ID)
                sent = await channel.send("Approve?", view=buttons("yes", "no", "later"))
                assert dc.custom_ids(CHANNEL_ID, sent.id) == ["yes", "no", "later"]
                for n, custom_id in enumerate(["no", "later", "yes"], 1):
                    clicked = await dc.inject_click(CHANNEL_ID, sent.id, custom_id, user_id=USER_ID)
                    await dc.wait_until(lambda n=n: len(dc.interaction_responses) == n)
        finally:
            await client.close()
            await client.aclose_streams()
    assert clicked["type"] == 3 and clicked["data"] == {"custom_id": "yes", "component_type": 2}
    assert clicked["message"]["components"][0]["components"][0]["custom_id"] == "yes"
    assert client.clicks == [(c, USER_ID, sent.id) for c in ("no", "later", "yes")]
    assert [(r["type"], r["data"].get("flags")) for r in dc.interaction_responses] == [
        (4, 64),
        (6, None),
        (7, None),
    ]
    # The update changed the message in place; the ephemeral answer is not in the channel.
    assert dc.visible_contents(CHANNEL_ID) == ["approved"]
    assert dc.custom_ids(CHANNEL_ID, sent.id) == []
    assert [m["content"] for m in dc.history(CHANNEL_ID) if m["flags"] == 0] == ["approved"]
    with pytest.raises(LookupError):  # the message shows no button any more
        await dc.inject_click(CHANNEL_ID, sent.id, "yes", user_id=USER_ID)


async def test_components_are_checked_and_an_interaction_is_answered_once(
    dc: FakeDiscord,
) -> None:
    row = {"type": 1, "components": [{"type": 2, "style": 1, "label": "a", "custom_id": "x"}]}
    twice = {"type": 1, "components": [row["components"][0], row["components"][0]]}
    async with running_client(dc) as client:
        route = discord.http.Route("POST", SEND_ROUTE, channel_id=CHANNEL_ID)
        with pytest.raises(discord.HTTPException, match="Invalid Form Body"):
            await client.http.request(route, json={"content": "x", "components": [twice]})
        sent = await client.http.request(route, json={"content": "x", "components": [row]})
        assert sent["components"] == [row]
        clicked = await dc.inject_click(CHANNEL_ID, int(sent["id"]), "x", user_id=USER_ID)
        callback = f"/interactions/{clicked['id']}/{clicked['token']}/callback"
        async with aiohttp.ClientSession() as http:
            for expected in (200, 400):  # Discord takes one callback per interaction
                async with http.post(dc.api_base + callback, json={"type": 6}) as response:
                    assert response.status == expected
