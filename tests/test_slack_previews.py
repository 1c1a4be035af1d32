"""Slack's previews inside its rate tiers (SPEC 8, SPEC 17; platforms/slack/_stream.py):
botmux in process with the real slack_sdk against the loopback Slack with Slack's limits on
(``TIER_LIMITS``: ``chat.postMessage`` about one a second per channel, ``chat.update`` 50 a
minute per workspace, a 429 with ``Retry-After`` past them). Many streams at once share the
workspace's edits, and every conversation still gets its one answer, with no 429 on the way.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel, streamed
from tests.fakes.slack_server import TIER_LIMITS, FakeSlack, open_fake_slack
from tests.support.slack_world import ALICE, running_botmux

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

PIECES = tuple(f"Part {i} of a long answer, streamed. " for i in range(12))
ANSWER = "".join(PIECES).strip()


def answered(slack: FakeSlack, dms: list[str]) -> bool:
    return all(slack.texts(dm) == [ANSWER] for dm in dms)


def refused(slack: FakeSlack) -> list[tuple[str, str]]:
    """The calls Slack answered with a 429: (method, channel)."""
    return [(c.method, str(c.args.get("channel"))) for c in slack.calls if c.status == 429]


async def test_many_streams_keep_inside_slacks_rate_tiers_and_each_answers_once(
    tmp_path: Path, model: FakeModel
) -> None:
    """20 DMs streaming for about 3 s each, asking for an edit every 0.2 s: 300 edits a
    minute if each went. The previews keep to one call a second per channel and 40 a minute in
    the workspace (the posts that start them count too), which leaves the 20 final edits room
    under Slack's 50: Slack answers no call with a 429, each DM shows one message, the answer,
    and previews were seen on the way (more calls than the answers alone need)."""
    dms = [f"D0LOAD{i:03d}" for i in range(20)]
    model.default = lambda request: streamed(*PIECES, interval_s=0.25)
    async with open_fake_slack() as slack:
        slack.limits = dict(TIER_LIMITS)
        with anyio.fail_after(60):
            async with running_botmux(tmp_path, slack, model, "stream_interval_s = 0.2\n"):
                for dm in dms:
                    await slack.send(dm, "tell me a long story", user=ALICE)
                await slack.wait_until(lambda: answered(slack, dms) or refused(slack))
                assert refused(slack) == []
                await slack.wait_until(lambda: not slack.unacked())
    for dm in dms:
        assert slack.texts(dm) == [ANSWER]
    sent = [*slack.calls_of("chat.postMessage"), *slack.calls_of("chat.update")]
    previews = [c for c in sent if c.args.get("text") != ANSWER]
    answers = [c for c in sent if c.args.get("text") == ANSWER]
    assert len({c.args["channel"] for c in previews}) >= 10  # most DMs saw a preview
    assert sorted(c.args["channel"] for c in answers) == dms  # each answer sent once
    print(f"{len(previews)} preview calls, {len(answers)} answers, 0 refused")
