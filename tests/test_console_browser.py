"""The operator console in a real headless Chromium (Debian's ``chromium``, driven by
Playwright; no browser download): log in, see a conversation made through the peer API appear
live, read its transcript, approve a Telegram pairing code and see the user answered, and a
wrong token refused. Every request the page makes is recorded: none leaves 127.0.0.1.

Screenshots go to the test's directory, or to ``$BOTMUX_CONSOLE_SCREENSHOTS`` when set (how
docs/console/ was made). Without a chromium binary the tests skip, unless
``BOTMUX_REQUIRE_CHROMIUM`` is set (``.ci/run`` installs chromium and sets it).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config import Config, parse_config
from gateway.messages import CallState, Inbound, ToolCall, TurnResult
from gateway.store import AdmitRow, AnswerTurn, FinishCall, OpenCall, RecordStep
from tests.fakes.openai_server import FakeModel
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import config_text, running_gateway, telegram_section

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.gateway, pytest.mark.process]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    if os.environ.get("BOTMUX_REQUIRE_CHROMIUM"):
        raise RuntimeError("BOTMUX_REQUIRE_CHROMIUM is set but no chromium binary was found")
    pytest.skip(
        "no chromium binary (apt-get install chromium; .ci/run does)", allow_module_level=True
    )

from playwright.async_api import Page, async_playwright, expect  # noqa: E402

OPS = "ops-console-token-0123456789"
AUTH = {"Authorization": f"Bearer {OPS}"}
WAIT_MS = 15_000
HOSTILE = '<img src="/pwned" onerror="alert(1)">'  # a Telegram user's chosen name


@pytest.fixture
def shots(tmp_path: Path) -> Callable[[str], str]:
    folder = Path(os.environ.get("BOTMUX_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return lambda name: str(folder / f"{name}.png")


def gateway_config(tmp_path: Path, model: FakeModel, tg: FakeTelegram) -> Config:
    extra = f'[[peer.tokens]]\ntoken = "{OPS}"\nname = "ops"\n\n' + telegram_section(
        tg, "allow_users = [42]\n"
    )
    config = parse_config(
        config_text(tmp_path / "botmux.db", model.base_url, extra=extra), source="t", env={}
    )
    # The wrong-token test must not lock the browser's address out.
    return dataclasses.replace(config, peer=dataclasses.replace(config.peer, auth_fail_limit=100))


@asynccontextmanager
async def browser_page(base: str) -> AsyncIterator[tuple[Page, list[str]]]:
    """A fresh headless Chromium page; yields it and every URL it requested."""
    requested: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            page.set_default_timeout(WAIT_MS)
            page.on("request", lambda request: requested.append(request.url))
            yield page, requested
        finally:
            await browser.close()
    assert requested and all(url.startswith(base + "/") for url in requested), requested


async def log_in(page: Page, base: str, token: str) -> None:
    await page.goto(f"{base}/console/")
    await page.fill("#token", token)
    await page.click("#login-form button[type=submit]")


async def test_log_in_see_a_conversation_arrive_live_and_read_its_transcript(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram, shots: Callable[[str], str]
) -> None:
    async with (
        running_gateway(gateway_config(tmp_path, model, tg)) as (app, base),
        aiohttp.ClientSession() as http,
        browser_page(base) as (page, _),
    ):
        loads: list[str] = []
        page.on("load", lambda _: loads.append(page.url))
        await log_in(page, base, "not-the-token-0123456789")
        await expect(page.locator("#login-error")).to_contain_text("Wrong token")
        await expect(page.locator("#view-overview")).to_be_hidden()
        assert app.peer is not None  # opening the page cost no failed authentication
        assert app.peer.statistics().unauthorized == 1
        await page.screenshot(path=shots("login-refused"))

        await page.fill("#token", OPS)
        await page.click("#login-form button[type=submit]")
        await expect(page.locator("#recent")).to_contain_text("No conversation yet")
        await expect(page.locator("#live")).to_have_text("live")
        assert await page.evaluate("sessionStorage.getItem('botmux.token')") == OPS

        for session, text in (("alice", "hello console"), ("bob", "status?"), ("carol", "hi")):
            r = await http.post(
                f"{base}/api/sessions/{session}/chat", json={"message": text}, headers=AUTH
            )
            assert r.status == 200
        row = page.locator('#recent tr[data-key="peer:alice"]')
        await expect(row).to_be_visible()  # pushed over SSE: the page was not reloaded
        await expect(page.locator('#recent tr[data-key="peer:carol"]')).to_be_visible()
        await expect(page.locator("#card-pairing .value")).to_have_text("0")
        assert len(loads) == 1, loads
        await page.screenshot(path=shots("overview"), full_page=True)

        await row.click()
        messages = page.locator("#view-transcript .msg .content")
        await expect(messages).to_have_text(["hello console", "echo: hello console"])
        await page.screenshot(path=shots("transcript"), full_page=True)

        await page.click('#tabs a[data-tab="conversations"]')
        await page.fill("#q", "peer:b")
        await page.click("#search button")
        listed = page.locator("#conversation-list tbody tr")
        await expect(listed).to_have_count(1)
        await expect(listed).to_contain_text("peer:bob")
        await page.fill("#q", "")
        await page.click("#search button")
        await expect(listed).to_have_count(3)
        await page.screenshot(path=shots("conversations"), full_page=True)

        await page.click('#tabs a[data-tab="outbox"]')
        await expect(page.locator("#view-outbox")).to_contain_text("Every reply was delivered")

        await page.click("#reload")  # the config the gateway started with: nothing changes
        await expect(page.locator("#toast")).to_contain_text("Config reload: unchanged")


async def test_approve_a_telegram_pairing_code_and_the_user_is_answered(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram, shots: Callable[[str], str]
) -> None:
    async with (
        running_gateway(gateway_config(tmp_path, model, tg)) as (_, base),
        browser_page(base) as (page, _),
    ):
        tg.inject_message(701, "let me in")
        tg.inject_message(702, "me too", first_name=HOSTILE)  # shown as text, never as HTML
        with anyio.fail_after(20):
            await tg.wait_until(lambda: bool(tg.sent_messages(701) and tg.sent_messages(702)))
        code = tg.sent_messages(701)[0].split("approve telegram ")[1].split()[0]

        await log_in(page, base, OPS)
        await expect(page.locator("#card-pairing .value")).to_have_text("2")
        await page.click('#tabs a[data-tab="pairing"]')
        pending = page.locator(f'#pending-codes tr[data-code="{code}"]')
        await expect(pending).to_contain_text("701")
        await pending.get_by_role("button", name="Approve").click()
        await expect(page.locator("#toast")).to_contain_text("Approved telegram user 701")
        await expect(page.locator('#approved-users tr[data-user="701"]')).to_be_visible()
        await expect(pending).to_have_count(0)
        waiting = page.locator("#pending-codes tbody tr")
        await expect(waiting).to_have_count(1)  # 702 waits
        await expect(waiting).to_contain_text(HOSTILE)
        assert await page.locator("#pending-codes img").count() == 0
        await page.screenshot(path=shots("pairing"), full_page=True)

        tg.inject_message(701, "thanks!")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, 701)
        assert tg.sent_messages(701)[1] == "echo: thanks!"
        assert len(tg.sent_messages(702)) == 1  # still waiting for the operator


async def test_a_long_transcript_is_read_a_page_at_a_time(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram, shots: Callable[[str], str]
) -> None:
    """130 rows: the view shows the newest 100 (the store reads no more, L-8), and "Older
    messages" puts the 30 before them above, once, then goes."""
    async with (
        running_gateway(gateway_config(tmp_path, model, tg)) as (app, base),
        browser_page(base) as (page, requested),
    ):
        for n in range(65):
            admitted = await app.parts.store.submit(
                AdmitRow(Inbound("peer", "peer:long", f"long/{n}", f"question {n}"))
            )
            reply = TurnResult(reply=f"answer {n}")
            await app.parts.store.submit(AnswerTurn(admitted.row, reply, (reply.reply,)))
        await log_in(page, base, OPS)
        await expect(page.locator("#live")).to_have_text("live")
        await page.goto(f"{base}/console/#conversation/peer%3Along")
        contents = page.locator("#view-transcript .msg .content")
        await expect(contents).to_have_count(100)
        await expect(contents.first).to_have_text("question 15")
        await expect(contents.last).to_have_text("answer 64")
        first = page.locator("#view-transcript .msg").first
        oldest_shown = await first.get_attribute("data-id")
        await page.click("#older")
        await expect(contents).to_have_count(130)
        await expect(contents.first).to_have_text("question 0")
        await expect(contents.nth(30)).to_have_text("question 15")
        await expect(page.locator("#older")).to_be_hidden()
        await page.screenshot(path=shots("transcript-older"), full_page=True)
    pages = [u.split("?", 1)[1] for u in requested if "/messages" in u]
    assert pages == ["limit=100", f"limit=100&before={oldest_shown}"]


async def test_a_tool_step_shows_its_calls_and_a_tool_row_its_tool(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram
) -> None:
    """SPEC 15's rows in the transcript view: the step's text and its calls (name and
    arguments, long arguments cut with their length said), each call's row named by its tool."""
    long = '{"text": "' + "x" * 400 + '"}'
    calls = (
        ToolCall("call_1", "local__echo", '{"text": "hi"}'),
        ToolCall("call_2", "local__echo", long),
    )
    async with (
        running_gateway(gateway_config(tmp_path, model, tg)) as (app, base),
        browser_page(base) as (page, _),
    ):
        store = app.parts.store
        turn = (await store.submit(AdmitRow(Inbound("peer", "peer:tools", "t/1", "echo hi")))).row
        await store.submit(RecordStep(turn, "Let me echo.", calls, "gpt-x"))
        for call, result in zip(calls, ("hi", "x" * 400), strict=True):
            row = await store.submit(OpenCall(turn, call, CallState.STARTED))
            await store.submit(FinishCall(row, result))
        reply = TurnResult(reply="echoed")
        await store.submit(AnswerTurn(turn, reply, (reply.reply,)))
        await log_in(page, base, OPS)
        await expect(page.locator("#live")).to_have_text("live")
        await page.goto(f"{base}/console/#conversation/peer%3Atools")
        rows = page.locator("#view-transcript .msg")
        await expect(rows).to_have_count(5)  # the user, the step, two tool rows, the answer
        step = rows.nth(1)
        await expect(step.locator(".content")).to_have_text("Let me echo.")
        await expect(step.locator(".calls li")).to_have_text(
            [
                'local__echo({"text": "hi"})',
                f"local__echo({long[:300]} … ({len(long)} characters))",
            ]
        )
        await expect(rows.nth(2).locator(".meta")).to_contain_text("tool · local__echo · #")
        await expect(rows.nth(2).locator(".content")).to_have_text("hi")
