"""The Slack adapter's pure rules (platforms/slack/convert.py): what an event is, whether it
is a turn, where its conversation is, what the model reads; and Slack's signature check
(platforms/slack/_events_api.py). No gateway, no network."""

from __future__ import annotations

import json
from typing import Any

from platforms.slack import convert
from platforms.slack._events_api import read_payload, refusal
from platforms.slack.convert import Command, Identity, Ignore, Target, Turn
from tests.fakes.slack_server import signature

ME = Identity("T0TEAM001", "U0BOT0001", "B0BOT0001")


def event(text: str = "hi", **kw: Any) -> dict[str, Any]:
    base = {
        "type": "message",
        "channel": "C0CHAN001",
        "user": "U0BOB0001",
        "text": text,
        "ts": "1700000000.000100",
        "channel_type": "channel",
    }
    return {**base, **kw}


def seen(text: str = "hi", **kw: Any) -> convert.Seen:
    found = convert.seen_from("T0TEAM001", event(text, **kw))
    assert found is not None
    return found


def decide(text: str = "hi", *, require_mention: bool = True, **kw: Any) -> convert.Decision:
    return convert.decide(seen(text, **kw), ME, require_mention=require_mention)


def test_only_well_formed_messages_and_mentions_are_seen() -> None:
    assert convert.seen_from("T0TEAM001", event(type="reaction_added")) is None
    assert convert.seen_from("T0TEAM001", event(ts="yesterday")) is None
    assert convert.seen_from("T0TEAM001", event(channel=42)) is None
    assert convert.seen_from("T0TEAM001", event(text=["no"])) is None
    assert convert.seen_from("T0TEAM001", event(user="<script>")) is None
    assert convert.event_of({"type": "url_verification"}) is None
    assert convert.event_of({"type": "event_callback", "team_id": "T0TEAM001", "event": 3}) is None


def test_mention_gating_the_loop_guard_and_commands() -> None:
    assert decide("chatting") == Ignore("not_addressed")
    assert decide("chatting", require_mention=False) == Turn("chatting")
    assert decide("<@U0BOT0001> what is 2+2?") == Turn("what is 2+2?")
    assert decide("no mention in the text", type="app_mention") == Turn("no mention in the text")
    assert decide("a DM", channel="D0DM00001", channel_type="im") == Turn("a DM")
    assert decide("<@U0BOT0001> hi", bot_id="B0OTHER01") == Ignore("bot")
    assert decide("<@U0BOT0001> hi", user="U0BOT0001") == Ignore("bot")
    assert decide("<@U0BOT0001> hi", subtype="message_changed") == Ignore("subtype")
    assert decide("<@U0BOT0001> /new") == Command("new")
    assert decide("<@U0BOT0001> /unschedule 7") == Command("unschedule", "7")
    assert decide("<@U0BOT0001>") == Ignore("empty")
    in_thread = convert.decide(
        seen("go on", thread_ts="1.5"), ME, require_mention=True, in_thread=True
    )
    assert in_thread == Turn("go on")


def test_conversations_and_threads() -> None:
    top = seen("<@U0BOT0001> hi")
    assert convert.target_of(top, reply_in_thread=True) == Target(
        "T0TEAM001", "C0CHAN001", "1700000000.000100"
    )
    assert convert.target_of(top, reply_in_thread=False) == Target("T0TEAM001", "C0CHAN001")
    reply = seen("more", thread_ts="1699999999.000001")
    assert convert.target_of(reply, reply_in_thread=False).thread_ts == "1699999999.000001"
    dm = seen("hi", channel="D0DM00001", channel_type="im")
    assert convert.target_of(dm, reply_in_thread=True) == Target("T0TEAM001", "D0DM00001")
    key = "slack:T0TEAM001:C0CHAN001:thread:1700000000.000100"
    assert convert.target_of(top, reply_in_thread=True).key == key
    assert convert.parse_key(key) == Target("T0TEAM001", "C0CHAN001", "1700000000.000100")
    assert top.message_id == "C0CHAN001:1700000000.000100"  # admission's key: channel and ts


def test_the_model_reads_slacks_markup_written_out() -> None:
    text = (
        "<@U0BOT0001> ask <@U0CAROL01|carol> in <#C0CHAN002|ops> about <https://x.org/a|this>"
        " &amp; <mailto:a@b.c|a@b.c>, <!here> 1 &lt; 2"
    )
    assert convert.turn_text(text, "U0BOT0001") == (
        "ask @carol in #ops about this (https://x.org/a) & a@b.c, @here 1 < 2"
    )


def test_files_become_references_and_odd_ones_are_left_out() -> None:
    files = [
        {
            "name": "a.png",
            "mimetype": "image/png",
            "size": 10,
            "url_private_download": "https://files.slack.com/files-pri/T-F1/download/a.png",
        },
        {"name": "ext", "mode": "external"},
        "garbage",
        {
            "name": "b.txt",
            "mimetype": "text/plain",
            "size": True,
            "url_private": "https://files.slack.com/b",
        },
    ]
    refs = convert.attachment_refs(files)
    assert [(r.kind, r.name, r.size) for r in refs] == [
        ("image", "a.png", 10),
        ("document", "b.txt", None),
    ]
    assert refs[0].source.endswith("/download/a.png")


def test_clicks_are_read_from_block_actions_only() -> None:
    payload = {
        "type": "block_actions",
        "user": {"id": "U0ALICE01"},
        "channel": {"id": "D0DM00001"},
        "message": {"ts": "1700000000.000200", "text": "Approve this tool call?"},
        "actions": [{"action_id": "botmux_approval_yes", "value": "ap:12:y"}],
    }
    click = convert.clicked(payload)
    assert click == convert.Clicked(
        "ap:12:y", "U0ALICE01", "D0DM00001", "1700000000.000200", "Approve this tool call?"
    )
    assert convert.clicked({**payload, "type": "view_submission"}) is None
    assert convert.clicked({**payload, "actions": []}) is None


def test_the_signature_check() -> None:
    body = json.dumps({"type": "event_callback"}).encode()
    now = 1_700_000_000.0
    good = {
        "X-Slack-Request-Timestamp": str(int(now)),
        "X-Slack-Signature": signature("s3cret", str(int(now)), body),
    }
    assert refusal(body, good, "s3cret", now) is None
    assert refusal(body, {}, "s3cret", now) == "unsigned"
    assert refusal(body, good, "s3cret", now + 301) == "stale"
    assert refusal(body, good, "other", now) == "bad signature"
    assert refusal(body + b" ", good, "s3cret", now) == "bad signature"
    assert read_payload(
        b"payload=%7B%22type%22%3A%22block_actions%22%7D", "application/x-www-form-urlencoded"
    ) == ("interactive", {"type": "block_actions"})
    assert read_payload(b"\xff", "application/json") is None
    assert read_payload(b"[1]", "application/json") is None


def test_a_schedule_may_fire_into_a_slack_conversation() -> None:
    from gateway.config_schedules import conversation_problem

    thread = "slack:T0TEAM001:C0CHAN001:thread:1700000000.000100"
    assert conversation_problem(thread, {"slack", "peer"}) is None
    assert conversation_problem("slack:team:general", {"slack"}) == (
        "'slack:team:general' is not a slack conversation key (SPEC 2's form)"
    )
