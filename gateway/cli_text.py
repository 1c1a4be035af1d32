"""Text the command line prints that others wrote: stored content is what strangers and the
model wrote, so it is shown, never obeyed, by the terminal."""

from __future__ import annotations

import unicodedata

# Bidirectional overrides, embeddings, isolates and marks: they reorder what a terminal shows.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str, *, indent: str = "    ") -> str:
    """``text`` safe to print to a terminal: control characters (ESC, C1) and bidi controls
    are shown escaped (``\\x1b``, ``\\u202e``) instead of being obeyed. A newline stays one,
    indented, so no line of a message can pass for a row of its own."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\n" + indent)
        elif ch == "\t":
            out.append(ch)
        elif ch in _BIDI or unicodedata.category(ch) == "Cc":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
