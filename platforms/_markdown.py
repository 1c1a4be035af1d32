"""One CommonMark parse of the model's Markdown, and the block layout every platform shares.

Why: each chat platform has its own markup (Telegram HTML, Discord Markdown, Slack mrkdwn),
and a hand-written converter per platform got the hard cases wrong (tables as rows of pipes,
quotes as ``>`` lines, ``\\*escaped\\*`` stars as italics). markdown-it-py parses the text as
CommonMark (with GitHub's tables and strikethrough); a platform then only says how its inline
markup, code blocks, headings and quotes look (a :class:`Dialect`), and :func:`render` lays
out the blocks: paragraphs, nested and numbered lists as text markers, quotes, tables as
aligned monospaced text, code blocks.

Raw HTML in the model's text is not HTML here (``html`` off): it is shown as typed. Only web
links (http, https) become links (:func:`web_url`); the platform shows the others as text.
A code block or a table inside a quote or a list is never prefixed or indented (a
:class:`Part` marked ``verbatim``): a quote is closed before it and reopened after, so it
stays a code block on every platform and the chunkers can close and reopen it at a cut.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

MAX_URL = 1024  # a longer link is shown as text: a link reopened after a cut must fit a piece
_WEB = ("http://", "https://")
_NEWLINE = re.compile(r"\r\n?")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
RULE = "\u2500" * 12  # a thematic break (---): no platform has one in its message markup


def _arithmetic(state: StateCore) -> None:
    """``2*3*4`` is arithmetic, not ``2<em>3</em>4`` (CommonMark's reading): emphasis whose
    ``*`` stand between digits on both sides goes back to being text."""
    for block in state.tokens:
        children = block.children
        if block.type != "inline" or not children:
            continue
        for i, token in enumerate(children):
            if token.type not in ("em_open", "strong_open") or token.markup[0] != "*":
                continue
            if i == 0 or not _ends_digit(children[i - 1]):
                continue
            close = _closing(children, i)
            if close is None or close + 1 >= len(children):
                continue
            after = children[close + 1]
            if after.type == "text" and after.content[:1].isdigit():
                for marker in (token, children[close]):
                    marker.type, marker.tag, marker.nesting = "text", "", 0
                    marker.content = marker.markup


def _ends_digit(token: Token) -> bool:
    return token.type == "text" and token.content[-1:].isdigit()


def _closing(children: list[Token], i: int) -> int | None:
    want = children[i].type.replace("_open", "_close")
    for j in range(i + 1, len(children)):
        if children[j].type == want and children[j].level == children[i].level:
            return j
    return None


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.core.ruler.before("text_join", "arithmetic", _arithmetic)
    return md


# Configured once and never changed, like a compiled pattern: a parse keeps its state in
# the call (markdown-it's StateCore), so one parser serves every reply.
_MD = _parser()


def parse(markdown: str) -> list[Token]:
    """The model's Markdown as markdown-it's flat token stream."""
    return _MD.parse(markdown)


def web_url(href: str) -> str | None:
    """``href`` when it is a web link short enough to reopen after a cut, else None.

    Other schemes stay text on every platform: ``tg://proxy`` and ``tg://socks`` offer to
    route a Telegram user's traffic through a stranger's server, and a prompt-injected reply
    could carry them; ``javascript:`` and ``data:`` markdown-it refuses already.
    """
    if href.lower().startswith(_WEB) and len(href) <= MAX_URL:
        return href
    return None


def language(info: str) -> str:
    """A code fence's language, when it is a plausible one ("" otherwise)."""
    word = info.split(maxsplit=1)[0] if info.strip() else ""
    return word if _LANGUAGE.fullmatch(word) else ""


def plain(tokens: Sequence[Token]) -> str:
    """Inline tokens as their text alone: what a table cell shows in a monospaced block."""
    out: list[str] = []
    for token in tokens:
        if token.type in ("text", "code_inline"):
            out.append(token.content)
        elif token.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif token.type == "image":
            out.append(plain(token.children or ()))
    return "".join(out)


def width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font: East Asian wide characters take two."""
    if text.isascii():
        return len(text)
    total = 0
    for char in text:
        if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
            continue
        total += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return total


@dataclass(frozen=True, slots=True)
class Part:
    """Rendered lines; ``verbatim`` ones (a code block, a table) are never prefixed."""

    text: str
    verbatim: bool = False


class Dialect(Protocol):
    """How one platform writes what :func:`render` lays out."""

    @property
    def bullets(self) -> tuple[str, ...]:
        """An unordered list's marker at each depth (the last one repeats)."""
        ...

    def paragraph(self, tokens: Sequence[Token]) -> str:
        """A paragraph's inline tokens in the platform's markup."""
        ...

    def heading(self, level: int, tokens: Sequence[Token]) -> str: ...

    def code(self, code: str, language: str) -> str:
        """A code block (or a laid-out table, with no language)."""
        ...

    def quote(self, text: str) -> str:
        """Rendered lines shown as one quote (never nested: no platform nests them)."""
        ...


@dataclass(slots=True)
class _Walk:
    lines: list[str]  # the source, to see where the model left blank lines
    tokens: list[Token]
    closes: list[int]  # for each opening token, the index of its closing one
    dialect: Dialect

    def blocks(
        self, start: int, end: int, *, depth: int, quoted: bool, compact: bool
    ) -> list[Part]:
        """The blocks in ``tokens[start:end]``, separated as the model separated them (a
        blank line where it left one); ``compact`` (inside a list item): never blank."""
        parts: list[Part] = []
        i = start
        while i < end:
            token = self.tokens[i]
            close = self.closes[i] if token.nesting == 1 else i
            block = self.block(i, close, depth=depth, quoted=quoted)
            if block:
                if parts and not compact and self.after_blank(token):
                    parts.append(Part(""))
                parts.extend(block)
            i = close + 1
        return parts

    def after_blank(self, token: Token) -> bool:
        """Whether the model left a blank line (in a quote: a bare ``>``) before ``token``."""
        line = token.map[0] - 1 if token.map else -1
        return 0 <= line < len(self.lines) and not self.lines[line].strip(" \t>")

    def block(self, i: int, close: int, *, depth: int, quoted: bool) -> list[Part]:
        token, dialect = self.tokens[i], self.dialect
        kind = token.type
        if kind == "paragraph_open":
            return [Part(dialect.paragraph(self.tokens[i + 1].children or ()))]
        if kind == "heading_open":
            level = int(token.tag[1:])
            return [Part(dialect.heading(level, self.tokens[i + 1].children or ()))]
        if kind in ("fence", "code_block"):
            code = token.content.removesuffix("\n")
            return [Part(dialect.code(code, language(token.info)), verbatim=True)]
        if kind == "table_open":
            return [Part(dialect.code(self.table(i, close), ""), verbatim=True)]
        if kind == "hr":
            return [Part(RULE)]
        if kind == "blockquote_open":
            inner = self.blocks(i + 1, close, depth=depth, quoted=True, compact=False)
            return inner if quoted else _quote(inner, dialect)
        if kind in ("bullet_list_open", "ordered_list_open"):
            return self.items(i, close, depth=depth, quoted=quoted)
        return []  # html_block cannot occur (html is off); anything else has no text

    def items(self, i: int, close: int, *, depth: int, quoted: bool) -> list[Part]:
        ordered = self.tokens[i].type == "ordered_list_open"
        number = int(self.tokens[i].attrs.get("start", 1)) if ordered else 0
        bullet = self.dialect.bullets[min(depth, len(self.dialect.bullets) - 1)]
        parts: list[Part] = []
        k = i + 1
        while k < close:
            end = self.closes[k]
            marker = f"{number}." if ordered else bullet
            inner = self.blocks(k + 1, end, depth=depth + 1, quoted=quoted, compact=True)
            parts.extend(_indent(inner, marker))
            number += 1
            k = end + 1
        return parts

    def table(self, i: int, close: int) -> str:
        rows: list[list[str]] = []
        aligns: list[str] = []
        for k in range(i, close):
            token = self.tokens[k]
            if token.type == "tr_open":
                rows.append([])
            elif token.type in ("th_open", "td_open"):
                rows[-1].append(plain(self.tokens[k + 1].children or ()).strip())
                if len(rows) == 1:
                    aligns.append(str(token.attrs.get("style", "")).removeprefix("text-align:"))
        return layout(rows, aligns)


def layout(rows: list[list[str]], aligns: list[str]) -> str:
    """A table as aligned columns of monospaced text, its header underlined."""
    columns = max((len(row) for row in rows), default=0)
    rows = [row + [""] * (columns - len(row)) for row in rows]
    widths = [max(width(row[c]) for row in rows) for c in range(columns)]
    aligns = aligns + [""] * (columns - len(aligns))

    def line(cells: list[str]) -> str:
        out = []
        for cell, size, align in zip(cells, widths, aligns, strict=True):
            pad = size - width(cell)
            if align == "right":
                out.append(" " * pad + cell)
            elif align == "center":
                out.append(" " * (pad // 2) + cell + " " * (pad - pad // 2))
            else:
                out.append(cell + " " * pad)
        return "  ".join(out).rstrip()

    lines = [line(row) for row in rows]
    if lines:
        lines.insert(1, "  ".join("-" * size for size in widths))
    return "\n".join(lines)


def _indent(parts: list[Part], marker: str) -> list[Part]:
    """A list item: its marker before the first line, the other lines indented under the
    text; verbatim parts as they are (after the marker alone, if the item starts with one)."""
    first, rest = marker + " ", " " * (width(marker) + 1)
    out: list[Part] = []
    for part in parts:
        if part.verbatim:
            if not out:
                out.append(Part(marker))
            out.append(part)
            continue
        lines = part.text.split("\n")
        if not out:
            lines[0], lines[1:] = first + lines[0], [rest + x if x else x for x in lines[1:]]
        else:
            lines = [rest + x if x else x for x in lines]
        out.append(Part("\n".join(lines)))
    return out or [Part(marker)]


def _quote(parts: list[Part], dialect: Dialect) -> list[Part]:
    """Each run of non-verbatim parts as one quote; verbatim parts between the runs."""
    out: list[Part] = []
    run: list[str] = []

    def flush() -> None:
        text = "\n".join(run).strip("\n")
        if text:
            out.append(Part(dialect.quote(text)))
        run.clear()

    for part in parts:
        if part.verbatim:
            flush()
            out.append(part)
        else:
            run.append(part.text)
    flush()
    return out


def _pairs(tokens: list[Token]) -> list[int]:
    closes = list(range(len(tokens)))
    stack: list[int] = []
    for i, token in enumerate(tokens):
        if token.nesting == 1:
            stack.append(i)
        elif token.nesting == -1:
            closes[stack.pop()] = i
    return closes


def render(markdown: str, dialect: Dialect) -> str:
    """The model's Markdown in ``dialect``'s markup, one string (cut by the platform)."""
    markdown = _NEWLINE.sub("\n", markdown)  # as markdown-it reads it, for the line numbers
    tokens = parse(markdown)
    walk = _Walk(markdown.split("\n"), tokens, _pairs(tokens), dialect)
    parts = walk.blocks(0, len(tokens), depth=0, quoted=False, compact=False)
    return "\n".join(part.text for part in parts)
