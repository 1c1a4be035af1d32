"""A firing whose reply never arrives (SPEC 16): Telegram refuses the reply until the outbox
gives up; the schedule shows fired and not delivered in ``/schedules``, the admin API, the
metric, and the console's Schedules view (a real headless Chromium, when there is one; its
screenshot is docs/console/schedules.png).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from gateway.events import SendFailed
from gateway.events_schedules import ScheduleFired
from tests.fakes.openai_server import open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import Events, config_text, running_gateway
from tests.support.clocks import WallClock

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(120),
    pytest.mark.gateway,
    pytest.mark.process,  # Chromium, when there is one
]

OPS = "ops-console-token-0123456789"
AUTH = {"Authorization": f"Bearer {OPS}"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


async def test_a_firing_the_platform_refuses_shows_as_fired_and_not_delivered(
    tmp_path: Path,
) -> None:
    clock = WallClock("2026-06-01T11:59:00+00:00")
    events = Events()
    async with open_fake_telegram() as tg, open_fake_model() as model:
        extra = (
            f'[[peer.tokens]]\ntoken = "{OPS}"\nname = "ops"\n\n'
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\nallow_users = [42]\n\n'
            '[[schedules]]\nname = "lunch"\nconversation = "telegram:42"\ncron = "0 12 * * *"\n'
            'text = "Lunch!"\n\n'
            '[[schedules]]\nname = "tea"\nconversation = "peer:ops"\ncron = "0 16 * * *"\n'
            'text = "Tea."\n'
        )
        cfg = parse_config(
            config_text(tmp_path / "b.db", model.base_url, extra=extra), source="t", env={}
        )
        async with (
            running_gateway(cfg, schedule_clock=clock, events=events) as (app, base),
            aiohttp.ClientSession(headers=AUTH) as http,
        ):
            tg.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked")
            await clock.move("2026-06-01T12:00:00+00:00")
            await events.wait_for(ScheduleFired)
            (failed,) = await events.wait_for(SendFailed)
            async with http.get(f"{base}/api/admin/schedules") as r:
                listed = await r.json()
            async with http.get(f"{base}/metrics") as r:
                metrics = await r.text()
            async with http.get(f"{base}/api/admin/conversations/telegram:42/messages") as r:
                transcript = (await r.json())["messages"]
            listing = await app.parts.schedules.listing("telegram:42")
            if CHROMIUM is not None:
                await _console(base, tmp_path)
    assert failed.platform == "telegram"
    assert tg.sent_messages(42) == []  # nothing arrived
    lunch = next(s for s in listed["schedules"] if s["id"] == "lunch")
    assert lunch["delivery"] == "not delivered" and lunch["last_due"] == clock.now()
    assert lunch["delivered_id"] is None and listed["undelivered"] == 1
    assert "botmux_schedules_undelivered 1.0" in metrics.splitlines()
    assert 'botmux_schedule_firings_total{outcome="fired"} 1.0' in metrics.splitlines()
    assert "last fired: 2026-06-01 12:00 UTC (row 1): not delivered" in listing
    assert [(m["role"], m["scheduled"]) for m in transcript] == [
        ("user", "lunch"),
        ("assistant", None),
    ]


async def _console(base: str, tmp_path: Path) -> None:
    """The console's Schedules view says the same; its screenshot is the docs'."""
    from playwright.async_api import async_playwright, expect

    folder = Path(os.environ.get("BOTMUX_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 520})
            page.set_default_timeout(15_000)
            await page.goto(f"{base}/console/")
            await page.fill("#token", OPS)
            await page.click("#login-form button[type=submit]")
            await page.click('#tabs a[data-tab="schedules"]')
            view = page.locator("#view-schedules")
            await expect(view).to_contain_text("1 schedule(s) fired and never delivered")
            await expect(view.locator("tbody tr")).to_have_count(2)
            await expect(view.locator("tbody tr").first).to_contain_text("not delivered")
            await page.screenshot(path=str(folder / "schedules.png"), full_page=True)
        finally:
            await browser.close()
