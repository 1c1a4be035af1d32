"""Text and ids from a platform, made safe to store: shared by the chat platforms' converters.

Platform payloads are untrusted input (see docs/RELIABILITY.md, hostile platform input).
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_text(text: str) -> str:
    """``text`` as botmux stores and shows it: valid Unicode, no control characters.

    A lone surrogate (``"\\ud800"`` in a payload's JSON) cannot be encoded for the store, so
    its admission would fail forever; it becomes U+FFFD, one UTF-16 unit for one, so
    Telegram's entity offsets stay right. NUL, ESC and the other C0 controls but tab,
    newline and carriage return are dropped (they end strings in C tools and drive terminals
    that show ``botmux sessions show``).
    """
    return _CONTROL.sub("", _SURROGATE.sub("\ufffd", text))


def text_problem(text: str) -> str | None:
    """Why the API routes (peer, A2A) refuse ``text`` as a message, or None: a client that
    sent NUL or a lone surrogate gets a clear error instead of the store's failure to encode
    it (which reads as "the store is unavailable; retry", and a retry never succeeds)."""
    if "\x00" in text:
        return "must not contain NUL characters"
    if _SURROGATE.search(text):
        return "is not valid Unicode (lone surrogate)"
    return None


def is_id(value: object) -> bool:
    """A platform id: an int, and not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)
