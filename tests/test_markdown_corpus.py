"""Real model answers rendered for every platform, compared with what each should receive.

``tests/corpus/markdown/NAME.md`` is an answer as a model writes it (tables, nested lists,
quotes, code, escapes, headings, links, a code block too long for one message);
``NAME.telegram.html``, ``NAME.discord.txt`` and ``NAME.slack.txt`` are the renderings, read
and checked by hand. After a deliberate change of a renderer, rewrite them with
``BOTMUX_REWRITE_CORPUS=1 pytest tests/test_markdown_corpus.py`` and review the diff.

Beyond the exact text: every message cut from a rendering is valid on its platform (Telegram's
through the fake Bot API's HTML parser and the Bot API's nesting rules; Discord's and Slack's
within their limits, code fences balanced, Slack's ``<``/``>``/``&`` only in its own markup),
and no cut loses, doubles or un-codes a line of a code block.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platforms._chunking import _open_fence_at, utf16_len
from platforms.discord import render as discord
from platforms.slack import render as slack
from platforms.telegram import render as telegram
from tests.fakes.telegram_server import parse_html

CORPUS = Path(__file__).resolve().parent / "corpus" / "markdown"
NAMES = sorted(p.stem for p in CORPUS.glob("*.md"))
RENDERERS: dict[str, tuple[str, Callable[[str], str]]] = {
    "telegram": ("html", telegram.to_html),
    "discord": ("txt", discord.to_markdown),
    "slack": ("txt", slack.to_mrkdwn),
}
CODE_LINE = re.compile(r"^def step_\d{3}|^    return sum", re.M)


@pytest.mark.parametrize("platform", sorted(RENDERERS))
@pytest.mark.parametrize("name", NAMES)
def test_the_corpus_renders_as_expected(name: str, platform: str) -> None:
    suffix, to_platform = RENDERERS[platform]
    got = to_platform((CORPUS / f"{name}.md").read_text()) + "\n"
    expected = CORPUS / f"{name}.{platform}.{suffix}"
    if os.environ.get("BOTMUX_REWRITE_CORPUS") == "1":
        expected.write_text(got)
    assert got == expected.read_text()


def telegram_valid(message: str, limit: int) -> list[dict[str, object]]:
    """Telegram would take ``message``: its HTML parses, it fits, the entities nest as the Bot
    API allows (pre and code hold nothing, blockquotes are not nested, no partial overlap)."""
    assert utf16_len(message) <= limit
    text, entities = parse_html(message)
    assert text.strip()
    spans = [(int(str(e["offset"])), int(str(e["length"])), str(e["type"])) for e in entities]
    for i, (start, length, kind) in enumerate(spans):
        for j, (other, other_length, other_kind) in enumerate(spans):
            if i == j or other >= start + length or other + other_length <= start:
                continue  # the same entity, or disjoint
            holds = start <= other and other + other_length <= start + length
            held = other <= start and start + length <= other + other_length
            assert holds or held, f"{kind} and {other_kind} overlap"
            if holds and (start, length) != (other, other_length):
                assert kind not in ("pre", "code"), f"{other_kind} inside {kind}"
            assert not (kind == other_kind == "blockquote"), "nested blockquotes"
            assert not {kind, other_kind} <= {"pre", "code"}, "code inside code"
    return entities


def fences_balanced(message: str) -> bool:
    return _open_fence_at(message) is None


def slack_valid(message: str, limit: int) -> None:
    assert utf16_len(message) <= limit and message.strip()
    assert fences_balanced(message)
    outside = slack.ATOMS.sub("", message)
    assert "<" not in outside and ">" not in outside.replace("> ", "") and "&" not in outside


def code_lines(messages: list[str], fence: str) -> list[str]:
    """The lines of code blocks in the messages, in order (the block's own lines only)."""
    lines: list[str] = []
    for message in messages:
        inside = False
        for line in message.split("\n"):
            if line.startswith(fence):
                inside = not inside
            elif inside and CODE_LINE.match(line):
                lines.append(line)
    return lines


@pytest.mark.parametrize("name", NAMES)
def test_every_message_cut_from_the_corpus_is_valid_on_its_platform(name: str) -> None:
    source = (CORPUS / f"{name}.md").read_text()
    for limit in (telegram.LIMIT, 700):
        for message in telegram.render(source, limit):
            telegram_valid(message, limit)
    for limit in (discord.LIMIT, 500):
        for message in discord.render(source, limit=limit):
            assert len(message) <= limit and fences_balanced(message), message
        for message in discord.render(source, limit=limit, max_lines=17):
            assert len(message.split("\n")) <= 17 and fences_balanced(message)
    for limit in (slack.LIMIT, 600):
        for message in slack.render(source, limit):
            slack_valid(message, limit)


def test_a_long_code_block_is_cut_into_code_blocks_with_no_line_lost() -> None:
    source = (CORPUS / "long_code.md").read_text()
    expected = [line for line in source.split("\n") if CODE_LINE.match(line)]
    assert len(expected) == 120

    messages = telegram.render(source)
    assert len(messages) >= 3
    seen: list[str] = []
    for message in messages:
        text, _ = parse_html(message)
        pres = [e for e in telegram_valid(message, telegram.LIMIT) if e["type"] == "pre"]
        assert [e.get("language") for e in pres] == ["python"], "each piece is python code"
        pre = pres[0]
        units = text.encode("utf-16-le")
        start, length = 2 * int(str(pre["offset"])), 2 * int(str(pre["length"]))
        code = units[start : start + length].decode("utf-16-le")
        seen += [line for line in code.split("\n") if CODE_LINE.match(line)]
    assert seen == expected

    for pieces, unescape in (
        (discord.render(source), str),
        (discord.render(source, max_lines=17), str),
        (slack.render(source), html.unescape),  # Slack's &amp; &lt; &gt;
    ):
        assert len(pieces) >= 3
        assert all(fences_balanced(p) for p in pieces)
        assert [unescape(line) for line in code_lines(pieces, "```")] == expected


fragments = st.sampled_from(
    [
        "word ",
        "naïve 😀 日本語 ",
        "x" * 70,
        "\n",
        "\n\n",
        "**bold** ",
        "*it* ",
        "~~gone~~ ",
        "`a < b` ",
        "``x`y`` ",
        "\\*lit\\* ",
        "# Heading\n",
        "#### Deep\n",
        "> quoted ",
        "> > nested\n",
        "- item\n",
        "  - sub\n",
        "1. one\n",
        "10. ten\n",
        "| a | b |\n|---|--:|\n| 1 | 22 |\n",
        "```python\n",
        "```\n",
        "~~~\n",
        "def f(x):\n    return x < 1 & 2\n",
        "[link](https://e.com/a_b?c=1&d=2) ",
        "<https://e.com/x> ",
        "[bad](javascript:alert(1)) ",
        "[tg](tg://proxy?server=x) ",
        "![img](https://e.com/i.png) ",
        "<b>raw</b> <@123> &amp; ",
        "2*3*4 ",
        "---\n",
    ]
)
documents = st.lists(fragments, max_size=120).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=documents, times=st.integers(1, 8), limit=st.integers(300, 4096))
def test_any_markdown_renders_to_valid_messages_within_the_limit(
    text: str, times: int, limit: int
) -> None:
    text *= times  # long enough to be cut
    for message in telegram.render(text, limit):
        if message != "<i>(empty reply)</i>":
            telegram_valid(message, limit)
    discord_limit = min(limit, discord.LIMIT)
    for message in discord.render(text, limit=discord_limit):
        assert len(message) <= discord_limit and fences_balanced(message)
    slack_limit = min(limit, slack.LIMIT)
    for message in slack.render(text, slack_limit):
        slack_valid(message, slack_limit)
