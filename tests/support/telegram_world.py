"""The Telegram test world: the users and chats of the fake Bot API
(tests/fakes/telegram_server.py) and one test's botmux in front of it (:class:`Setup`), by
long polling or by webhook. The Telegram end-to-end tests, its previews and the hostile
updates share it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.app import GatewayApp
from gateway.config import parse_config
from tests.fakes.openai_server import FakeModel
from tests.fakes.telegram_server import DEFAULT_USER_ID, FakeTelegram
from tests.harness import config_text, free_port, running_gateway, telegram_section

ALICE = 42  # allowed; her private chat has the same id
GROUP = -1001234
BOT = "botmux_test_bot"


class Setup:
    """One test's botmux: its config (also written to a file, for the CLI) and its mode."""

    def __init__(self, tmp: Path, tg: FakeTelegram, model: FakeModel, mode: str, keys: str):
        self.tg = tg
        self.db = tmp / "botmux.db"
        self.mode = mode
        section = telegram_section(tg, f'mode = "{mode}"\n')
        if mode == "webhook":
            port = free_port()
            self.webhook_url = f"http://127.0.0.1:{port}/telegram/hook"
            section += (
                f'webhook_listen = "127.0.0.1:{port}"\nwebhook_url = "{self.webhook_url}"\n'
                'webhook_secret = "s3cret-Token_1"\n'
            )
        section += keys
        self.text = config_text(self.db, model.base_url, extra=section)
        self.path = tmp / "botmux.toml"
        self.path.write_text(self.text)

    @asynccontextmanager
    async def gateway(self) -> AsyncIterator[GatewayApp]:
        config = parse_config(self.text, source=str(self.path), env={})
        async with running_gateway(config) as (app, _):
            yield app

    async def push(self) -> None:
        """Get pending updates to the bot: the poller fetches them; a webhook gets them posted."""
        if self.mode == "webhook":
            statuses = await self.tg.deliver_webhook()
            assert all(s == 200 for s in statuses), statuses

    def rows(self) -> list[tuple[str, str, str, str]]:
        with sqlite3.connect(self.db) as conn:
            query = "SELECT conversation, role, content, state FROM messages ORDER BY id"
            return list(conn.execute(query))

    def chunks(self) -> list[tuple[str, str]]:
        with sqlite3.connect(self.db) as conn:
            return list(conn.execute("SELECT state, text FROM outbox ORDER BY id"))


def setup(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel, mode: str = "polling", keys: str = ""
) -> Setup:
    """botmux (not started) for Alice and the fake's default user, unless ``keys`` says."""
    return Setup(tmp_path, tg, model, mode, keys or f"allow_users = [{ALICE}, {DEFAULT_USER_ID}]\n")
