"""Discord previews end to end (SPEC 8): a real gateway, real discord.py, the loopback Discord
and a fake model that streams, held open where a test looks at what the channel showed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.discord_server import DISCORD_LIMITS, FakeDiscord
from tests.fakes.openai_server import FakeModel, streamed
from tests.harness import make_config, running_gateway
from tests.support.discord_world import (
    ALICE,
    OPEN_CHANNEL_ID,
    discord_toml,
    open_world,
    running_botmux,
)

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

MESSAGE_ROUTE = "/channels/{channel_id}/messages/{message_id}"
SEND_ROUTE = "/channels/{channel_id}/messages"
PIECES = (
    "Streaming answers grow in the channel, ",
    "piece by piece, ",
    "while the model is still writing; ",
    "the final answer ",
    "arrives exactly once.",
)
ANSWER = "".join(PIECES)


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_world() as fake:
        yield fake


def edits(dc: FakeDiscord) -> list[str]:
    return [c.json["content"] for c in dc.calls("PATCH", MESSAGE_ROUTE)]


async def test_a_channel_sees_one_preview_message_edited_then_finalised(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    dc.rate_limits = DISCORD_LIMITS
    model.script(streamed(*PIECES, interval_s=1.2, hold_after=1))
    async with running_botmux(tmp_path, dc, model, "stream_interval_s = 0.2\n"):
        question = await dc.inject_message(OPEN_CHANNEL_ID, "stream to us", author_id=ALICE)
        with anyio.fail_after(15):
            [preview] = await dc.wait_for_messages(OPEN_CHANNEL_ID, 1)
            assert preview["content"] == PIECES[0].strip()
            model.release_streams()
            await dc.wait_until(lambda: edits(dc)[-1:] == [ANSWER])
            await anyio.sleep(0.3)  # nothing more may come: no extra message, no late edit
    [sent] = dc.calls("POST", SEND_ROUTE)  # the preview, and no other message
    assert str(sent.json["message_reference"]["message_id"]) == str(question["id"])
    texts = edits(dc)
    assert len(texts) >= 3, texts  # previews grew by edits, then the final edit
    assert all(ANSWER.startswith(t) for t in texts)
    assert dc.visible_contents(OPEN_CHANNEL_ID) == [ANSWER]
    assert not dc.rate_limited()  # previews kept within the channel's bucket


async def test_streaming_off_sends_the_answer_only(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    model.script(streamed(*PIECES, interval_s=0.3))
    async with running_botmux(tmp_path, dc, model, 'streaming = "off"\n'):
        await dc.inject_message(OPEN_CHANNEL_ID, "no previews", author_id=ALICE)
        with anyio.fail_after(15):
            assert [m["content"] for m in await dc.wait_for_messages(OPEN_CHANNEL_ID, 1)] == [
                ANSWER
            ]
    assert not dc.calls("PATCH", MESSAGE_ROUTE)
    assert not model.requests[0].body.get("stream")  # nobody to stream to: a plain call


async def test_a_cut_stream_then_a_fallback_replaces_the_preview(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    first = "The first attempt writes this much before it is cut, "
    cut = streamed(first, "then more, ", "and more", "never", cut_after=3, hold_after=2)
    model.script(cut, cut, model="gpt-test")  # the try and its retry, both cut
    fallback = ("The fallback answers ", "in full instead.")
    model.script(streamed(*fallback, interval_s=0.5), model="gpt-fallback")
    extra = "stream_interval_s = 0.2\n"
    model_keys = (
        "backoff_base_s = 0.01\nbackoff_cap_s = 0.05\nmax_retries = 1\n"
        f'\n[[model.fallbacks]]\nbase_url = "{model.base_url}"\nmodel = "gpt-fallback"\n'
        'api_keys = ["sk-fb-1"]\n'
    )
    config = make_config(
        tmp_path / "botmux.db",
        model.base_url,
        extra=discord_toml(dc, extra),
        model_extra=model_keys,
    )
    async with running_gateway(config):
        await dc.inject_message(OPEN_CHANNEL_ID, "stream to us", author_id=ALICE)
        with anyio.fail_after(15):
            [preview] = await dc.wait_for_messages(OPEN_CHANNEL_ID, 1)
            model.release_streams()
            answer = "".join(fallback)
            await dc.wait_until(lambda: dc.visible_contents(OPEN_CHANNEL_ID) == [answer])
            await anyio.sleep(0.3)
    assert preview["content"].startswith("The first attempt")
    assert [r.model for r in model.requests] == ["gpt-test", "gpt-test", "gpt-fallback"]
    assert len(dc.calls("POST", SEND_ROUTE)) == 1  # one message: the preview, replaced
    assert dc.visible_contents(OPEN_CHANNEL_ID) == [answer]


async def test_fifty_streaming_dms_stay_within_discords_limits(
    tmp_path: Path, dc: FakeDiscord, model: FakeModel
) -> None:
    """50 conversations streaming at once, the fake's buckets on and not announced (so
    discord.py cannot pace itself from the headers: only our preview budget keeps previews
    under them): no preview gets a 429, every DM ends with the one answer."""
    dc.rate_limits = dataclasses.replace(DISCORD_LIMITS, announce=False)
    users = list(range(7000, 7050))
    for user in users:
        dc.add_user(user, f"user{user}")
        dc.add_dm_channel(70_000 + user, user)
    section = discord_toml(dc, "stream_interval_s = 0.2\n").replace(
        f"allow_users = [{ALICE}]", f"allow_users = {users}"
    )
    model.default = lambda r: streamed(*PIECES, interval_s=0.4)
    config = make_config(tmp_path / "botmux.db", model.base_url, extra=section)
    async with running_gateway(config):
        for user in users:
            await dc.inject_message(70_000 + user, "stream to me", author_id=user)
        with anyio.fail_after(90):
            await dc.wait_until(
                lambda: all(dc.visible_contents(70_000 + u) == [ANSWER] for u in users)
            )
            await anyio.sleep(0.5)  # nothing more may come
    limited = [c for c in dc.rate_limited() if c.route in (SEND_ROUTE, MESSAGE_ROUTE)]
    previews = [c for c in limited if (c.json or {}).get("content") != ANSWER]
    assert previews == []  # no preview ran into a limit (finals may wait theirs out)
    # Previews were shown (best effort: the budget may leave a fast answer without one).
    shown = [
        c
        for c in dc.calls("POST", SEND_ROUTE) + dc.calls("PATCH", MESSAGE_ROUTE)
        if c.retry_after is None and (c.json or {}).get("content") not in (None, ANSWER)
    ]
    assert len(shown) >= 10
    for user in users:
        assert dc.visible_contents(70_000 + user) == [ANSWER]  # each answered once
        posts = [
            c
            for c in dc.calls("POST", SEND_ROUTE)
            if c.path == f"/channels/{70_000 + user}/messages" and c.retry_after is None
        ]
        assert len(posts) == 1  # one message each: the preview, edited into the answer
