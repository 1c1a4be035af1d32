"""The model's Markdown as the Markdown Discord renders, cut into messages after rendering.

Why not pass the model's text through: Discord renders only part of Markdown. Tables arrive
as rows of pipes in proportional type, headings past ``###`` as hashes, and text the model
meant literally can be markup to Discord (``<@id>``, ``<t:0>``, ``||``, a line starting
``-#``). The text is
parsed once as CommonMark (:mod:`platforms._markdown`) and written back in what Discord
renders natively: bold, italics, strikethrough, inline code, fenced code with its language,
``#``-``###`` headings (deeper ones as ``###``), ``-`` and numbered lists, ``>`` quotes, masked
links (web links only); tables become code blocks of aligned columns. Text is escaped where
Discord would read it as markup (``\\*``, ``\\_``, a ``#`` or ``-`` starting a line...),
except inside bare URLs, which Discord links before it reads escapes.

The rendered text is then cut by the shared chunker (code fences closed and reopened), never
inside a masked link, an inline code span or an escape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from platforms import _markdown
from platforms._chunking import split

LIMIT = 2000  # Discord's message limit, in characters (code points)
_WRAP = {"strong": "**", "em": "*", "s": "~~"}
# What Discord reads as markup anywhere in a line; ``<`` opens mentions, channels, emoji and
# timestamps (``<@1>``, ``<#1>``, ``<:e:1>``, ``<t:1>``).
_SPECIAL = re.compile(r"([\\*_~`|\[\]<])")
_BARE_URL = re.compile(r"https?://[^\s<>]+")
# What Discord reads as markup at the start of a line: headings, subtext (``-#``), quotes,
# list items (``-``, ``*`` is escaped anyway, ``+``, ``1.``).
_LINE_START = re.compile(
    r"^([ \t]*)(?:(#{1,3}[ \t]|-#|>|[-+][ \t])|(\d{1,9})([.)])(?=[ \t]))", re.M
)
# Units a cut must not fall inside: a masked or bracketed link, an inline code span, an escape.
ATOMS = re.compile(r"\[[^\[\]\n]*\]\(<[^<>\n]*>\)|<https?://[^<>\s]*>|`+[^`\n]*`+|\\.")
_FENCE_RUN = re.compile(r"`(?=``)")
_BROKEN_RUN = "`\u200b"


def _escape(text: str) -> str:
    """Literal text: Discord's markup characters escaped, bare URLs left as they are."""
    if "http" not in text:
        return _SPECIAL.sub(r"\\\1", text)
    out: list[str] = []
    pos = 0
    for match in _BARE_URL.finditer(text):
        out.append(_SPECIAL.sub(r"\\\1", text[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(_SPECIAL.sub(r"\\\1", text[pos:]))
    return "".join(out)


def _line_starts(text: str) -> str:
    def escape(match: re.Match[str]) -> str:
        if match.group(2) is not None:
            return f"{match.group(1)}\\{match.group(2)}"
        return f"{match.group(1)}{match.group(3)}\\{match.group(4)}"

    return _LINE_START.sub(escape, text)


def _code_span(code: str) -> str:
    """Inline code; one with backticks in double ones, as Discord reads them."""
    if "`" not in code:
        return f"`{code}`"
    if "``" not in code:
        return f"`` {code} ``"
    return _escape(code)  # no span can hold it: shown as text


def _inline(tokens: Sequence[Token]) -> str:
    out: list[str] = []
    closers: list[str] = []
    hidden = 0  # inside an autolink, whose label (the URL itself) is already written
    for token in tokens:
        kind = token.type
        if hidden and kind != "link_close":
            continue
        if kind == "text":
            out.append(_escape(token.content))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "code_inline":
            out.append(_code_span(token.content))
        elif kind.endswith("_open") and kind[:-5] in _WRAP:
            out.append(_WRAP[kind[:-5]])
        elif kind.endswith("_close") and kind[:-6] in _WRAP:
            out.append(_WRAP[kind[:-6]])
        elif kind == "link_open":
            href = str(token.attrs.get("href", ""))
            url = _markdown.web_url(href)
            if token.markup == "autolink":
                out.append(f"<{url}>" if url else _escape(href))
                closers.append("")
                hidden += 1
            elif url is not None:
                out.append("[")
                closers.append(f"](<{url}>)")
            else:  # shown as the Markdown it was written as, not a link
                out.append("\\[")
                closers.append(f"\\]({_escape(href)})")
        elif kind == "link_close":
            hidden = max(0, hidden - 1)
            out.append(closers.pop())
        elif kind == "image":
            out.append(_image(token))
    return "".join(out)


def _image(token: Token) -> str:
    alt = _escape(_markdown.plain(token.children or ()))
    url = _markdown.web_url(str(token.attrs.get("src", "")))
    if url is None:
        return alt
    return f"[{alt}](<{url}>)" if alt else f"<{url}>"


@dataclass(frozen=True, slots=True)
class _Discord:
    """Discord's Markdown as a :class:`platforms._markdown.Dialect`."""

    bullets: tuple[str, ...] = ("-",)

    def paragraph(self, tokens: Sequence[Token]) -> str:
        return _line_starts(_inline(tokens))

    def heading(self, level: int, tokens: Sequence[Token]) -> str:
        text = _inline(tokens).replace("\n", " ")
        if not text:
            return ""
        return f"{'#' * min(level, 3)} {text}"  # Discord's smallest heading is ###

    def code(self, code: str, language: str) -> str:
        # Discord ends a block at the first ```: a zero-width space keeps runs inside apart.
        return f"```{language}\n{_FENCE_RUN.sub(_BROKEN_RUN, code)}\n```"

    def quote(self, text: str) -> str:
        return "\n".join(f"> {line}" for line in text.split("\n"))


_DIALECT = _Discord()


def to_markdown(markdown: str) -> str:
    """The reply in the Markdown Discord renders."""
    return _markdown.render(markdown, _DIALECT)


def render(text: str, *, limit: int = LIMIT, max_lines: int = 0) -> list[str]:
    """A reply as Discord messages: at most ``limit`` characters (code points, as Discord
    counts) and, with a line cap, at most ``max_lines`` lines each.

    The line cap rides on the shared chunker's ``length``: every line costs
    ``limit / max_lines``, so a piece "fits" only when both its characters and its lines do.
    The measure is subadditive, so the room the chunker reserves for closing and reopening
    code fences stays sufficient.
    """
    rendered = to_markdown(text)
    if max_lines <= 0:
        return split(rendered, limit, atoms=ATOMS)
    per_line = limit / max_lines

    def length(piece: str) -> int:
        lines = piece.count("\n") + 1
        return max(len(piece), int(lines * per_line + 0.999999))

    return split(rendered, limit, length=length, atoms=ATOMS)
