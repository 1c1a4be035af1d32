"""PTB's transport on aiohttp (``platforms.telegram._transport``) against the fake Bot API:
what it sends, which failures prove nothing was sent, its timeouts and the proxy variables.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from telegram import Bot
from telegram.error import NetworkError, TimedOut

from platforms.telegram import errors
from platforms.telegram._transport import BotApiRequest
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import free_port

pytestmark = pytest.mark.anyio

CHAT = 4242


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def bot_for(base_url: str, token: str, request: BotApiRequest | None = None) -> Bot:
    return Bot(token, base_url=base_url, request=request or BotApiRequest())


async def test_calls_and_uploads_arrive_as_the_bot_api_reads_them(tg: FakeTelegram) -> None:
    async def send_document(params: dict[str, Any]) -> dict[str, Any]:
        return {"message_id": 7, "date": 0, "chat": {"id": CHAT, "type": "private"}}

    tg.register("sendDocument", send_document)
    async with bot_for(tg.base_url, tg.token) as bot:  # getMe, form-encoded
        sent = await bot.send_message(CHAT, "hello & <b>bold</b>", parse_mode="HTML")
        upload = await bot.send_document(CHAT, b"%PDF-1.4 body", filename="a.pdf", caption="c")
    assert tg.calls_to("getMe")
    [call] = tg.calls_to("sendMessage")
    assert call.params["text"] == "hello & <b>bold</b>" and call.params["parse_mode"] == "HTML"
    assert tg.sent_messages(CHAT) == ["hello & bold"]  # as the user sees it
    assert sent.message_id and upload.message_id == 7
    [doc] = tg.calls_to("sendDocument")
    assert doc.params["caption"] == "c" and doc.params["chat_id"] == CHAT
    assert doc.params["document"]["filename"] == "a.pdf"  # a multipart file part


async def test_a_refused_connection_proves_nothing_was_sent(tg: FakeTelegram) -> None:
    heard: list[bool] = []
    request = BotApiRequest(on_answer=heard.append)
    bot = bot_for(f"http://127.0.0.1:{free_port()}/bot", tg.token, request)
    await request.initialize()
    try:
        with pytest.raises(NetworkError) as refused:
            await bot.send_message(CHAT, "x")
    finally:
        await request.shutdown()
    assert errors.translate(refused.value).ambiguous is False
    assert heard == [False]  # unreachable: /readyz hears it


async def test_a_dropped_or_slow_answer_may_have_been_delivered(tg: FakeTelegram) -> None:
    heard: list[bool] = []
    async with bot_for(tg.base_url, tg.token, BotApiRequest(on_answer=heard.append)) as bot:
        tg.drop_next("sendMessage")
        with pytest.raises(NetworkError) as dropped:
            await bot.send_message(CHAT, "dropped")
        tg.hang_next("sendMessage")
        with pytest.raises(TimedOut) as slow, anyio.fail_after(10):
            await bot.send_message(CHAT, "slow", read_timeout=0.3)
        tg.fail_next("sendMessage", status=502)
        with pytest.raises(NetworkError) as failed:
            await bot.send_message(CHAT, "bad gateway")
    assert errors.translate(dropped.value).ambiguous is True
    assert errors.translate(slow.value).ambiguous is True
    bad_gateway = errors.translate(failed.value)
    assert (bad_gateway.status, bad_gateway.ambiguous) == (502, False)  # the Bot API's envelope
    assert heard == [True, False, False]  # getMe; the drop; the 502 (a read timeout: no outage)


async def test_a_call_that_finds_no_free_connection_in_time_is_not_sent(tg: FakeTelegram) -> None:
    request = BotApiRequest(connection_pool_size=1, pool_timeout=0.2, connect_timeout=0.2)
    async with bot_for(tg.base_url, tg.token, request) as bot:
        tg.hang_next("sendMessage")
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: bot.send_message(CHAT, "holds the only connection"))
            await tg.wait_until(lambda: len(tg.calls_to("sendMessage")) == 1)
            with pytest.raises(TimedOut) as waited, anyio.fail_after(10):
                await bot.send_message(CHAT, "waits for it")
            group.cancel_scope.cancel()
    assert len(tg.calls_to("sendMessage")) == 1  # the second never left
    assert errors.translate(waited.value).ambiguous is False


async def test_the_proxy_variables_are_honoured_as_httpx_honoured_them(
    tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through the proxy (the fake answers the absolute-form request): a host nobody resolves.
    monkeypatch.setenv("HTTP_PROXY", tg.origin)
    async with bot_for("http://api.telegram.invalid/bot", tg.token) as bot:
        await bot.send_message(CHAT, "by proxy")
    assert tg.sent_messages(CHAT) == ["by proxy"]
    # NO_PROXY: straight to the host, though the proxy named is dead.
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with bot_for(tg.base_url, tg.token) as bot:
        await bot.send_message(CHAT, "direct")
    assert tg.sent_messages(CHAT) == ["by proxy", "direct"]
