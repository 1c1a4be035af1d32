"""What a log line shows of a measurement: durations rounded, in both formats (the JSON an
aggregator reads, the console an operator reads), whatever the event or caller measured."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gateway.events import TurnCompleted, log_line
from gateway.logs import configure_logging


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_durations_in_log_lines_are_rounded(fmt: str) -> None:
    stream = io.StringIO()
    handler = configure_logging(level="info", fmt=fmt, secrets=[], stream=stream)
    try:
        event = TurnCompleted("peer:p", 3, "peer", None, "gpt", 0.0008270580000271366)
        level, message, fields = log_line(event)
        logging.getLogger("gateway").log(level, message, extra=fields)
        logging.getLogger("gateway").info("drained", extra={"seconds": 12.3456789, "turns": 2})
    finally:
        logging.getLogger().removeHandler(handler)
    first, second = stream.getvalue().splitlines()
    if fmt == "json":
        assert json.loads(first)["seconds"] == 0.0008271
        assert json.loads(second)["seconds"] == 12.346 and json.loads(second)["turns"] == 2
    else:
        assert first.endswith("seconds=0.0008271") and "0.00082705" not in first
        assert "seconds=12.346 turns=2" in second
