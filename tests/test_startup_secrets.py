"""A platform refusing the bot token at start-up: one clear line, the token nowhere.

botmux runs as a real child process against the loopback fakes; the fakes refuse the
token (Telegram's getMe answers 401/404, Discord's ``/users/@me`` 401) and the test reads
everything the process wrote to stdout and stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from platforms.telegram.errors import TOKEN_REFUSED
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeModel
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import ROOT, config_text, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.process]

TG_TOKEN = "123456789:AAHsecretTELEGRAMtokenXYZ"
DC_TOKEN = "MTIzNDU2Nzg5.secretDISCORDtoken.XYZabc"


async def run_botmux(config: Path) -> tuple[int, str, str]:
    """``botmux run`` to its end: the exit code, stdout and stderr."""
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "gateway", "run", "--config", str(config)],
            cwd=ROOT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def write_config(tmp_path: Path, model: FakeModel, section: str) -> Path:
    config = tmp_path / "botmux.toml"
    listen = f"127.0.0.1:{free_port()}"
    config.write_text(
        config_text(tmp_path / "botmux.db", model.base_url, listen=listen, extra=section)
    )
    config.chmod(0o600)
    return config


@pytest.mark.parametrize("status", [401, 404])
async def test_telegram_token_refused_at_start_is_one_line_without_the_token(
    tmp_path: Path, model: FakeModel, status: int
) -> None:
    async with open_fake_telegram(TG_TOKEN) as tg:
        tg.fail_next("getMe", status=status, times=5)
        section = f'[telegram]\ntoken = "{TG_TOKEN}"\napi_base = "{tg.origin}"\nallow_users = [1]\n'
        rc, out, err = await run_botmux(write_config(tmp_path, model, section))
    assert rc == 1
    assert TG_TOKEN not in out + err
    assert "AAHsecret" not in out + err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == f"botmux: error: telegram could not start: {TOKEN_REFUSED}", err


async def test_discord_token_refused_at_start_is_one_line_without_the_token(
    tmp_path: Path, model: FakeModel
) -> None:
    fake = FakeDiscord(token="a-different-token-the-fake-expects", bot_user_id=900)
    await fake.start()
    try:
        section = (
            f'[discord]\ntoken = "{DC_TOKEN}"\napi_base = "{fake.api_base}"\n'
            f'gateway_url = "{fake.gateway_url}"\nguild_access = "everyone"\n'
        )
        rc, out, err = await run_botmux(write_config(tmp_path, model, section))
    finally:
        await fake.aclose()
    assert rc == 1
    assert DC_TOKEN not in out + err
    assert "secretDISCORD" not in out + err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == "botmux: error: discord refused the bot token (401)", err


async def test_an_uncaught_traceback_is_redacted(tmp_path: Path) -> None:
    """The last resort: a traceback nothing translated still has no secret in it."""
    script = (
        "import threading\n"
        "from gateway.logs import install_excepthooks\n"
        f"install_excepthooks([{TG_TOKEN!r}])\n"
        f"t = threading.Thread(target=lambda: int({TG_TOKEN!r}))\n"
        "t.start(); t.join()\n"
        f"raise RuntimeError('token ' + {TG_TOKEN!r})\n"
    )
    with anyio.fail_after(30):
        done = await anyio.run_process([sys.executable, "-c", script], cwd=ROOT, check=False)
    err = done.stderr.decode()
    assert done.returncode == 1
    assert TG_TOKEN not in err
    assert "RuntimeError: token [REDACTED]" in err
    assert "ValueError: invalid literal for int() with base 10: '[REDACTED]'" in err
