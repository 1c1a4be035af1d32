"""The Slack adapter end to end: botmux in process with the real slack_sdk against the
loopback Slack (tests/fakes/slack_server.py), over Socket Mode and over the Events API, and
the fake model. Assertions are on what users and operators see: the messages in Slack's
channels and threads, the envelopes Slack saw acknowledged, the rows in the store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel, ok, streamed
from tests.fakes.slack_server import FakeSlack, open_fake_slack
from tests.harness import make_config, running_gateway
from tests.support import slack_world
from tests.support.slack_world import (
    ALICE,
    ALICE_DM,
    BOB,
    CHANNEL,
    CLOSED,
    STRANGER,
    STRANGER_DM,
    mention,
    running_botmux,
)

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

WAYS = [pytest.param(False, id="socket"), pytest.param(True, id="events")]


def rows(db: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(db) as conn:
        query = "SELECT role, conversation, content, state FROM messages ORDER BY id"
        return list(conn.execute(query))


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with open_fake_slack() as fake:
        yield fake


@pytest.mark.parametrize("events", WAYS)
async def test_a_dm_is_answered_in_the_dm(
    tmp_path: Path, slack: FakeSlack, model: FakeModel, events: bool
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, events=events):
            await slack.send(ALICE_DM, "hello *there*", user=ALICE)
            [reply] = await slack.wait_for_bot_messages(ALICE_DM, 1)
            await slack.wait_until(lambda: not slack.unacked())
    assert reply["text"] == "echo: hello _there_"  # the model's Markdown as mrkdwn
    assert "thread_ts" not in reply
    assert [r.last_user for r in model.requests] == ["hello *there*"]
    assert all(e.acked for e in slack.envelopes)  # the question, and the bot's post echoed
    assert rows(tmp_path / "botmux.db") == [
        ("user", "slack:T0BOTMUX1:D0ALICE01", "hello *there*", "answered"),
        ("assistant", "slack:T0BOTMUX1:D0ALICE01", "echo: hello *there*", "final"),
    ]


@pytest.mark.parametrize("events", WAYS)
async def test_a_channel_is_answered_only_when_mentioned_in_a_thread_once(
    tmp_path: Path, slack: FakeSlack, model: FakeModel, events: bool
) -> None:
    """A mention arrives twice (``message`` and ``app_mention``, one ts): one turn, one
    answer, in a thread under the question; the follow-up in that thread needs no mention."""
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, events=events):
            await slack.send(CHANNEL, "just chatting among us", user=BOB)
            asked = await slack.send(CHANNEL, mention("what is 2+2?"), user=BOB)
            [answer] = await slack.wait_for_bot_messages(CHANNEL, 1)
            await slack.send(CHANNEL, "and 3+3?", user=BOB, thread_ts=asked)
            await slack.wait_for_bot_messages(CHANNEL, 2)
            await slack.wait_until(lambda: not slack.unacked())
    assert answer["thread_ts"] == asked and answer["text"] == "echo: what is 2+2?"
    assert slack.texts(CHANNEL, asked) == ["echo: what is 2+2?", "echo: and 3+3?"]
    assert [r.last_user for r in model.requests] == ["what is 2+2?", "and 3+3?"]
    kinds = [e.payload["event"]["type"] for e in slack.envelopes if e.kind == "events_api"]
    assert kinds.count("app_mention") == 1  # the mention came twice, and was one turn
    thread = f"slack:T0BOTMUX1:{CHANNEL}:thread:{asked}"
    assert [(r[0], r[1], r[3]) for r in rows(tmp_path / "botmux.db")] == [
        ("user", thread, "answered"),
        ("assistant", thread, "final"),
        ("user", thread, "answered"),
        ("assistant", thread, "final"),
    ]


async def test_reply_in_thread_off_answers_in_the_channel(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, "reply_in_thread = false\n"):
            await slack.send(CHANNEL, mention("in the open"), user=BOB)
            [answer] = await slack.wait_for_bot_messages(CHANNEL, 1)
            asked = await slack.send(CHANNEL, mention("in a thread"), user=BOB)
            threaded = await slack.send(CHANNEL, mention("inside it"), user=BOB, thread_ts=asked)
            await slack.wait_for_bot_messages(CHANNEL, 3)
    assert "thread_ts" not in answer
    assert slack.texts(CHANNEL, asked) == ["echo: inside it"]  # a thread stays a thread
    assert threaded != asked
    assert {r[1] for r in rows(tmp_path / "botmux.db")} == {
        f"slack:T0BOTMUX1:{CHANNEL}",
        f"slack:T0BOTMUX1:{CHANNEL}:thread:{asked}",
    }


async def test_strangers_get_a_pairing_code_in_a_dm_and_silence_elsewhere(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model):
            await slack.send(STRANGER_DM, "hi, who are you?", user=STRANGER)
            [code] = await slack.wait_for_bot_messages(STRANGER_DM, 1)
            await slack.send(CLOSED, mention("let me in"), user=BOB)  # not an open channel
            await slack.send(CLOSED, mention("I may"), user=ALICE)  # allowed everywhere
            [answer] = await slack.wait_for_bot_messages(CLOSED, 1)
            await slack.wait_until(lambda: not slack.unacked())
    assert "botmux pairing approve slack" in code["text"]
    assert answer["text"] == "echo: I may"
    assert [r.last_user for r in model.requests] == ["I may"]


async def test_bots_and_edits_are_never_turns(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    """The loop guard: the bot's own posts (echoed back by Slack), another app's, a message's
    edit; and an event type botmux does not know: all acknowledged, none answered."""
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, "require_mention = false\n"):
            await slack.send(CHANNEL, "from a bot", user="U0OTHERBT", bot_id="B0OTHERBT")
            await slack.send(CHANNEL, "a bot message", user="", subtype="bot_message")
            await slack.send(CHANNEL, "edited text", user=BOB, subtype="message_changed")
            await slack.deliver_event({"type": "reaction_added", "user": BOB, "reaction": "+1"})
            await slack.send(CHANNEL, "a person at last", user=BOB)
            await slack.wait_for_bot_messages(CHANNEL, 1)
            await slack.wait_until(lambda: not slack.unacked())  # the echo included
    assert [r.last_user for r in model.requests] == ["a person at last"]
    assert len(slack.bot_messages(CHANNEL)) == 1


@pytest.mark.parametrize("events", WAYS)
async def test_the_same_event_again_is_answered_once(
    tmp_path: Path, slack: FakeSlack, model: FakeModel, events: bool
) -> None:
    """Slack's retries (its retry header, an envelope delivered again) and the replay after
    a reconnect are admitted again: no-ops."""
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, events=events):
            await slack.send(ALICE_DM, "only once", user=ALICE)
            await slack.wait_for_bot_messages(ALICE_DM, 1)
            await slack.wait_until(lambda: not slack.unacked())
            for envelope in slack.envelopes:  # as if every acknowledgement had been lost
                envelope.acked = False
            await slack.redeliver()
            await slack.wait_until(lambda: not slack.unacked())
            if not events:
                for envelope in slack.envelopes:
                    envelope.acked = False
                hellos = slack.hellos
                await slack.disconnect()  # Slack's refresh: a new connection, then the replay
                await slack.wait_until(lambda: slack.hellos > hellos and not slack.unacked())
            await slack.send(ALICE_DM, "and then this", user=ALICE)
            await slack.wait_for_bot_messages(ALICE_DM, 2)
    assert [r.last_user for r in model.requests] == ["only once", "and then this"]
    assert slack.texts(ALICE_DM) == ["echo: only once", "echo: and then this"]
    assert max(e.deliveries for e in slack.envelopes) >= (2 if events else 3)


async def test_a_preview_is_edited_into_one_final_answer(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    pieces = ("Streaming answers grow ", "piece by piece, ", "and arrive once.")
    model.script(streamed(*pieces, interval_s=1.2, hold_after=1))
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, "stream_interval_s = 0.2\n"):
            asked = await slack.send(CHANNEL, mention("stream to us"), user=BOB)
            [preview] = await slack.wait_for_bot_messages(CHANNEL, 1)
            assert preview["text"] == pieces[0].strip() and preview["thread_ts"] == asked
            model.release_streams()
            await slack.wait_until(lambda: slack.texts(CHANNEL) == ["".join(pieces)])
            await slack.wait_until(lambda: not slack.unacked())
    [post] = slack.calls_of("chat.postMessage")  # the preview, and no other message
    updates = [c.args["text"] for c in slack.calls_of("chat.update")]
    assert updates[-1] == "".join(pieces) and len(updates) >= 2
    assert post.args["thread_ts"] == asked
    assert slack.bot_messages(CHANNEL)[0]["edited"]


async def test_a_file_is_fetched_with_the_bot_token_and_read(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    notes = slack.add_file("notes.txt", "text/plain", b"Budget: 40k\n")
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model):
            await slack.send(ALICE_DM, "read this", user=ALICE, files=(notes,))
            await slack.wait_for_bot_messages(ALICE_DM, 1)
    [request] = model.requests
    text = request.last_user
    assert text.startswith("read this") and "[notes.txt]" in text and "Budget: 40k" in text
    [download] = slack.files.downloads
    assert download.status == 200 and download.complete


async def test_a_file_on_another_host_is_named_not_fetched(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    """The bot token goes only to Slack's file host (or api_base's): a URL anywhere else is
    never requested, and the reply names the file."""
    elsewhere = f"http://localhost:{slack.port}"  # another origin, the same server
    planted = slack.add_file("evil.txt", "text/plain", b"secret", origin=elsewhere)
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model):
            await slack.send(ALICE_DM, "read this", user=ALICE, files=(planted,))
            [reply] = await slack.wait_for_bot_messages(ALICE_DM, 1)
    assert slack.files.downloads == []
    assert reply["text"] == (
        f"evil.txt was not fetched: http://localhost:{slack.port} is not Slack's file host;"
        " it was not used.\n\necho: read this"
    )


async def test_an_oversized_message_is_told_so_and_not_stored(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model):
            await slack.send(CHANNEL, mention("x" * 33_000), user=BOB)
            [notice] = await slack.wait_for_bot_messages(CHANNEL, 1)
            await slack.wait_until(lambda: not slack.unacked())
    assert notice["text"].startswith("That message is too long for me")
    assert model.requests == [] and rows(tmp_path / "botmux.db") == []
    assert len(slack.bot_messages(CHANNEL)) == 1  # not twice for message + app_mention


async def test_unsigned_and_stale_events_api_posts_are_refused(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    event = {
        "type": "event_callback",
        "team_id": "T0BOTMUX1",
        "event_id": "Ev0FORGED",
        "event": {
            "type": "message",
            "channel": ALICE_DM,
            "user": ALICE,
            "text": "forged",
            "ts": "1700000000.000001",
            "channel_type": "im",
        },
    }
    body = json.dumps(event).encode()
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, events=True):
            unsigned = await slack.post_signed(body, signed=False)
            stale = await slack.post_signed(body, age_s=301)
            forged = await slack.post_signed(body, secret="0" * 32)
            challenge = await slack.post_signed(
                json.dumps({"type": "url_verification", "challenge": "c4"}).encode()
            )
            await slack.send(ALICE_DM, "the real one", user=ALICE)
            await slack.wait_for_bot_messages(ALICE_DM, 1)
    assert (unsigned, stale, forged, challenge) == (401, 401, 401, 200)
    assert [r.last_user for r in model.requests] == ["the real one"]
    assert [r[2] for r in rows(tmp_path / "botmux.db")] == ["the real one", "echo: the real one"]


async def test_a_429_on_the_answer_is_waited_out_for_its_retry_after(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    """Slack's ratelimited answer posted nothing: the courier waits its Retry-After (whole
    seconds) and posts again, once; the user sees one answer."""
    slack.fail_next("chat.postMessage", 429, retry_after=1)
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, 'streaming = "off"\n'):
            await slack.send(ALICE_DM, "patience", user=ALICE)
            await slack.wait_for_bot_messages(ALICE_DM, 1)
    refused, sent = slack.calls_of("chat.postMessage")
    assert (refused.status, refused.retry_after, sent.status) == (429, 1.0, 200)
    assert sent.arrived - refused.arrived >= 1.0
    assert slack.texts(ALICE_DM) == ["echo: patience"]


async def test_a_long_answer_is_cut_after_rendering_within_slacks_limits(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    long = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor " * 60 for i in range(8))
    model.default = lambda r: ok("```python\n" + "x = 1\n" * 700 + "```\n\n" + long)
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model, 'streaming = "off"\n'):
            await slack.send(ALICE_DM, "write a lot", user=ALICE)
            await slack.wait_until(
                lambda: slack.texts(ALICE_DM)[-1:] and "Paragraph 7" in slack.texts(ALICE_DM)[-1]
            )
    texts = slack.texts(ALICE_DM)
    assert len(texts) >= 4 and all(len(t) <= 3000 for t in texts)
    assert all(t.count("```") % 2 == 0 for t in texts)  # no chunk leaves a code block open


@pytest.mark.parametrize("token", ["bot_token", "app_token"])
async def test_a_wrong_token_fails_the_start_with_slacks_answer(
    tmp_path: Path, slack: FakeSlack, model: FakeModel, token: str
) -> None:
    wrong = "xoxb-0000-wrong-token" if token == "bot_token" else "xapp-1-A0-wrong-token"
    section = slack_world.slack_toml(slack)
    section = section.replace(f'{token} = "', f'{token} = "{wrong}" #', 1)
    config = make_config(tmp_path / "botmux.db", model.base_url, extra=section)
    with anyio.fail_after(30), pytest.raises(BaseException) as failed:
        async with running_gateway(config):
            pass
    assert "slack refused the token (invalid_auth)" in repr(failed.value)


HOSTILE: list[tuple[str, object]] = [
    ("events_api", {"type": "event_callback", "team_id": "T0BOTMUX1", "event": "not an object"}),
    ("events_api", {"type": "event_callback", "team_id": 7, "event": {"type": "message"}}),
    ("events_api", {"type": "something_else"}),
    ("events_api", ["not", "an", "object"]),
    ("interactive", {"type": "block_actions", "actions": "none"}),
    ("interactive", {"type": "view_submission"}),
    ("slash_commands", {"command": "/botmux", "text": "new"}),
]
BAD_EVENTS: list[dict[str, object]] = [
    {"type": "message", "channel": ALICE_DM, "user": ALICE, "text": "no ts"},
    {"type": "message", "channel": ALICE_DM, "user": ALICE, "text": "x", "ts": 1700000000.5},
    {"type": "message", "channel": "../etc", "user": ALICE, "text": "x", "ts": "1.2"},
    {"type": "message", "channel": ALICE_DM, "user": ALICE, "text": ["x"], "ts": "1.3"},
    {"type": "message", "channel": ALICE_DM, "user": {"id": ALICE}, "text": "x", "ts": "1.4"},
    {
        "type": "message",
        "channel": ALICE_DM,
        "user": ALICE,
        "text": "files",
        "ts": "1.5",
        "files": [None, {"url_private": "javascript:alert(1)"}, {"size": -1}],
    },
    {
        "type": "message",
        "channel": ALICE_DM,
        "user": ALICE,
        "text": "nul\x00 and \ud800",
        "ts": "1.6",
    },
]


async def test_hostile_payloads_are_acknowledged_and_change_nothing(
    tmp_path: Path, slack: FakeSlack, model: FakeModel
) -> None:
    """Payloads Slack never sends (wrong types, missing ids, kinds botmux does not take) are
    acknowledged (Slack would send them again forever otherwise) and start no turn; a text
    with a NUL and a lone surrogate is stored cleaned. The gateway goes on."""
    with anyio.fail_after(30):
        async with running_botmux(tmp_path, slack, model) as app:
            for kind, payload in HOSTILE:
                await slack.deliver(kind, payload)  # type: ignore[arg-type]
            for event in BAD_EVENTS:
                await slack.deliver_event(event)
            await slack.send(ALICE_DM, "still here?", user=ALICE)
            await slack.wait_until(lambda: len(slack.bot_messages(ALICE_DM)) >= 3)
            await slack.wait_until(lambda: not slack.unacked())
            stats = slack_world.adapter_of(app).statistics()
    assert sorted(r.last_user for r in model.requests) == ["files", "nul and \ufffd", "still here?"]
    assert stats.admitted == 3 and stats.deferred == 0
