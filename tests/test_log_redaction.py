"""Secrets never reach a log line through an ``extra`` that is not a string (review L4).

Why: the redacting filter used to clean only string extras, and the formatters print the
others with ``str()`` (JSON's ``default=str``, the console's ``k=v``) or, inside containers,
with ``repr()``: a key inside a list, a dict or an exception went out as it was. These tests
log through botmux's real handler, in both formats, and read the lines an operator would.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.logs import RedactingFilter, configure_logging

KEY = "sk-live-0123456789abcdef"
TOKEN = "123456:AAHtelegram-token-value"
QUOTED = "pe'er\"tok\\en-0123456789"  # repr() and JSON both escape it


class Holder:
    """An object that shows a secret only in its str() (what JSON's default=str prints)."""

    def __str__(self) -> str:
        return f"holder with {KEY}"


class Shown:
    """An object that shows a secret only in its repr() (what the console prints in a list)."""

    def __repr__(self) -> str:
        return f"Shown(token={TOKEN!r})"

    def __str__(self) -> str:
        return "shown"


@pytest.fixture(params=["json", "console"])
def logged(request: pytest.FixtureRequest) -> Iterator[tuple[str, io.StringIO]]:
    stream = io.StringIO()
    handler = configure_logging(
        level="debug", fmt=request.param, secrets=[KEY, TOKEN, QUOTED], stream=stream
    )
    try:
        yield request.param, stream
    finally:
        logging.getLogger().removeHandler(handler)


def secrets_in(text: str) -> list[str]:
    forms = {
        KEY,
        TOKEN,
        QUOTED,
        repr(QUOTED)[1:-1],
        json.dumps(QUOTED)[1:-1],
        "tok\\en",
        "tok\\\\en",
    }
    return sorted(form for form in forms if form in text)


def test_secrets_in_lists_dicts_exceptions_and_objects_are_redacted(
    logged: tuple[str, io.StringIO],
) -> None:
    fmt, stream = logged
    cyclic: list[Any] = [KEY]
    cyclic.append(cyclic)
    logging.getLogger("botmux.test").warning(
        "provider failed",
        extra={
            "keys": [KEY, "fine", 3],
            "headers": {"Authorization": f"Bearer {KEY}", TOKEN: "as a key"},
            "nested": ({"deep": [[{"token": TOKEN}]]},),
            "error": ValueError(f"Incorrect API key provided: {KEY}"),
            "errors": [RuntimeError(f"bot {TOKEN} unauthorized")],
            "holder": [Holder()],
            "shown": [Shown()],
            "quoted": [QUOTED],
            "names": {TOKEN},
            "cyclic": cyclic,
            "count": 7,
        },
    )
    line = stream.getvalue()
    assert secrets_in(line) == []
    assert "[REDACTED]" in line and "provider failed" in line
    if fmt == "json":
        event = json.loads(line)
        # The structure stays: lists are lists, dicts dicts, clean items untouched.
        assert event["keys"] == ["[REDACTED]", "fine", 3]
        assert event["headers"] == {
            "Authorization": "Bearer [REDACTED]",
            "[REDACTED]": "as a key",
        }
        assert event["nested"] == [{"deep": [[{"token": "[REDACTED]"}]]}]
        assert event["error"] == "Incorrect API key provided: [REDACTED]"
        assert event["holder"] == ["holder with [REDACTED]"]
        assert event["count"] == 7
    else:
        assert "count=7" in line and "'fine'" in line


def test_a_clean_value_is_left_as_it_is_and_not_copied() -> None:
    redact = RedactingFilter([KEY])
    record = logging.LogRecord("botmux", logging.INFO, __file__, 1, "turn done", (), None)
    payload = {"tokens": [1, 2, 3], "model": "gpt", "error": ValueError("timeout")}
    mixed = [payload, f"with {KEY}"]
    record.payload, record.mixed = payload, mixed
    assert redact.filter(record)
    assert record.payload is payload  # no secret: no rebuild
    assert record.mixed == [payload, "with [REDACTED]"]
    assert record.mixed[0] is payload  # only the part that showed a secret was replaced


def test_without_configured_secrets_nothing_is_touched() -> None:
    record = logging.LogRecord("botmux", logging.INFO, __file__, 1, "k=%s", (KEY,), None)
    payload = [KEY]
    record.payload = payload
    assert RedactingFilter(["", "abc"]).filter(record)  # too short to be secrets: ignored
    assert record.payload is payload and record.getMessage() == f"k={KEY}"
