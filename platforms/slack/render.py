"""The model's Markdown as Slack mrkdwn, cut into messages after rendering.

Why: Slack's message text is not Markdown. ``**bold**`` shows its stars, ``[a](url)`` is not
a link, headings, tables and lists are not read at all. The text is parsed once as
CommonMark (:mod:`platforms._markdown`) and written in mrkdwn: ``*bold*``, ``_italic_``,
``~strike~``, inline code, code blocks in ```` ``` ````, web links as ``<url|text>``, quotes as
``>`` lines, headings as bold lines, lists as text bullets and numbers, tables as code blocks
of aligned columns.

Escaping: Slack requires ``&``, ``<`` and ``>`` as ``&amp;``, ``&lt;``, ``&gt;`` everywhere
(so the model's text can make no link or mention such as ``<!channel>``). mrkdwn has no
escape for its formatting characters; a ``*``, ``_``, ``~`` or backtick in the text that could
open a span (at a word's start) gets a zero-width space before it, which Slack does not count
as a word boundary, so ``\\*stars\\*`` shows its stars and ``snake_case`` is left untouched.

Cutting: Slack truncates a message's ``text`` past 40,000 characters and asks for at most
4,000 for best results; a section block's text holds 3,000. :data:`LIMIT` is 3,000 (counted
in UTF-16 units, never fewer than Slack's characters), so a piece fits either way of sending.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from platforms import _markdown
from platforms._chunking import split, utf16_len

LIMIT = 3000
_WRAP = {"strong": "*", "em": "_", "s": "~"}
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# A formatting character where it could open a span: not after a letter or digit, and
# before a non-space. A zero-width space before it is no word boundary to Slack.
_OPENER = re.compile(r"(?<!\w)([*_~`])(?=\S)")
_QUOTE_START = re.compile(r"^([ \t]*)(&gt;)", re.M)
# Units a cut must not fall inside: a link or mention, an escaped character, a code span.
ATOMS = re.compile(r"<[^<>\n]*>|&(?:amp|lt|gt);|`[^`\n]+`")
_FENCE_RUN = re.compile(r"`(?=``)")
_ZWSP = "\u200b"


def _escape(text: str) -> str:
    return text.translate(_ESCAPES)


def _text(text: str) -> str:
    """Literal text: escaped, and no formatting character left that could open a span."""
    return _OPENER.sub(_ZWSP + r"\1", _escape(text))


def _inline(tokens: Sequence[Token]) -> str:
    out: list[str] = []
    label: list[str] | None = None  # a web link's label, while inside one: plain text only
    closers: list[str] = []
    for token in tokens:
        kind = token.type
        target = out if label is None else label
        if kind == "text":
            target.append(_text(token.content) if label is None else _escape(token.content))
        elif kind in ("softbreak", "hardbreak"):
            target.append("\n" if label is None else " ")
        elif kind == "code_inline":
            code = token.content
            if label is not None:
                label.append(_escape(code))
            else:  # one with a backtick no span can hold: shown as text
                out.append(_text(code) if "`" in code else f"`{_escape(code)}`")
        elif kind == "link_close":
            closer = closers.pop()
            if label is not None:  # closer: the link's URL
                text = "".join(label).strip()
                out.append(f"<{closer}|{text}>" if text and text != closer else f"<{closer}>")
                label = None
            else:
                out.append(closer)
        elif label is not None:
            continue  # Slack formats nothing inside <url|label>
        elif kind.endswith("_open") and kind[:-5] in _WRAP:
            out.append(_WRAP[kind[:-5]])
        elif kind.endswith("_close") and kind[:-6] in _WRAP:
            out.append(_WRAP[kind[:-6]])
        elif kind == "link_open":
            href = str(token.attrs.get("href", ""))
            url = _markdown.web_url(href)
            if url is not None:
                label = []
                closers.append(_escape(url))
            elif token.markup == "autolink":
                closers.append("")
            else:  # shown as the Markdown it was written as, not a link
                out.append("[")
                closers.append(f"]({_text(href)})")
        elif kind == "image":
            out.append(_image(token))
    return "".join(out)


def _image(token: Token) -> str:
    alt = _markdown.plain(token.children or ())
    url = _markdown.web_url(str(token.attrs.get("src", "")))
    if url is None:
        return _text(alt)
    return f"<{_escape(url)}|{_escape(alt)}>" if alt else f"<{_escape(url)}>"


@dataclass(frozen=True, slots=True)
class _Slack:
    """Slack's mrkdwn as a :class:`platforms._markdown.Dialect`."""

    bullets: tuple[str, ...] = ("\u2022", "\u25e6", "\u25aa")  # • ◦ ▪

    def paragraph(self, tokens: Sequence[Token]) -> str:
        # A line starting with &gt; is a quote to Slack (its own clients send quotes so).
        return _QUOTE_START.sub(r"\1" + _ZWSP + r"\2", _inline(tokens))

    def heading(self, level: int, tokens: Sequence[Token]) -> str:
        del level  # mrkdwn has one emphasis for all of them
        text = _text(_markdown.plain(tokens)).strip()
        return f"*{text}*" if text else ""

    def code(self, code: str, language: str) -> str:
        del language  # mrkdwn highlights no language
        return f"```\n{_FENCE_RUN.sub('`' + _ZWSP, _escape(code))}\n```"

    def quote(self, text: str) -> str:
        return "\n".join(f"> {line}" for line in text.split("\n"))


_DIALECT = _Slack()


def to_mrkdwn(markdown: str) -> str:
    """The reply as Slack mrkdwn."""
    return _markdown.render(markdown, _DIALECT)


def render(markdown: str, limit: int = LIMIT) -> list[str]:
    """The reply as the mrkdwn messages to send, in order, each within ``limit``."""
    return split(to_mrkdwn(markdown), limit, length=utf16_len, atoms=ATOMS)
