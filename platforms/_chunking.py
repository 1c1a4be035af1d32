"""Cutting a long reply into messages that fit a platform's limit, without breaking code.

Shared by every chat platform. ``split`` prefers, in order, a paragraph break, a line break, a
sentence end, a space, and only then a hard cut; it never cuts inside a surrogate pair or a
``\\r\\n``. A cut inside a fenced code block closes the fence at the end of the piece and
reopens it (with its language) at the start of the next, so every piece renders as code.

``length`` measures text the way the platform does (Discord: code points; Telegram: UTF-16
units), so one function serves both. ``atoms`` names the platform's units a cut must not
fall inside (a link, an inline code span, an escape): a cut there moves to the unit's start.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n`]*)$", re.M)
_SENTENCE = re.compile("[.!?\u3002\uff01\uff1f][)\\]\"'\u00bb]*\\s")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units (what Telegram counts)."""
    return len(text.encode("utf-16-le")) // 2


def _open_fence_at(text: str) -> tuple[str, str] | None:
    """The fence still open at the end of ``text``: (marker, info), e.g. ("```", "python").

    ``info`` is kept as written (with its spacing), so marker + info reopens the same fence.
    """
    opened: tuple[str, str] | None = None
    for match in _FENCE.finditer(text):
        fence, info = match.group(1), match.group(2)
        if opened is None:
            opened = (fence, info)
        elif fence[0] == opened[0][0] and len(fence) >= len(opened[0]) and not info.strip():
            opened = None
    return opened


def best_cut(text: str, limit: int, length: Callable[[str], int] = len) -> int:
    """Where to cut ``text`` so that ``text[:cut]`` fits ``limit``: a natural break if any.

    Public for platforms that cut their own markup (Telegram cuts rendered HTML) with the same
    preferences as ``split``.
    """
    # The longest prefix that fits, by binary search over code points.
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if length(text[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    fit = low
    if fit >= len(text):
        return len(text)
    window = text[:fit]
    floor = fit // 3  # a natural break must keep a piece at least a third full
    paragraph = window.rfind("\n\n")
    line = window.rfind("\n")
    sentence = max((m.end() for m in _SENTENCE.finditer(window)), default=-1)
    space = window.rfind(" ")
    for cut in (
        paragraph + 2 if paragraph >= 0 else -1,
        line + 1 if line >= 0 else -1,
        sentence,
        space + 1 if space >= 0 else -1,
    ):
        if cut > floor:
            return cut
    cut = fit
    if 0 < cut < len(text) and "\udc00" <= text[cut] <= "\udfff":
        cut -= 1  # never split a surrogate pair (only possible with lone surrogates in input)
    if 0 < cut < len(text) and text[cut - 1] == "\r" and text[cut] == "\n":
        cut -= 1
    return max(cut, 1)


def split(
    text: str,
    limit: int,
    *,
    length: Callable[[str], int] = len,
    atoms: re.Pattern[str] | None = None,
) -> list[str]:
    """Cut ``text`` into pieces each within ``limit``; code fences closed and reopened.

    Pieces of only white space are dropped: platforms refuse empty messages.
    """
    pieces = split_marked(text, limit, length=length, atoms=atoms)
    return [p.text for p in pieces if p.text.strip()]


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece: ``body`` is a slice of the original text; ``head``/``tail`` were added."""

    head: str
    body: str
    tail: str

    @property
    def text(self) -> str:
        return self.head + self.body + self.tail


def split_marked(
    text: str,
    limit: int,
    *,
    length: Callable[[str], int] = len,
    atoms: re.Pattern[str] | None = None,
) -> list[Piece]:
    """``split`` showing what was added: joining every ``body`` gives back ``text``."""
    spans = [m.span() for m in atoms.finditer(text)] if atoms is not None else []
    starts = [start for start, _ in spans]
    # Any run of backticks may start a line once the text is cut, so reserve room for the
    # longest one, not only for fences of the original text.
    markers = re.findall(r"`{3,}|~{3,}", text)
    close_room = length("\n" + max(markers, key=len)) if markers else 0
    pieces: list[Piece] = []
    rest, reopen, offset = text, "", 0
    while rest:
        head = reopen + "\n" if reopen else ""
        if length(head + rest) <= limit:
            pieces.append(Piece(head, rest, ""))
            break
        budget = limit - length(head) - close_room
        if budget < 1:
            raise ValueError(f"limit {limit} is too small for this text's code fences")
        cut = best_cut(rest, budget, length)
        if spans:
            cut = _outside(spans, starts, offset, cut)
        body = rest[:cut]
        tail = ""
        fence = _open_fence_at(head + body)
        if fence is not None:
            marker, info = fence
            tail = ("" if (head + body).endswith("\n") else "\n") + marker
            reopen = marker + info[:20].rstrip()
        else:
            reopen = ""
        pieces.append(Piece(head, body, tail))
        rest, offset = rest[cut:], offset + cut
    return pieces


def _outside(spans: list[tuple[int, int]], starts: list[int], offset: int, cut: int) -> int:
    """``cut`` (into the text from ``offset``) moved to the start of the atom it falls in,
    unless that atom starts the piece (one longer than a piece is cut all the same)."""
    at = offset + cut
    i = bisect_right(starts, at - 1) - 1
    if i >= 0:
        start, end = spans[i]
        if start < at < end and start > offset:
            return start - offset
    return cut
