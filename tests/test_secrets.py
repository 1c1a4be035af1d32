"""No secret leaves botmux: after a run with known secrets, grep everything a person can see.

A real botmux process with every platform on, debug-level JSON logs, a model provider that
echoes the API key in its error body, and a client with a wrong token. Then the log, the
store (with its WAL), every HTTP body and every message the platforms received are searched
for the model key, the peer token, the Telegram and Discord bot tokens and the webhook secret.
"""

from __future__ import annotations

import signal
from pathlib import Path

import aiohttp
import anyio
import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import error, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import GatewayProcess, free_port
from tests.test_discord_e2e import BOB, CHANNEL_ID, mention, open_world

pytestmark = pytest.mark.anyio

MODEL_KEY = "sk-live-4f1c9e2b7a6d5830"
PEER_TOKEN = "peer-token-b7e1c04d9a2f"
TELEGRAM_TOKEN = "777000111:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
WEBHOOK_SECRET = "tg_webhook_secret_91c2"
ALICE = 42


async def test_no_secret_in_logs_store_replies_or_error_bodies(tmp_path: Path) -> None:
    seen: list[str] = []
    async with open_fake_model() as model, open_fake_telegram(token=TELEGRAM_TOKEN) as tg:
        async with open_world() as dc:
            discord_token = discord_token_of(dc)
            port = free_port()
            config = tmp_path / "botmux.toml"
            config.write_text(
                f'[store]\npath = "{tmp_path / "botmux.db"}"\n'
                f'[peer]\nlisten = "127.0.0.1:{port}"\ntokens = ["{PEER_TOKEN}"]\n'
                f'[model]\nbase_url = "{model.base_url}"\nmodel = "gpt-test"\n'
                f'api_keys = ["{MODEL_KEY}"]\ntimeout_s = 5\n'
                f'[telegram]\ntoken = "{TELEGRAM_TOKEN}"\napi_base = "{tg.origin}"\n'
                f"allow_users = [{ALICE}]\npoll_timeout_s = 1\n"
                f'webhook_secret = "{WEBHOOK_SECRET}"\n'
                f'[discord]\ntoken = "{discord_token}"\napi_base = "{dc.api_base}"\n'
                f'gateway_url = "{dc.gateway_url}"\nguild_ready_timeout_s = 0.05\n'
                'guild_access = "everyone"\n'
                f'[log]\nlevel = "debug"\nformat = "json"\n'
            )
            gateway = GatewayProcess(config, port, tmp_path / "botmux.log")
            try:
                await gateway.start()
                auth = {"Authorization": f"Bearer {PEER_TOKEN}"}
                async with aiohttp.ClientSession() as http:
                    r = await http.post(
                        f"{gateway.url}/api/sessions/s/chat", json={"message": "hi"}, headers=auth
                    )
                    seen.append(await r.text())
                    # The provider echoes the key back in its error body, as some do.
                    model.script(error(401, f"Incorrect API key provided: {MODEL_KEY}"))
                    r = await http.post(
                        f"{gateway.url}/api/sessions/s/chat",
                        json={"message": "again"},
                        headers=auth,
                    )
                    seen.append(await r.text())
                    assert (await r.json())["failure"]["reason"] == "auth"
                    for headers in ({}, {"Authorization": "Bearer wrong"}):
                        r = await http.get(f"{gateway.url}/metrics", headers=headers)
                        assert r.status == 401
                        seen.append(await r.text())
                    r = await http.get(f"{gateway.url}/metrics", headers=auth)
                    seen.append(await r.text())
                    r = await http.get(f"{gateway.url}/api/sessions/s/messages", headers=auth)
                    seen.append(await r.text())
                tg.inject_message(ALICE, "hello from telegram")
                await dc.inject_message(CHANNEL_ID, mention("hello from discord"), author_id=BOB)
                with anyio.fail_after(20):
                    await tg.wait_for_sent(1, ALICE)
                    await dc.wait_for_messages(CHANNEL_ID, 1)
                gateway.signal(signal.SIGTERM)
                assert await gateway.wait() == 0
            finally:
                await gateway.kill()
            seen.extend(tg.sent_messages(ALICE))
            seen.extend(m["content"] for m in dc.sent_messages(CHANNEL_ID))

    secrets = {
        "model key": MODEL_KEY,
        "peer token": PEER_TOKEN,
        "telegram token": TELEGRAM_TOKEN,
        "webhook secret": WEBHOOK_SECRET,
        "discord token": discord_token,
    }
    log = gateway.log()
    assert '"event": "decision"' in log and "telegram" in log  # the log really was written
    store = b"".join([await p.read_bytes() async for p in anyio.Path(tmp_path).glob("botmux.db*")])
    for name, secret in secrets.items():
        assert secret not in log, f"{name} in the log"
        assert secret.encode() not in store, f"{name} in the store"
        for body in seen:
            assert secret not in body, f"{name} in a reply or an HTTP body"
    assert "[REDACTED]" in log  # they were there to redact, and were


def discord_token_of(dc: FakeDiscord) -> str:
    """The world of the Discord e2e tests is built with this token."""
    from tests.test_discord_e2e import TOKEN

    return str(TOKEN)
