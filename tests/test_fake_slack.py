"""The loopback Slack (tests/fakes/slack_server.py) answers the real slack_sdk as Slack does:
the Web API's answers and refusals, Socket Mode's hello, envelopes, acknowledgements and the
replay after a ``disconnect``, and Events API posts signed as Slack signs them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import anyio
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_server import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    MAX_TEXT,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    open_fake_slack,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with open_fake_slack() as fake:
        yield fake


def web_client(slack: FakeSlack, token: str = BOT_TOKEN) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=slack.api_base, retry_handlers=[])


async def test_the_web_api_answers_and_refuses_as_slack_does(slack: FakeSlack) -> None:
    client = web_client(slack)
    me = await client.auth_test()
    assert (me["team_id"], me["user_id"]) == (TEAM, BOT_USER)
    with pytest.raises(SlackApiError) as wrong:
        await web_client(slack, "xoxb-not-the-token").auth_test()
    assert wrong.value.response["error"] == "invalid_auth"
    sent = await client.chat_postMessage(channel="D0ALICE01", text="hello")
    await client.chat_update(channel="D0ALICE01", ts=sent["ts"], text="hello again")
    assert slack.texts("D0ALICE01") == ["hello again"]
    with pytest.raises(SlackApiError) as too_long:
        await client.chat_postMessage(channel="D0ALICE01", text="x" * (MAX_TEXT + 1))
    assert too_long.value.response["error"] == "msg_too_long"
    theirs = await slack.send("C0GENERAL", "a person's", user="U0BOB0001")
    with pytest.raises(SlackApiError) as not_ours:
        await client.chat_update(channel="C0GENERAL", ts=theirs, text="edited")
    assert not_ours.value.response["error"] == "cant_update_message"
    slack.fail_next("chat.postMessage", 429, retry_after=3)
    with pytest.raises(SlackApiError) as limited:
        await client.chat_postMessage(channel="D0ALICE01", text="too soon")
    response = limited.value.response
    assert (response.status_code, response["error"], response.headers["Retry-After"]) == (
        429,
        "ratelimited",
        "3",
    )
    await client.chat_delete(channel="D0ALICE01", ts=sent["ts"])
    assert slack.texts("D0ALICE01") == []


async def test_files_need_the_bot_token(slack: FakeSlack) -> None:
    entry = slack.add_file("a.txt", "text/plain", b"hello")
    async with aiohttp.ClientSession() as http:
        async with http.get(entry["url_private_download"], allow_redirects=False) as anonymous:
            assert anonymous.status == 302  # Slack sends a stranger to its sign-in page
        headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
        async with http.get(entry["url_private_download"], headers=headers) as answer:
            assert (answer.status, await answer.read()) == (200, b"hello")


async def test_socket_mode_hello_envelopes_acks_and_the_replay_after_a_disconnect(
    slack: FakeSlack,
) -> None:
    """The real SocketModeClient connects, gets envelopes; one it does not acknowledge comes
    again on its next connection (after Slack's ``disconnect``), with ``retry_attempt``."""
    got: list[tuple[str, int]] = []
    ack_them = True
    second = anyio.Event()

    async def listener(client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        got.append((request.payload["event"]["text"], request.retry_attempt or 0))
        if len(got) == 2:
            second.set()
        if ack_them:
            await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))

    client = SocketModeClient(APP_TOKEN, web_client=AsyncWebClient(base_url=slack.api_base))
    client.socket_mode_request_listeners.append(listener)
    try:
        with anyio.fail_after(10):
            await client.connect()  # type: ignore[no-untyped-call]
            await slack.wait_until(lambda: slack.hellos == 1)
            await slack.send("D0ALICE01", "first", user="U0ALICE01")
            await slack.wait_until(lambda: not slack.unacked())
            ack_them = False
            await slack.send("D0ALICE01", "second", user="U0ALICE01")
            await second.wait()
            ack_them = True
            await slack.disconnect()
            await slack.wait_until(lambda: not slack.unacked())
    finally:
        await client.close()  # type: ignore[no-untyped-call]
    assert got == [("first", 0), ("second", 0), ("second", 1)]
    assert slack.hellos == 2


async def test_events_api_posts_are_signed_and_retried_with_their_header(
    slack: FakeSlack,
) -> None:
    received: list[tuple[bool, str | None]] = []
    answers = [503, 200]
    verifier = SignatureVerifier(SIGNING_SECRET)

    async def endpoint(request: web.Request) -> web.Response:
        body = await request.read()
        received.append(
            (
                verifier.is_valid_request(body, dict(request.headers)),
                request.headers.get("X-Slack-Retry-Num"),
            )
        )
        assert json.loads(body)["event"]["text"] == "over http"
        return web.Response(status=answers.pop(0))

    app = web.Application()
    app.router.add_post("/slack/events", endpoint)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    slack.events_url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    try:
        with anyio.fail_after(10):
            await slack.send("D0ALICE01", "over http", user="U0ALICE01")
            [envelope] = slack.envelopes
            await slack.wait_until(lambda: envelope.answers == [503])
            await slack.redeliver()
            await slack.wait_acked(envelope)
    finally:
        await runner.cleanup()
    assert received == [(True, None), (True, "1")]
    assert envelope.answers == [503, 200]
