"""Logging: one event per line, JSON or a readable console form, secrets redacted here.

Redaction happens in the handler's filter, for every record, so no caller has to remember it:
any configured secret (API keys, bot tokens, peer tokens) that appears in a message, an
argument or an ``extra`` field is replaced by ``[REDACTED]``.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import Any, TextIO

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def redact(self, value: str) -> str:
        """``value`` with every configured secret replaced (for text that is no log record)."""
        return self._clean(value)

    def _clean(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, "[REDACTED]")
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        record.msg = self._clean(record.getMessage())
        record.args = None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self._clean(value))
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self._clean(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


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


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
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
    for noisy in ("aiohttp.access", "httpx", "httpx2", "openai", "aiosqlite"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler
