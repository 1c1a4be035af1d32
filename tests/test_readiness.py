"""/readyz follows each platform's connection: 503 (naming the platform) while it is down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from tests.fakes.openai_server import open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import config_text, make_config, running_gateway, telegram_section
from tests.support.discord_world import discord_toml, open_world

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


async def readyz(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as r:
        body: dict[str, Any] = await r.json()
        return r.status, body


async def until_status(url: str, status: int) -> dict[str, Any]:
    """Poll /readyz: the platform's state changes in another component, on its own time."""
    while True:
        code, body = await readyz(url)
        if code == status:
            return body
        await anyio.sleep(0.02)


async def test_readyz_is_503_while_telegram_is_unreachable(tmp_path: Path) -> None:
    async with open_fake_telegram() as tg, open_fake_model() as model:
        section = telegram_section(tg, "poll_timeout_s = 1\n")
        config = parse_config(
            config_text(tmp_path / "b.db", model.base_url, extra=section), source="t", env={}
        )
        async with running_gateway(config) as (_, url):
            code, body = await readyz(url)
            assert code == 200 and body["checks"]["telegram"] is True
            tg.fail_next("getUpdates", status=502, times=2)
            with anyio.fail_after(15):
                body = await until_status(url, 503)
                assert body["checks"]["telegram"] is False
                assert body["checks"]["store"] is True
                body = await until_status(url, 200)  # PTB polls again after its backoff
            assert body["checks"]["telegram"] is True


async def test_readyz_is_503_while_discord_is_disconnected(tmp_path: Path) -> None:
    async with open_world() as dc, open_fake_model() as model:
        config = make_config(tmp_path / "b.db", model.base_url, extra=discord_toml(dc))
        async with running_gateway(config) as (_, url):
            assert (await readyz(url))[0] == 200
            with anyio.fail_after(15):
                with dc.connections_held():
                    await dc.drop_websocket(resumable=True)
                    body = await until_status(url, 503)
                    assert body["checks"]["discord"] is False
                await until_status(url, 200)
