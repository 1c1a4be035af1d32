"""The model's Markdown as Telegram HTML, cut into messages that fit after rendering.

Why cut after rendering: Telegram's limit (4096 UTF-16 units per message) applies to what is
sent, and formatting changes the length, so cutting Markdown first is how other gateways end
up with "message is too long". Cutting HTML has rules of its own: never inside a tag or an
entity (``&amp;``), and an element open at a cut is closed at the end of the piece and opened
again at the start of the next, so a code block split in two is a code block on both sides.
Where to cut follows the shared chunker's preferences (paragraph, line, sentence, space).

Only the Markdown models write is converted: fenced code blocks, inline code, bold, italics,
strikethrough, links (http and https only), headings (as bold) and bullets. Everything else is
escaped, so the HTML is well-formed by construction; if Telegram still refuses a piece, the
adapter resends it as plain text (:func:`to_plain`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from platforms._chunking import Piece, best_cut, utf16_len

LIMIT = 4096  # Telegram's message limit, in UTF-16 code units
_MAX_URL = 1024  # a longer link is shown as text: a reopened <a> must fit in any piece

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(?=\S)")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
# Links the model may make: the web only. tg:// links act inside the user's app (tg://proxy
# and tg://socks offer to route all its traffic through a stranger's server, tg://resolve
# opens chats): from a prompt-injected reply that is a phishing tool, so they stay text.
_SCHEMES = ("http://", "https://")
# Shown as code, so Telegram's clients do not make a tappable link of it on their own.
_APP_LINK = re.compile(r"(?i)\btg://[^\s<>()\[\]]+")
_SPAN = r"[^\n]{1,2000}?"  # bounded, so a line full of unmatched markers stays linear-ish
_INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_text>[^\n]+?)(?<!`)(?P=ticks)(?!`))"
    r"|(?P<link>\[(?P<label>[^\[\]\n]{1,500})\]\(\s*<?(?P<url>[^\s()<>]{1,2048})>?\s*\))"
    rf"|(?P<bolditalic>\*\*\*(?=[^\s*])(?P<bolditalic_text>{_SPAN})(?<=[^\s*])\*\*\*)"
    rf"|(?P<bold>\*\*(?=\S)(?P<bold_text>{_SPAN})(?<=\S)\*\*)"
    rf"|(?P<bold2>(?<!\w)__(?=\S)(?P<bold2_text>{_SPAN})(?<=\S)__(?!\w))"
    rf"|(?P<strike>~~(?=\S)(?P<strike_text>{_SPAN})(?<=\S)~~)"
    rf"|(?P<italic>(?<![*\w])\*(?=[^\s*])(?P<italic_text>{_SPAN})(?<=[^\s*])\*(?![*\w]))"
    rf"|(?P<italic2>(?<!\w)_(?=[^\s_])(?P<italic2_text>{_SPAN})(?<=[^\s_])_(?!\w))"
)
_WRAP = {"bold": "b", "bold2": "b", "strike": "s", "italic": "i", "italic2": "i"}


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _text(text: str) -> str:
    """Plain text as HTML, with any tg:// link in it made inert (code, not a link)."""
    out: list[str] = []
    pos = 0
    for match in _APP_LINK.finditer(text):
        out.append(_escape(text[pos : match.start()]))
        out.append(f"<code>{_escape(match.group(0))}</code>")
        pos = match.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def _inline(text: str) -> str:
    """One line of Markdown as HTML: each construct is closed where it opens, so tags nest."""
    out: list[str] = []
    pos = 0
    while match := _INLINE.search(text, pos):
        out.append(_text(text[pos : match.start()]))
        kind = match.lastgroup
        if kind == "code":
            code = match.group("code_text")
            if len(code) > 2 and code[0] == code[-1] == " " and code.strip():
                code = code[1:-1]
            out.append(f"<code>{_escape(code)}</code>")
        elif kind == "link":
            label, url = match.group("label"), match.group("url")
            if url.lower().startswith(_SCHEMES) and len(url) <= _MAX_URL:
                out.append(f'<a href="{html.escape(url)}">{_inline(label)}</a>')
            else:
                out.append(_text(match.group(0)))
        elif kind == "bolditalic":
            out.append(f"<b><i>{_inline(match.group('bolditalic_text'))}</i></b>")
        elif kind in _WRAP:
            tag = _WRAP[kind]
            out.append(f"<{tag}>{_inline(match.group(f'{kind}_text'))}</{tag}>")
        pos = match.end()
    out.append(_text(text[pos:]))
    return "".join(out)


def _line(line: str) -> str:
    if heading := _HEADING.match(line):
        return f"<b>{_inline(heading.group(1))}</b>" if heading.group(1) else ""
    if bullet := _BULLET.match(line):
        return bullet.group(1) + "• " + _inline(line[bullet.end() :])
    return _inline(line)


def _code_block(lines: list[str], info: str) -> str:
    code = _escape("\n".join(lines))
    language = _LANGUAGE.fullmatch(info.split()[0]) if info.split() else None
    if language:
        return f'<pre><code class="language-{language.group(0)}">{code}</code></pre>'
    return f"<pre>{code}</pre>"


def to_html(markdown: str) -> str:
    """The reply as Telegram HTML (parse_mode=HTML); always well-formed."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        fence = _FENCE_OPEN.match(lines[i])
        if fence is None:
            out.append(_line(lines[i]))
            i += 1
            continue
        marker, info = fence.group(1), fence.group(2)
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = _FENCE_CLOSE.match(lines[i])
            if close and close.group(1)[0] == marker[0] and len(close.group(1)) >= len(marker):
                break
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence (an unclosed block runs to the end, as in Markdown)
        out.append(_code_block(body, info))
    return "\n".join(out)


_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)[^<>]*>")
_ENTITY = re.compile(r"&(?:#[0-9]+|#x[0-9A-Fa-f]+|[A-Za-z]+);")


@dataclass(frozen=True, slots=True)
class _Tag:
    start: int
    end: int
    name: str
    closing: bool
    text: str


class _Markup:
    """Where the tags and entities of an HTML text are, to cut it only between them."""

    def __init__(self, text: str) -> None:
        self.tags = [
            _Tag(m.start(), m.end(), m.group(2).lower(), bool(m.group(1)), m.group(0))
            for m in _TAG.finditer(text)
        ]
        self._atoms = sorted(
            [(t.start, t.end) for t in self.tags]
            + [(m.start(), m.end()) for m in _ENTITY.finditer(text)]
        )
        self._starts = {t.start: t for t in self.tags}
        self._ends = {t.end: t for t in self.tags}

    def open_at(self, pos: int) -> list[_Tag]:
        """The elements open at ``pos`` (outermost first)."""
        stack: list[_Tag] = []
        for tag in self.tags:
            if tag.end > pos:
                break
            if not tag.closing:
                stack.append(tag)
            elif stack and stack[-1].name == tag.name:
                stack.pop()
        return stack

    def settle(self, cut: int, floor: int) -> int:
        """Move ``cut`` out of any tag or entity, and off the edges of elements.

        Back before opening tags that would end a piece (no empty element), and forward over
        closing tags that follow (they would be added as the tail anyway).
        """
        for start, end in self._atoms:
            if start >= cut:
                break
            if start < cut < end:
                cut = start
        while cut in self._ends and not self._ends[cut].closing and self._ends[cut].start > floor:
            cut = self._ends[cut].start
        while cut in self._starts and self._starts[cut].closing:
            cut = self._starts[cut].end
        return cut

    def step(self, pos: int) -> int:
        """The end of the smallest unit starting at ``pos`` (a tag, an entity, a character)."""
        for start, end in self._atoms:
            if start == pos:
                return end
            if start > pos:
                break
        return pos + 1


def _closers(stack: list[_Tag]) -> str:
    return "".join(f"</{tag.name}>" for tag in reversed(stack))


def _openers(stack: list[_Tag]) -> str:
    return "".join(tag.text for tag in stack)


def split_html(
    text: str, limit: int = LIMIT, *, length: Callable[[str], int] = utf16_len
) -> list[Piece]:
    """Cut rendered HTML into pieces of at most ``limit``; joining the bodies gives ``text``.

    Each piece is ``head + body + tail``: ``head`` reopens the elements open where the piece
    starts, ``tail`` closes the ones open where it ends, so every piece is well-formed.
    """
    markup = _Markup(text)
    pieces: list[Piece] = []
    pos = 0
    while pos < len(text):
        head = _openers(markup.open_at(pos))
        if length(head + text[pos:]) <= limit:
            pieces.append(Piece(head, text[pos:], ""))
            break
        reserve = length(_closers(markup.open_at(pos)))
        for _ in range(16):
            budget = limit - length(head) - reserve
            if budget < 1:
                raise ValueError(f"limit {limit} is too small for this text's markup")
            cut = markup.settle(pos + best_cut(text[pos:], budget, length), pos)
            if cut <= pos:
                cut = markup.settle(markup.step(pos), pos)
            tail = _closers(markup.open_at(cut))
            over = length(head + text[pos:cut] + tail) - limit
            if over <= 0:
                break
            reserve += over
        else:
            raise ValueError(f"cannot cut this text under {limit}")
        pieces.append(Piece(head, text[pos:cut], tail))
        pos = cut
    return pieces


def to_plain(text: str) -> str:
    """A rendered piece as plain text: what is sent when Telegram refuses its entities."""
    return html.unescape(_TAG.sub("", text))


def render(markdown: str, limit: int = LIMIT) -> list[str]:
    """The reply as the HTML messages to send, in order, each within ``limit``."""
    pieces = [p.text for p in split_html(to_html(markdown), limit) if to_plain(p.text).strip()]
    return pieces or ["<i>(empty reply)</i>"]
