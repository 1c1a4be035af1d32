"""Approvals in the chat (SPEC 15), end to end on Telegram, Discord and Slack: a whole gateway
in process with the real python-telegram-bot, discord.py and slack_sdk against the loopback
platforms, the
fake model scripting the tool calls, and an in-process toolbox counting what ran.

What a user sees: the request as a message with Approve and Deny buttons (the tool, its
arguments, who may answer, the timeout); a click decides, the message then says who decided
and loses its buttons, and the turn goes on to one final answer. A stranger's click is told
it is not theirs and changes nothing; no answer in time is a denial the model is told of; a
restart while the turn waits keeps the wait, and the button still in the chat resumes it.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import pytest

from gateway.app import GatewayApp
from gateway.config import parse_config
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.openai_server import FakeModel, calls, ok, open_fake_model
from tests.fakes.slack_server import FakeSlack, open_fake_slack
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.fakes.toolbox import RecordingToolBox, tool
from tests.harness import config_text, free_port, running_gateway
from tests.support import slack_world

with warnings.catch_warnings():  # discord.py imports audioop, deprecated since 3.11
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord  # noqa: F401  (imported here once, under the filter)

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

ASKING = "Approve this tool call?"
NOT_YOURS = "Only the person whose message started this, or an approver, can answer."
# Telegram: Alice's private chat has her id; a group; Bob is another member; Carol an approver.
T_ALICE, T_BOB, T_CAROL, T_GROUP = 42, 4242, 77, -1001234
# Discord: the same people, a DM and a guild channel.
D_BOT, D_ALICE = 990_000_000_000_000_001, 990_000_000_000_000_010
D_BOB, D_CAROL = 990_000_000_000_000_011, 990_000_000_000_000_012
D_GUILD, D_CHANNEL, D_DM = 990_000_000_000_000_100, 990_000_000_000_000_101, 990_000_000_000_000_300
D_TOKEN = "discord-test-token"
# Slack: the world's Alice and Bob (allowed), Carol an approver; her DM, an open channel.
S_ALICE, S_BOB, S_CAROL = slack_world.ALICE, slack_world.BOB, "U0CAROL01"


@dataclass(frozen=True, slots=True)
class Asked:
    """An approval request as the chat shows it now."""

    message_id: int
    text: str
    buttons: list[str]  # the buttons' data


class Chat(Protocol):
    """One platform's chat, as a person uses it: the same tests run on each."""

    platform: str

    def section(self, tmp_path: Path) -> str: ...

    async def say(self, text: str, *, group: bool = False) -> None: ...

    async def asked(self, n: int = 1, *, group: bool = False) -> Asked: ...

    def now(self, asked: Asked, *, group: bool = False) -> Asked: ...

    async def click(
        self, asked: Asked, approve: bool, who: str, *, group: bool = False
    ) -> None: ...

    def told(self) -> tuple[str, bool]:
        """What the last click's person was told, and whether as a refusal (an alert, an
        ephemeral message)."""
        ...

    async def answers(self, count: int, *, group: bool = False) -> list[str]: ...


class TelegramChat:
    platform = "telegram"

    def __init__(self, tg: FakeTelegram, mode: str) -> None:
        self.tg, self.mode = tg, mode
        self.users = {"alice": T_ALICE, "bob": T_BOB, "carol": T_CAROL}
        self.webhook_statuses: list[int] = []

    def section(self, tmp_path: Path) -> str:
        text = (
            f'[telegram]\ntoken = "{self.tg.token}"\napi_base = "{self.tg.origin}"\n'
            f'mode = "{self.mode}"\nallow_users = [{T_ALICE}, {T_BOB}]\n'
            f"allow_chats = [{T_GROUP}]\ntyping_interval_s = 0.05\n"
        )
        if self.mode == "webhook":
            port = free_port()
            text += (
                f'webhook_listen = "127.0.0.1:{port}"\n'
                f'webhook_url = "http://127.0.0.1:{port}/telegram/hook"\n'
                'webhook_secret = "s3cret-Token_1"\n'
            )
        return text

    def chat(self, group: bool) -> int:
        return T_GROUP if group else T_ALICE

    async def push(self) -> None:
        if self.mode == "webhook":
            self.webhook_statuses += await self.tg.deliver_webhook()

    async def say(self, text: str, *, group: bool = False) -> None:
        if group:
            mention = [{"type": "mention", "offset": 0, "length": len("@botmux_test_bot")}]
            text = f"@botmux_test_bot {text}"
            self.tg.inject_message(T_GROUP, text, user_id=T_ALICE, entities=mention)
        else:
            self.tg.inject_message(T_ALICE, text)
        await self.push()

    def _requests(self, chat: int) -> list[dict[str, Any]]:
        return [m for m in self.tg.bot_messages(chat) if str(m.get("text")).startswith(ASKING)]

    async def asked(self, n: int = 1, *, group: bool = False) -> Asked:
        chat = self.chat(group)
        await self.tg.wait_until(lambda: len(self._requests(chat)) >= n)
        return self._of(self._requests(chat)[n - 1], chat)

    def _of(self, message: dict[str, Any], chat: int) -> Asked:
        mid = int(message["message_id"])
        return Asked(mid, str(message["text"]), self.tg.keyboard(chat, mid))

    def now(self, asked: Asked, *, group: bool = False) -> Asked:
        chat = self.chat(group)
        (message,) = [m for m in self.tg.bot_messages(chat) if m["message_id"] == asked.message_id]
        return self._of(message, chat)

    async def click(self, asked: Asked, approve: bool, who: str, *, group: bool = False) -> None:
        answered = len(self.tg.callback_answers())
        data = asked.buttons[0 if approve else 1]
        name = who.capitalize()
        self.tg.inject_callback_query(
            self.chat(group), asked.message_id, data, user_id=self.users[who], first_name=name
        )
        await self.push()
        await self.tg.wait_until(lambda: len(self.tg.callback_answers()) > answered)

    def told(self) -> tuple[str, bool]:
        last = self.tg.callback_answers()[-1]
        return last.text, last.show_alert

    async def answers(self, count: int, *, group: bool = False) -> list[str]:
        chat = self.chat(group)

        def found() -> list[str]:
            return [t for t in self.tg.visible_messages(chat) if not t.startswith(ASKING)]

        await self.tg.wait_until(lambda: len(found()) >= count)
        return found()


class DiscordChat:
    platform = "discord"

    def __init__(self, dc: FakeDiscord) -> None:
        self.dc = dc
        self.users = {"alice": D_ALICE, "bob": D_BOB, "carol": D_CAROL}

    def section(self, tmp_path: Path) -> str:
        return (
            f'[discord]\ntoken = "{D_TOKEN}"\napi_base = "{self.dc.api_base}"\n'
            f'gateway_url = "{self.dc.gateway_url}"\nallow_users = [{D_ALICE}]\n'
            f'allow_guilds = [{D_GUILD}]\nguild_access = "everyone"\n'
            "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\nconnect_timeout_s = 10\n"
        )

    def channel(self, group: bool) -> int:
        return D_CHANNEL if group else D_DM

    async def say(self, text: str, *, group: bool = False) -> None:
        content = f"<@{D_BOT}> {text}" if group else text
        await self.dc.inject_message(self.channel(group), content, author_id=D_ALICE)

    def _requests(self, channel: int) -> list[dict[str, Any]]:
        return [m for m in self.dc.sent_messages(channel) if m["content"].startswith(ASKING)]

    async def asked(self, n: int = 1, *, group: bool = False) -> Asked:
        channel = self.channel(group)
        await self.dc.wait_until(lambda: len(self._requests(channel)) >= n)
        return self._of(self._requests(channel)[n - 1], channel)

    def _of(self, message: dict[str, Any], channel: int) -> Asked:
        mid = int(message["id"])
        return Asked(mid, str(message["content"]), self.dc.custom_ids(channel, mid))

    def now(self, asked: Asked, *, group: bool = False) -> Asked:
        channel = self.channel(group)
        message = self.dc.world.message_in(channel, asked.message_id)
        return self._of(message, channel)

    async def click(self, asked: Asked, approve: bool, who: str, *, group: bool = False) -> None:
        answered = len(self.dc.interaction_responses)
        custom_id = asked.buttons[0 if approve else 1]
        channel = self.channel(group)
        await self.dc.inject_click(channel, asked.message_id, custom_id, user_id=self.users[who])
        await self.dc.wait_until(lambda: len(self.dc.interaction_responses) > answered)

    def told(self) -> tuple[str, bool]:
        """A decision is told by the message's update (7): its last paragraph."""
        last = self.dc.interaction_responses[-1]
        content = str(last["data"].get("content") or "")
        if last["type"] == 7:
            return content.rpartition("\n\n")[2], False
        return content, last["type"] == 4 and bool(int(last["data"].get("flags") or 0) & 64)

    async def answers(self, count: int, *, group: bool = False) -> list[str]:
        channel = self.channel(group)

        def found() -> list[str]:
            return [t for t in self.dc.visible_contents(channel) if not t.startswith(ASKING)]

        await self.dc.wait_until(lambda: len(found()) >= count)
        return found()


class SlackChat:
    platform = "slack"

    def __init__(self, slack: FakeSlack, events: bool) -> None:
        self.slack, self.events = slack, events
        self.users = {"alice": S_ALICE, "bob": S_BOB, "carol": S_CAROL}
        self.threads: dict[str, str] = {}

    def section(self, tmp_path: Path) -> str:
        toml = slack_world.slack_toml(self.slack, events=self.events)
        return toml.replace(
            f'allow_users = ["{S_ALICE}"]', f'allow_users = ["{S_ALICE}", "{S_BOB}"]'
        )

    def channel(self, group: bool) -> str:
        return slack_world.CHANNEL if group else slack_world.ALICE_DM

    async def say(self, text: str, *, group: bool = False) -> None:
        if group:
            await self.slack.send(self.channel(True), slack_world.mention(text), user=S_ALICE)
        else:
            await self.slack.send(self.channel(False), text, user=S_ALICE)

    def _requests(self, channel: str) -> list[dict[str, Any]]:
        return [m for m in self.slack.bot_messages(channel) if str(m["text"]).startswith(ASKING)]

    async def asked(self, n: int = 1, *, group: bool = False) -> Asked:
        channel = self.channel(group)
        await self.slack.wait_until(lambda: len(self._requests(channel)) >= n)
        return self._of(self._requests(channel)[n - 1])

    def _of(self, message: dict[str, Any]) -> Asked:
        mid = int(str(message["ts"]).replace(".", ""))
        self.threads[str(mid)] = str(message["ts"])
        buttons = [
            str(e["value"])
            for block in message.get("blocks", [])
            if block["type"] == "actions"
            for e in block["elements"]
        ]
        return Asked(mid, str(message["text"]), buttons)

    def now(self, asked: Asked, *, group: bool = False) -> Asked:
        ts = self.threads[str(asked.message_id)]
        (message,) = [m for m in self.slack.bot_messages(self.channel(group)) if m["ts"] == ts]
        return self._of(message)

    async def wait_for_update(self) -> None:
        updates = len(self.slack.calls_of("chat.update"))
        await self.slack.wait_until(lambda: len(self.slack.calls_of("chat.update")) > updates)

    def _answers_to_clicks(self) -> list[Any]:
        return [c for c in self.slack.calls if c.method in ("chat.update", "chat.postEphemeral")]

    async def click(self, asked: Asked, approve: bool, who: str, *, group: bool = False) -> None:
        answered = len(self._answers_to_clicks())
        ts = self.threads[str(asked.message_id)]
        value = asked.buttons[0 if approve else 1]
        await self.slack.click(self.channel(group), ts, value, user=self.users[who])
        await self.slack.wait_until(lambda: len(self._answers_to_clicks()) > answered)

    def told(self) -> tuple[str, bool]:
        """A decision is told by the message's update: its last paragraph; a refusal by an
        ephemeral message."""
        last = self._answers_to_clicks()[-1]
        if last.method == "chat.update":
            return str(last.args["text"]).rpartition("\n\n")[2], False
        return str(last.args["text"]), True

    async def answers(self, count: int, *, group: bool = False) -> list[str]:
        channel = self.channel(group)

        def found() -> list[str]:
            return [t for t in self.slack.texts(channel) if not t.startswith(ASKING)]

        await self.slack.wait_until(lambda: len(found()) >= count)
        return found()


@asynccontextmanager
async def open_chat(kind: str) -> AsyncIterator[Chat]:
    if kind.startswith("slack"):
        async with open_fake_slack() as slack:
            yield SlackChat(slack, events=kind.endswith("events"))
        return
    if kind.startswith("telegram"):
        async with open_fake_telegram() as tg:
            yield TelegramChat(tg, "webhook" if kind.endswith("webhook") else "polling")
        return
    async with open_fake_discord(token=D_TOKEN, bot_user_id=D_BOT) as dc:
        for user, name in ((D_ALICE, "alice"), (D_BOB, "bob"), (D_CAROL, "carol")):
            dc.add_user(user, name)
        dc.add_guild(D_GUILD, "botmux guild", member_ids=[D_ALICE, D_BOB, D_CAROL])
        dc.add_text_channel(D_GUILD, D_CHANNEL, "general")
        dc.add_dm_channel(D_DM, D_ALICE)
        yield DiscordChat(dc)


@dataclass
class World:
    chat: Chat
    model: FakeModel
    box: RecordingToolBox
    db: Path
    text: str

    @asynccontextmanager
    async def gateway(self) -> AsyncIterator[GatewayApp]:
        config = parse_config(self.text, source="test", env={})
        async with running_gateway(config, tools=self.box) as (app, _):
            if isinstance(self.chat, SlackChat) and self.chat.events:
                port = slack_world.adapter_of(app).events_port
                self.chat.slack.events_url = f"http://127.0.0.1:{port}/slack/events"
            yield app

    def tool_rows(self) -> list[tuple[str, str]]:
        """(call id, state) of the stored tool calls."""
        with sqlite3.connect(self.db) as conn:
            query = "SELECT call_id, state FROM messages WHERE role = 'tool' ORDER BY id"
            return list(conn.execute(query))


@asynccontextmanager
async def world(
    tmp_path: Path,
    kind: str,
    timeout_s: float = 600,
    *,
    box: RecordingToolBox | None = None,
    section: str = "",
) -> AsyncIterator[World]:
    """``section``: more of the platform's section."""
    box = box or RecordingToolBox().add(tool("git__push", approval=True))
    async with open_chat(kind) as chat, open_fake_model() as model:
        extra = (
            chat.section(tmp_path) + section + '\n[agent]\ntools = ["*"]\n\n[tools]\n'
            f'approvers = ["telegram:{T_CAROL}", "discord:{D_CAROL}", "slack:{S_CAROL}"]\n'
            f"approval_timeout_s = {timeout_s}\n\n[gateway]\ndrain_timeout_s = 0\n"
        )
        db = tmp_path / "botmux.db"
        yield World(chat, model, box, db, config_text(db, model.base_url, extra=extra))


def told(chat: Chat) -> str:
    """The decision the last click's person was told of: ``Approved.`` in Telegram's answer
    to the click, ``Approved by <@id>.`` in Discord's update of the message."""
    text, refusal = chat.told()
    assert not refusal, text
    return text.removesuffix(".").split(" by ")[0]


BOTH = pytest.mark.parametrize("kind", ["telegram", "discord", "slack"])


@pytest.mark.parametrize(
    "kind", ["telegram", "telegram-webhook", "discord", "slack", "slack-events"]
)
async def test_an_approved_call_runs_once_and_the_turn_answers_once(
    tmp_path: Path, kind: str
) -> None:
    async with world(tmp_path, kind) as w:
        w.model.script(calls(("git__push", {"text": "main"})), ok("pushed main"))
        async with w.gateway():
            with anyio.fail_after(20):
                await w.chat.say("push main")
                asked = await w.chat.asked()
                assert w.box.executed == {}  # nothing runs before the yes
                await w.chat.click(asked, True, "alice")
                assert await w.chat.answers(1) == ["pushed main"]
            done = w.chat.now(asked)
    chat = w.chat
    arguments = {
        "telegram": '{"text": "main"}',
        "discord": "```json",
        "slack": '```{"text": "main"}```',
    }
    assert asked.text.splitlines()[:3] == [
        ASKING,
        "Tool: git__push",
        "Arguments: " + arguments[chat.platform],
    ]
    assert asked.text.endswith(f"{NOT_YOURS} No answer within 10 min is a denial.")
    row = int(asked.buttons[0].split(":")[1])
    assert asked.buttons == [f"ap:{row}:y", f"ap:{row}:n"]
    assert told(chat) == "Approved"
    who = {"telegram": "Alice", "discord": f"<@{D_ALICE}>", "slack": f"<@{S_ALICE}>"}
    who = who[chat.platform]
    assert done.buttons == [] and done.text.endswith(f"\n\nApproved by {who}.")
    assert w.box.executed == {"git__push": 1}
    assert w.model.requests[1].tool_contents == ["push({'text': 'main'})"]
    assert w.tool_rows() == [("call_1", "finished")]
    if isinstance(chat, TelegramChat) and chat.mode == "webhook":
        assert chat.webhook_statuses == [200, 200]  # the click's only once it was decided


@BOTH
async def test_a_denial_is_told_to_the_model_and_the_tool_never_runs(
    tmp_path: Path, kind: str
) -> None:
    async with world(tmp_path, kind) as w:
        w.model.script(calls(("git__push", {"text": "main"})), ok("not pushed, as you wish"))
        async with w.gateway():
            with anyio.fail_after(20):
                await w.chat.say("push main")
                asked = await w.chat.asked()
                await w.chat.click(asked, False, "alice")
                assert await w.chat.answers(1) == ["not pushed, as you wish"]
            done = w.chat.now(asked)
    assert told(w.chat) == "Denied"
    assert done.buttons == [] and "\n\nDenied by " in done.text
    assert w.box.executed == {}
    (result,) = w.model.requests[1].tool_contents
    assert result.startswith("denied: the person asked did not approve this call")


@BOTH
async def test_a_strangers_click_is_refused_and_the_right_person_then_decides(
    tmp_path: Path, kind: str
) -> None:
    async with world(tmp_path, kind) as w:
        w.model.script(calls(("git__push", {"text": "main"})), ok("pushed main"))
        async with w.gateway():
            with anyio.fail_after(20):
                await w.chat.say("push main", group=True)
                asked = await w.chat.asked(group=True)
                await w.chat.click(asked, True, "bob", group=True)
                refused = w.chat.told()
                still = w.chat.now(asked, group=True)
                executed_then = dict(w.box.executed)
                await w.chat.click(still, True, "carol", group=True)  # an approver
                assert await w.chat.answers(1, group=True) == ["pushed main"]
    assert refused == (NOT_YOURS, True)
    assert still == asked  # the buttons stay for the right person
    assert executed_then == {}
    assert told(w.chat) == "Approved"
    assert w.box.executed == {"git__push": 1}


@BOTH
async def test_no_answer_in_time_is_a_denial_and_a_late_click_is_told_so(
    tmp_path: Path, kind: str
) -> None:
    async with world(tmp_path, kind, timeout_s=0.5) as w:
        w.model.script(calls(("git__push", {"text": "main"})), ok("nobody said yes"))
        async with w.gateway():
            with anyio.fail_after(20):
                await w.chat.say("push main")
                asked = await w.chat.asked()
                assert await w.chat.answers(1) == ["nobody said yes"]
                await w.chat.click(asked, True, "alice")
                late = w.chat.told()
                await wait_for_no_buttons(w.chat, asked)
    assert asked.text.endswith("No answer within 0.5 s is a denial.")
    assert w.model.requests[1].tool_contents == [
        "denied: nobody approved this call within 0.5 s; it did not run"
    ]
    assert late == ("This was answered already.", True)
    assert w.box.executed == {}
    if isinstance(w.chat, TelegramChat):
        # While the turn waited, "typing…" was not shown (else one every 0.05 s).
        tg = w.chat.tg
        (sent,) = [c for c in tg.calls_to("sendMessage") if "reply_markup" in c.params]
        waiting = [c for c in tg.calls_to("sendChatAction") if sent.at < c.at < sent.at + 0.4]
        assert waiting == []
        assert tg.calls_to("sendChatAction")  # before it, it was


async def wait_for_no_buttons(chat: Chat, asked: Asked) -> None:
    """The stale buttons go with the late click's answer (sent beside the decision)."""
    while chat.now(asked).buttons:
        if isinstance(chat, TelegramChat):
            await chat.tg.wait_for_calls("editMessageReplyMarkup")
        elif isinstance(chat, DiscordChat):
            await chat.dc.wait_for_calls("PATCH", "/channels/{channel_id}/messages/{message_id}")
        elif isinstance(chat, SlackChat):
            await chat.wait_for_update()


@BOTH
async def test_a_restart_while_waiting_keeps_the_wait_and_the_button_resumes_it(
    tmp_path: Path, kind: str
) -> None:
    async with world(tmp_path, kind) as w:
        w.model.script(calls(("git__push", {"text": "main"})), ok("pushed main"))
        async with w.gateway():
            with anyio.fail_after(20):
                await w.chat.say("push main")
                asked = await w.chat.asked()
        stopped_with = w.tool_rows()
        async with w.gateway():  # a new process on the same store; the message is still there
            with anyio.fail_after(20):
                await w.chat.click(asked, True, "alice")
                assert await w.chat.answers(1) == ["pushed main"]
    assert stopped_with == [("call_1", "awaiting")]
    assert told(w.chat) == "Approved"
    assert w.box.executed == {"git__push": 1}
    assert len(w.model.requests) == 2  # the stored step was not asked for again
    assert w.tool_rows() == [("call_1", "finished")]
    with anyio.fail_after(1):
        assert (await w.chat.asked()).message_id == asked.message_id  # asked once, not again


#: The model's text beside its first calls, then its answer: the reply is both (SPEC 15).
ANSWER = "Let me look at the branch first, then push it.\n\npushed main"


async def test_a_preview_above_the_question_is_not_edited_into_the_answer(tmp_path: Path) -> None:
    """A group's preview message shown before the approval was asked would sit above the
    question: the answer edited into it would appear there, notifying nobody. It is deleted
    and the answer sent below the question instead."""
    status = tool("git__status", lambda a: "on main", read_only=True)
    status.hold = anyio.Event()
    box = RecordingToolBox().add(status, tool("git__push", approval=True))
    async with world(tmp_path, "telegram", box=box, section="stream_interval_s = 0.05\n") as w:
        assert isinstance(w.chat, TelegramChat)
        tg = w.chat.tg
        w.model.script(
            calls(("git__status", {}), text="Let me look at the branch first, then push it."),
            calls(("git__push", {"text": "main"}), ids="push"),
            ok("pushed main"),
        )
        async with w.gateway():
            with anyio.fail_after(20):
                await w.chat.say("push main", group=True)
                await tg.wait_until(lambda: bool(tg.bot_messages(T_GROUP)))  # the preview
                (preview,) = tg.bot_messages(T_GROUP)
                status.hold.set()
                asked = await w.chat.asked(group=True)
                await w.chat.click(asked, True, "alice", group=True)
                await tg.wait_until(lambda: ANSWER in tg.visible_messages(T_GROUP))
    assert "using git__status" in str(preview["text"])
    assert tg.deleted_messages(T_GROUP) == [(T_GROUP, preview["message_id"])]
    done = w.chat.now(asked, group=True)
    assert tg.visible_messages(T_GROUP) == [done.text, ANSWER]  # the answer below
    assert w.box.executed == {"git__status": 1, "git__push": 1}
