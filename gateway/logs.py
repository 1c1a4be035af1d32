"""Logging: one event per line, JSON or a readable console form, secrets redacted here.

Redaction happens in the handler's filter, for every record, so no caller has to remember it:
any configured secret (API keys, bot tokens, peer tokens) that appears in a message, an
argument or an ``extra`` field is replaced by ``[REDACTED]``.

An ``extra`` that is not a string (a list, a dict, an exception, any object) is cleaned in
what the formatters would print of it: lists, tuples, sets and dicts item by item (keys too),
any other object by its ``str()`` (what both formatters print of it) and its ``repr()`` (what
the console shows of it inside a container), secrets searched also as repr() and JSON escape
them. Cost: no printing of strings, numbers or containers, only of other objects; a value is
rebuilt only if it shows a secret: containers item by item (same type, clean items kept as
the same objects), any other object replaced by its cleaned text.

Floats (durations, delays) are printed rounded, in both forms: see :func:`_rounded`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import Any, TextIO

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_CONTAINERS = (list, tuple, set, frozenset)
_NUMBERS = (int, float)
_MAX_DEPTH = 8  # deeper (or cyclic) values are cleaned as a whole, in their printed form
REDACTED = "[REDACTED]"


def _spellings(secret: str) -> set[str]:
    """The secret as it appears raw, inside a repr() and inside JSON (escaped)."""
    return {secret, repr(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        raw = {s for s in secrets if len(s) >= 4}
        spelt = {form for secret in raw for form in _spellings(secret)}
        self._secrets = sorted(spelt, key=len, reverse=True)
        # One search for all of them; a value without a secret costs one pass.
        self._pattern = re.compile("|".join(map(re.escape, self._secrets)) or "(?!)")
        # Only a secret made of digits (and signs, dots) can show in a printed number.
        self._numeric = any(set(secret) <= set("0123456789.+-e") for secret in raw)

    def _shows_secret(self, text: str) -> bool:
        return self._pattern.search(text) is not None

    def redact(self, value: str) -> str:
        """``value`` with every configured secret replaced (for text that is no log record)."""
        return self._clean(value)

    def _clean(self, value: str) -> str:
        if not self._shows_secret(value):
            return value
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def _leaks(self, value: object, depth: int = 0) -> bool:
        """Whether anything a formatter would print of ``value`` shows a secret: a walk over
        containers, printing only what is neither a string nor a number (str() and repr())."""
        if isinstance(value, str):
            return self._shows_secret(value)
        if value is None or isinstance(value, bool):
            return False
        if isinstance(value, _NUMBERS):
            return self._numeric and self._shows_secret(str(value))
        if depth < _MAX_DEPTH and isinstance(value, _CONTAINERS) and type(value) in _CONTAINERS:
            return any(self._leaks(item, depth + 1) for item in value)
        if depth < _MAX_DEPTH and isinstance(value, dict) and type(value) is dict:
            return any(
                self._leaks(k, depth + 1) or self._leaks(v, depth + 1) for k, v in value.items()
            )
        try:
            return self._shows_secret(str(value)) or self._shows_secret(repr(value))
        except Exception:  # unprintable: take the careful path
            return True

    def _scrub(self, value: object, depth: int = 0) -> object:
        """``value`` with every secret gone from what it prints; clean parts kept as they are."""
        if isinstance(value, str):
            return self._clean(value)
        if depth and not self._leaks(value):  # a clean part stays the very same object
            return value
        # Exact types only: a subclass (a namedtuple, an OrderedDict) may not rebuild like this.
        if depth < _MAX_DEPTH and isinstance(value, _CONTAINERS) and type(value) in _CONTAINERS:
            return type(value)(self._scrub(item, depth + 1) for item in value)
        if depth < _MAX_DEPTH and isinstance(value, dict) and type(value) is dict:
            return {self._scrub(k, depth + 1): self._scrub(v, depth + 1) for k, v in value.items()}
        try:
            text = str(value)
            shown = repr(value)
        except Exception:
            return "[unprintable]"
        if self._shows_secret(text):
            return self._clean(text)
        if self._shows_secret(shown):
            return self._clean(shown)
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        record.msg = self._clean(record.getMessage())
        record.args = None
        for key, value in list(vars(record).items()):
            if key in _STANDARD:
                continue
            if isinstance(value, str):
                setattr(record, key, self._clean(value))
            elif self._leaks(value):
                setattr(record, key, self._scrub(value))
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self._clean(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def _rounded(value: object) -> object:
    """A float as a log line shows it: to the millisecond from 1 up, 4 significant digits
    below (a duration of ``0.0008270580000271366`` s shows as ``0.0008271``); a measurement's
    noise digits say nothing and make lines hard to read and compare."""
    if type(value) is not float or not math.isfinite(value):
        return value
    return round(value, 3) if abs(value) >= 1 else float(f"{value:.4g}")


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: _rounded(v)
        for k, v in vars(record).items()
        if k not in _STANDARD and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        event.update(_extras(record))
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            event["exc"] = record.exc_text
        return json.dumps(event, default=str, ensure_ascii=False)


# What could end a console line or rewrite the terminal: C0 and C1 controls (newline, carriage
# return, escape), DEL and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(value: object) -> str:
    """``value`` as the console shows it: its control characters escaped (``\\n``,
    ``\\x1b``), so no field (a tool name a model made up, a line a tool server printed) can
    forge a log line or drive the terminal (security review 2026-12-05, T-2)."""
    text = str(value)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text) if _CONTROL.search(text) else text


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        fields = " ".join(f"{k}={_one_line(v)}" for k, v in _extras(record).items())
        message = _one_line(record.getMessage())
        line = f"{stamp} {record.levelname:<7} {record.name}: {message}"
        if fields:
            line += f"  {fields}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        return line


def install_excepthooks(secrets: Iterable[str], stream: TextIO | None = None) -> None:
    """Tracebacks that escape everything (an uncaught exception in the main thread or another
    thread) are printed through the same redaction as log records: a library exception whose
    text quotes a token must not put it on stderr."""
    redactor = RedactingFilter(secrets)

    def write(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        out = stream or sys.stderr
        out.write(redactor.redact(text))
        out.flush()

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            write(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = write
    threading.excepthook = thread_hook
    logging.captureWarnings(True)


def configure_logging(
    *, level: str, fmt: str, secrets: Iterable[str], stream: TextIO | None = None
) -> logging.Handler:
    """Install botmux's handler on the root logger; return it (tests remove it)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_botmux", False)]:
        root.removeHandler(old)
    handler._botmux = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    # mcp: the MCP SDK says at INFO each reconnection of an HTTP server's event stream; what
    # becomes of a server is said once by agent.tools (its state changes).
    for noisy in ("aiohttp.access", "httpx", "httpx2", "openai", "aiosqlite", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler
