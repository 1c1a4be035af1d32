"""The config's enumerations are ``Literal`` types: a misspelled mode fails type checking
where it is written, not at run time (mypy, run on a snippet that uses the config)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

SNIPPET = """
from gateway.config import GatewayConfig, TelegramConfig

def mode_is_webhook(config: TelegramConfig) -> bool:
    return config.mode == "{compared}"

GatewayConfig(queue_mode="{queue_mode}")
"""


def check(tmp_path: Path, compared: str, queue_mode: str) -> str:
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET.format(compared=compared, queue_mode=queue_mode))
    out, err, _ = api.run(
        ["--strict", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(path)]
    )
    return out + err


def test_right_names_check_clean(tmp_path: Path) -> None:
    assert check(tmp_path, "webhook", "collect").strip() == ""


@pytest.mark.parametrize(
    ("compared", "queue_mode", "wrong"),
    [("webhok", "collect", "Non-overlapping equality check"), ("webhook", "colect", "queue_mode")],
)
def test_a_misspelled_mode_fails_type_checking(
    tmp_path: Path, compared: str, queue_mode: str, wrong: str
) -> None:
    assert wrong in check(tmp_path, compared, queue_mode)
