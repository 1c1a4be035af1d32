"""Security review 2026-12-05 of the surface Slack adds (SPEC 17; docs/SECURITY.md, "the
surfaces added by tools, schedules and Slack"): what the bot posts, the Events API's signed
requests, and where the bot token goes. botmux in process with the real slack_sdk against the
loopback Slack (tests/fakes/slack_server.py) and the fake model.

- A command's answer was posted as raw mrkdwn: ``/schedules`` shows a schedule's text as
  stored, so ``<!channel>`` in it (a model writes what it is asked to, or what a tool result
  told it) notified the whole channel when anyone listed the schedules, (finding SL-1).
- Reviewed, holds: a signed request replayed as it is within the 5 minutes admits nothing
  new; a body past 1 MiB is refused before the signature is computed over it; a download
  that redirects elsewhere is not followed, so the bot token never leaves Slack's host.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.schedule_times import When
from tests.fakes.openai_server import FakeModel
from tests.fakes.push_receiver import push_receiver
from tests.fakes.slack_server import open_fake_slack, signature
from tests.support.slack_world import ALICE, ALICE_DM, CHANNEL, key, mention, running_botmux

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


async def test_a_commands_answer_cannot_ping_the_channel(tmp_path: Path, model: FakeModel) -> None:
    """SL-1: a schedule's text is shown, never read as Slack's markup: no ``<!channel>``,
    ``<!here>``, ``<@U…>`` or ``<url|label>`` comes out of it. (A command's argument is
    Slack's markup written out already, ``<!here>`` as ``@here``, which Slack does not read.)"""
    async with open_fake_slack() as slack, running_botmux(tmp_path, slack, model) as app:
        with anyio.fail_after(30):
            thread = await slack.send(CHANNEL, mention("hello"), user=ALICE)  # a thread's own
            body = "<!channel> standup <https://evil.example|https://slack.com>"
            where = key(CHANNEL, thread)
            await app.parts.schedules.add(where, When("every", "1h"), "text", body, by="t")
            await slack.send(CHANNEL, mention("/schedules"), user=ALICE, thread_ts=thread)
            sent = await slack.wait_for_bot_messages(CHANNEL, 2, thread)
    (listed,) = [m for m in sent if "every 1h" in m["text"]]
    assert "<!" not in listed["text"] and "<https" not in listed["text"]
    shown = "'&lt;!channel&gt; standup &lt;https://evil.example|https://slack.com&gt;'"
    assert shown in listed["text"]


async def test_a_signed_request_replayed_within_its_window_admits_nothing_new(
    tmp_path: Path, model: FakeModel
) -> None:
    """Reviewed, holds: the signature proves only who signed and when; a request captured and
    sent again (the same bytes and headers, inside the 5 minutes) is admitted as a duplicate
    (the message's channel and ``ts``), answered 200 and not answered in the channel again."""
    event = {
        "type": "event_callback",
        "team_id": "T0BOTMUX1",
        "event_id": "Ev0CAPTURED",
        "event": {
            "type": "message",
            "channel": ALICE_DM,
            "user": ALICE,
            "text": "pay the invoice",
            "ts": "1700000001.000001",
            "channel_type": "im",
        },
    }
    body = json.dumps(event).encode()
    async with (
        open_fake_slack() as slack,
        running_botmux(tmp_path, slack, model, events=True),
        aiohttp.ClientSession() as http,
    ):
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature(slack.signing_secret, stamp, body),
        }
        statuses = []
        with anyio.fail_after(30):
            for _ in range(3):
                async with http.post(slack.events_url, data=body, headers=headers) as r:
                    statuses.append(r.status)
                await slack.wait_for_bot_messages(ALICE_DM, 1)
            big = b'{"type": "event_callback", "pad": "' + b"x" * (1 << 20) + b'"}'
            big_headers = headers | {
                "X-Slack-Signature": signature(slack.signing_secret, stamp, big)
            }
            async with http.post(slack.events_url, data=io.BytesIO(big), headers=big_headers) as r:
                too_big = r.status
    assert statuses == [200, 200, 200]
    assert [r.last_user for r in model.requests] == ["pay the invoice"]
    assert slack.texts(ALICE_DM) == ["echo: pay the invoice"]
    assert too_big == 413


async def test_a_file_download_that_redirects_off_slack_is_not_followed(
    tmp_path: Path, model: FakeModel
) -> None:
    """Reviewed, holds: the bot token goes to Slack's file host (here the fake's origin, as
    ``api_base``) only; a 302 to another host is refused at the 3xx, named in the reply."""
    async with open_fake_slack() as slack, push_receiver("127.0.0.2") as elsewhere:
        notes = slack.add_file("notes.txt", "text/plain", b"Budget: 40k\n")
        slack.files.redirect_next_download(elsewhere.url)
        async with running_botmux(tmp_path, slack, model):
            with anyio.fail_after(30):
                await slack.send(ALICE_DM, "read this", user=ALICE, files=(notes,))
                [reply] = await slack.wait_for_bot_messages(ALICE_DM, 1)
    assert elsewhere.received == []
    assert reply["text"].startswith(
        "notes.txt was not fetched: its file server answered with a redirect (302)"
    )
    assert [d.status for d in slack.files.downloads] == [302]
