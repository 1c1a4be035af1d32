"""``botmux check`` and ``botmux run`` say what is open, cleartext or readable by others.

Both run as real processes; ``check`` prints warnings and exits 0, ``run`` logs the same
warnings and serves anyway (none of these is a refusal).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeModel
from tests.harness import ROOT, botmux_process

pytestmark = [pytest.mark.anyio, pytest.mark.process]


def check(config: Path) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return result.returncode, result.stdout


def write(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    config = tmp_path / "botmux.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "botmux.db"}"\n' + text)
    config.chmod(mode)
    return config


def warnings(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("warning: ")]


def test_discord_open_to_every_guild_is_warned_about(tmp_path: Path) -> None:
    rc, out = check(write(tmp_path, '[discord]\ntoken = "t.t.t"\nguild_access = "everyone"\n'))
    assert rc == 0
    [warning] = warnings(out)
    assert "discord is open" in warning and "allow_guilds" in warning
    assert "every guild (every member)" in out


@pytest.mark.parametrize(
    "section",
    [
        '[discord]\ntoken = "t.t.t"\n',  # the default: allowed and paired users only
        '[discord]\ntoken = "t.t.t"\nguild_access = "everyone"\nallow_guilds = [7]\n',
        '[telegram]\ntoken = "1:t"\nallow_chats = [-100]\ngroup_mode = "all"\n',
        '[peer]\nlisten = "127.0.0.1:8642"\n',  # no tokens, loopback: fine
        '[model]\nmodel = "m"\nbase_url = "http://127.0.0.1:11434/v1"\n',
        '[model]\nmodel = "m"\nbase_url = "http://localhost:11434/v1"\n',
        '[model]\nmodel = "m"\nbase_url = "http://[::1]:11434/v1"\n',
    ],
)
def test_closed_or_local_configurations_get_no_warning(tmp_path: Path, section: str) -> None:
    rc, out = check(write(tmp_path, section))
    assert rc == 0 and warnings(out) == [], out
    if "discord" in section and "everyone" not in section:
        assert "(allowed and paired users)" in out


def test_cleartext_transports_to_other_hosts_are_warned_about(tmp_path: Path) -> None:
    text = (
        '[model]\nmodel = "m"\nbase_url = "http://models.example.net/v1"\n'
        'api_keys = ["sk-cleartext-key-1"]\n'
        '[[model.fallbacks]]\nmodel = "f"\nbase_url = "https://ok.example.net/v1"\n'
        '[[model.fallbacks]]\nmodel = "g"\nbase_url = "http://10.0.0.5:8000/v1"\n'
        '[telegram]\ntoken = "1:tok"\napi_base = "http://tg-proxy.example.net"\n'
        '[discord]\ntoken = "t.t.t"\napi_base = "http://dc.example.net/api/v10"\n'
        'gateway_url = "ws://dc.example.net/gateway"\n'
    )
    rc, out = check(write(tmp_path, text))
    assert rc == 0
    found = warnings(out)
    assert [w.split(" ", 2)[1] for w in found] == [
        "model.base_url",
        "model.fallbacks[1].base_url",
        "telegram.api_base",
        "discord.api_base",
        "discord.gateway_url",
    ]
    assert "sk-cleartext-key-1" not in out


def test_a_store_readable_by_others_is_warned_about(tmp_path: Path) -> None:
    config = write(tmp_path, "")
    db = tmp_path / "botmux.db"
    sqlite3.connect(db).close()
    db.chmod(0o644)
    rc, out = check(config)
    assert rc == 0
    [warning] = warnings(out)
    assert str(db) in warning and "chmod 600" in warning
    db.chmod(0o600)
    assert warnings(check(config)[1]) == []


async def test_run_logs_what_check_warns_about_and_serves(tmp_path: Path, model: FakeModel) -> None:
    db = tmp_path / "botmux.db"
    sqlite3.connect(db).close()
    db.chmod(0o640)
    gateway = botmux_process(tmp_path, model.base_url, db=db)
    config = gateway.config_path
    config.chmod(0o644)  # and it holds the model key
    try:
        await gateway.start()
        gateway.signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await gateway.wait() == 0
    finally:
        await gateway.kill()
    log = gateway.log()
    assert f"config warning: {config} holds secrets and is readable by others" in log
    assert f"config warning: the store {db} is open to group or others" in log
    assert "sk-test-key-0001" not in log
    assert os.stat(config).st_mode & 0o777 == 0o644  # warned about, not changed
