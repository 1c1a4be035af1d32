"""Rendering and cutting replies for Telegram, keys, and the error table: pure functions.

The property tests check the rendered HTML with the fake Bot API's own HTML parser (Telegram's
rules and error texts), so "well-formed" means "Telegram would accept it".
"""

from __future__ import annotations

import re

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from telegram.error import BadRequest, NetworkError, TimedOut

from gateway.errors import PlatformError
from platforms._chunking import utf16_len
from platforms.telegram import convert, errors
from platforms.telegram.render import LIMIT, render, split_html, to_html, to_plain
from tests.fakes.telegram_server import parse_html

tokens = st.sampled_from(
    [
        "word",
        "naïve",
        "😀",
        "𝄞",
        "日本語",
        "x" * 60,
        " ",
        "\n",
        "\n\n",
        "**",
        "*",
        "_",
        "__",
        "~~",
        "`",
        "```",
        "```python\n",
        "\n```\n",
        "[link](https://example.com/?a=1&b=2)",
        "[bad](javascript:alert(1))",
        "<b>",
        "</i>",
        "&",
        "&amp;",
        "1 < 2 > 0",
        "# ",
        "- ",
        "snake_case_name",
        "end. ",
    ]
)
markdown = st.lists(tokens, max_size=300).map("".join)
ONLY_TAGS = re.compile(r"(?:<[^<>]+>)*")


@settings(max_examples=300, deadline=None)
@given(text=markdown, limit=st.integers(120, LIMIT))
def test_every_piece_fits_parses_and_the_bodies_join_back(text: str, limit: int) -> None:
    html = to_html(text)
    parse_html(html)  # raises on anything Telegram would refuse
    pieces = split_html(html, limit)
    assert "".join(p.body for p in pieces) == html
    for piece in pieces:
        assert utf16_len(piece.text) <= limit
        assert ONLY_TAGS.fullmatch(piece.head) and ONLY_TAGS.fullmatch(piece.tail)
        parse_html(piece.text)  # each piece is well-formed on its own


@settings(max_examples=50, deadline=None)
@given(text=markdown)
def test_render_gives_sendable_messages(text: str) -> None:
    messages = render(text * 8)
    assert messages
    for message in messages:
        assert utf16_len(message) <= LIMIT
        plain, _ = parse_html(message)
        assert plain.strip()


def test_a_code_block_cut_in_two_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})  # a < b" for i in range(400))
    html = to_html(f"Intro.\n\n```python\n{code}\n```\n\nOutro.")
    pieces = split_html(html, 2000)
    assert len(pieces) >= 4
    opener = '<pre><code class="language-python">'
    assert pieces[0].tail == "</code></pre>"
    for middle in pieces[1:-1]:
        assert (middle.head, middle.tail) == (opener, "</code></pre>")
    lines = [line for p in pieces for line in parse_html(p.text)[0].split("\n") if "print" in line]
    assert len(lines) == 400  # nothing lost or doubled


def test_cuts_prefer_paragraphs_and_never_split_a_tag_or_entity() -> None:
    para = "A sentence with <b>bold</b> &amp; more. " * 20
    html = "\n\n".join([para] * 6)
    for limit in (150, 333, 1000):
        for piece in split_html(html, limit):
            assert not re.search(r"<[^>]*$", piece.body) and not re.search(
                r"&[a-z#0-9]*$", piece.body
            )
    pieces = split_html(html, 2000)
    assert all(p.body.endswith("\n\n") for p in pieces[:-1])


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("**bold** and *it* and _it_", "<b>bold</b> and <i>it</i> and <i>it</i>"),
        ("***both***", "<b><i>both</i></b>"),
        ("~~gone~~", "<s>gone</s>"),
        ("use `a < b` here", "use <code>a &lt; b</code> here"),
        ("[site](https://x.y/?a=1&b=2)", '<a href="https://x.y/?a=1&amp;b=2">site</a>'),
        ("[evil](javascript:alert)", "[evil](javascript:alert)"),
        # tg:// acts inside the app (proxy, socks, resolve): never a link, shown as code.
        (
            "[Faster Telegram](tg://proxy?server=1.2.3.4&port=443&secret=ee)",
            "[Faster Telegram](<code>tg://proxy?server=1.2.3.4&amp;port=443&amp;secret=ee</code>)",
        ),
        ("**[x](TG://socks?server=h)**", "<b>[x](<code>TG://socks?server=h</code>)</b>"),
        ("tap tg://resolve?domain=evil now", "tap <code>tg://resolve?domain=evil</code> now"),
        ("[mail me](mailto:a@b.example)", "[mail me](mailto:a@b.example)"),
        ("[ok](http://x.example/a)", '<a href="http://x.example/a">ok</a>'),
        ("snake_case_name and 2*3*4", "snake_case_name and 2*3*4"),
        ("# Title", "<b>Title</b>"),
        ("- one\n* two", "• one\n• two"),
        ("```\nx < 1\n```", "<pre>x &lt; 1</pre>"),
        ("```py\nunclosed", '<pre><code class="language-py">unclosed</code></pre>'),
        ("<script> & co", "&lt;script&gt; &amp; co"),
    ],
)
def test_markdown_to_telegram_html(markdown: str, html: str) -> None:
    # Compared as Telegram shows it (text and entities): ***both*** is <i><b> in CommonMark.
    assert shown(to_html(markdown)) == shown(html)


def shown(html: str) -> tuple[str, list[tuple[str, int, int, str]]]:
    text, entities = parse_html(html)
    spans = [(e["type"], e["offset"], e["length"], e.get("url", "")) for e in entities]
    return text, sorted(spans)


def test_escaped_stars_are_literal_stars() -> None:
    # The old converter sent "\<i>stars\</i>": italics with stray backslashes.
    assert to_html(r"Use \*stars\* and \_under\_ as typed") == "Use *stars* and _under_ as typed"


def test_a_table_is_aligned_columns_in_a_monospaced_block() -> None:
    html = to_html("| Region | Sales |\n|:--|--:|\n| North | 120 |\n| South-East | 8 |")
    assert html == (
        "<pre>Region      Sales\n----------  -----\nNorth         120\nSouth-East      8</pre>"
    )
    text, entities = parse_html(html)
    assert [e["type"] for e in entities] == ["pre"] and "|" not in text


def test_a_quote_is_a_telegram_blockquote() -> None:
    html = to_html("As the docs say:\n\n> Cut **after** rendering.\n> Never before.\n\nDone.")
    assert html == (
        "As the docs say:\n\n<blockquote>Cut <b>after</b> rendering.\nNever before.</blockquote>"
        "\n\nDone."
    )


def test_plain_text_fallback_drops_tags_and_unescapes() -> None:
    assert to_plain('<b>a</b> &lt;b&gt; <a href="https://x">link</a>') == "a <b> link"


def test_empty_reply_still_sends_something() -> None:
    assert render("  \n ") == ["<i>(empty reply)</i>"]


def test_conversation_keys_both_ways() -> None:
    assert convert.conversation_key(42) == "telegram:42"
    assert convert.conversation_key(-1001, 7) == "telegram:-1001:topic:7"
    assert convert.parse_key("telegram:-1001:topic:7") == convert.Target(-1001, 7)
    assert convert.parse_key("telegram:42") == convert.Target(42, None)
    with pytest.raises(ValueError):
        convert.parse_key("discord:42")


def answered(status: int, body: bytes) -> PlatformError:
    error = errors.answer_error(status, body)
    assert error is not None
    return errors.translate(error)


def test_error_table() -> None:
    flood = answered(429, b'{"ok":false,"parameters":{"retry_after":3}}')
    assert (flood.status, flood.retry_after, flood.ambiguous) == (429, 3.0, False)
    envelope = answered(502, b'{"ok":false,"description":"x"}')
    assert (envelope.status, envelope.ambiguous) == (502, False)  # the Bot API refused it
    proxy = answered(502, b"<html>bad gateway</html>")
    assert (proxy.status, proxy.ambiguous) == (502, True)  # a proxy: it may have gone through
    assert errors.answer_error(400, b"{}") is None  # PTB's own exceptions are right for these
    assert errors.translate(BadRequest("Chat not found")).status == 400

    def caused(exc: Exception, cause: Exception) -> Exception:
        exc.__cause__ = cause
        return exc

    # The transport (aiohttp): only a connection never made proves nothing left.
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)
    never = caused(NetworkError("refused"), aiohttp.ClientConnectorError(key, OSError(111, "x")))
    assert errors.translate(never).ambiguous is False
    no_slot = caused(TimedOut("Connect or pool timeout"), aiohttp.ConnectionTimeoutError())
    assert errors.translate(no_slot).ambiguous is False
    slow = caused(TimedOut(), aiohttp.SocketTimeoutError())
    assert errors.translate(slow).ambiguous is True
    cut = caused(NetworkError("gone"), aiohttp.ServerDisconnectedError())
    assert errors.translate(cut).ambiguous is True
    assert errors.entities_refused(BadRequest("Can't parse entities: unclosed tag"))
    assert not errors.entities_refused(BadRequest("Message is too long"))
