"""The model's Markdown as Telegram HTML, cut into messages that fit after rendering.

Why cut after rendering: Telegram's limit (4096 UTF-16 units per message) applies to what is
sent, and formatting changes the length, so cutting Markdown first is how other gateways end
up with "message is too long". Cutting HTML has rules of its own: never inside a tag or an
entity (``&amp;``), and an element open at a cut is closed at the end of the piece and opened
again at the start of the next, so a code block split in two is a code block on both sides.
Where to cut follows the shared chunker's preferences (paragraph, line, sentence, space).

The Markdown is parsed once, as CommonMark (:mod:`platforms._markdown`); this module says how
Telegram's HTML parse mode shows each part: bold, italic, strikethrough, inline code, code
blocks with their language (``<pre><code class="language-x">``), headings as bold, lists as
text markers, quotes as ``<blockquote>``, tables as aligned columns in ``<pre>``, web links.
All text is escaped as Telegram requires (``&lt; &gt; &amp;`` only), so the HTML is
well-formed by construction and the model's own HTML shows as typed; if Telegram still
refuses a piece, the adapter resends it as plain text (:func:`to_plain`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from platforms import _markdown
from platforms._chunking import Piece, best_cut, utf16_len

LIMIT = 4096  # Telegram's message limit, in UTF-16 code units
# tg:// links act inside the user's app (tg://proxy and tg://socks offer to route all its
# traffic through a stranger's server, tg://resolve opens chats): from a prompt-injected
# reply that is a phishing tool, so they are never links. In text they are shown as code,
# so Telegram's clients do not make a tappable link of them on their own.
_APP_LINK = re.compile(r"(?i)\btg://[^\s<>()\[\]]+")
_WRAP = {"strong": "b", "em": "i", "s": "s"}


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _text(text: str) -> str:
    """Plain text as HTML, with any tg:// link in it made inert (code, not a link)."""
    if "tg:" not in text.lower():
        return _escape(text)
    out: list[str] = []
    pos = 0
    for match in _APP_LINK.finditer(text):
        out.append(_escape(text[pos : match.start()]))
        out.append(f"<code>{_escape(match.group(0))}</code>")
        pos = match.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def _inline(tokens: Sequence[Token]) -> str:
    """Inline tokens as HTML. Inside a link only bold, italic and strikethrough nest (Telegram
    lets no other entity contain code), so code there is shown as its text."""
    out: list[str] = []
    closers: list[str] = []  # for each open link: what ends it
    in_link = 0
    for token in tokens:
        kind = token.type
        if kind == "text":
            out.append(_escape(token.content) if in_link else _text(token.content))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "code_inline":
            code = _escape(token.content)
            out.append(code if in_link else f"<code>{code}</code>")
        elif kind.endswith("_open") and kind[:-5] in _WRAP:
            out.append(f"<{_WRAP[kind[:-5]]}>")
        elif kind.endswith("_close") and kind[:-6] in _WRAP:
            out.append(f"</{_WRAP[kind[:-6]]}>")
        elif kind == "link_open":
            href = str(token.attrs.get("href", ""))
            url = _markdown.web_url(href)
            if url is not None:
                out.append(f'<a href="{html.escape(url)}">')
                closers.append("</a>")
                in_link += 1
            elif token.markup == "autolink":
                closers.append("")
            else:  # shown as the Markdown it was written as, the target inert
                out.append("[")
                closers.append(f"]({_text(href)})")
        elif kind == "link_close":
            closer = closers.pop()
            in_link -= closer == "</a>"
            out.append(closer)
        elif kind == "image":
            out.append(_image(token, in_link=bool(in_link)))
    return "".join(out)


def _image(token: Token, *, in_link: bool) -> str:
    """An image is not sent inline: its description, linked to it when it is on the web."""
    alt = _escape(_markdown.plain(token.children or ()))
    url = _markdown.web_url(str(token.attrs.get("src", "")))
    if url is None or in_link:
        return alt
    return f'<a href="{html.escape(url)}">{alt or _escape(url)}</a>'


@dataclass(frozen=True, slots=True)
class _Telegram:
    """Telegram's HTML parse mode as a :class:`platforms._markdown.Dialect`."""

    bullets: tuple[str, ...] = ("\u2022", "\u25e6", "\u25aa")  # • ◦ ▪

    def paragraph(self, tokens: Sequence[Token]) -> str:
        return _inline(tokens)

    def heading(self, level: int, tokens: Sequence[Token]) -> str:
        text = _inline(tokens)
        return f"<b>{text}</b>" if text else ""

    def code(self, code: str, language: str) -> str:
        if language:
            return f'<pre><code class="language-{language}">{_escape(code)}</code></pre>'
        return f"<pre>{_escape(code)}</pre>"

    def quote(self, text: str) -> str:
        return f"<blockquote>{text}</blockquote>"


_DIALECT = _Telegram()


def to_html(markdown: str) -> str:
    """The reply as Telegram HTML (parse_mode=HTML); always well-formed."""
    return _markdown.render(markdown, _DIALECT)


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
