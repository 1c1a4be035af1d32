"""Replies as Slack mrkdwn, cut into messages: pure functions (the Slack adapter comes later)."""

from __future__ import annotations

from platforms.slack import render

ZWSP = "\u200b"


def test_markdown_becomes_mrkdwn() -> None:
    text = (
        "# Title\n\n**bold** *it* ~~gone~~ `a < b` [docs](https://x.y/?a=1&b=2) <https://x.y/z>\n\n"
        "> quoted **b**\n\n- one\n  - two\n1. first\n\n"
        "| k | v |\n|---|--:|\n| a | 10 |"
    )
    assert render.to_mrkdwn(text) == (
        "*Title*\n\n*bold* _it_ ~gone~ `a &lt; b` <https://x.y/?a=1&amp;b=2|docs> <https://x.y/z>"
        "\n\n> quoted *b*\n\n\u2022 one\n  \u25e6 two\n1. first\n\n"
        "```\nk   v\n-  --\na  10\n```"
    )


def test_escaping_is_what_slack_requires_and_literal_markers_stay_literal() -> None:
    text = r"AT&T <!channel> <@U1> \*stars\* snake_case 2*3 ~50 a > b" + "\n\n\\> not a quote"
    assert render.to_mrkdwn(text) == (
        f"AT&amp;T &lt;!channel&gt; &lt;@U1&gt; {ZWSP}*stars* snake_case 2*3 {ZWSP}~50 a &gt; b"
        f"\n\n{ZWSP}&gt; not a quote"
    )


def test_links_other_than_the_web_are_text() -> None:
    assert render.to_mrkdwn("[x](tg://proxy?server=h&p=1) [js](javascript:alert(1))") == (
        "[x](tg://proxy?server=h&amp;p=1) [js](javascript:alert(1))"
    )


def test_cut_within_the_limit_never_inside_a_link_or_an_escape() -> None:
    link = "[the docs](https://example.com/" + "a" * 30 + "?x=1&y=2)"
    text = " ".join(["AT&T"] * 40 + [link] * 8)
    for limit in range(100, 220, 11):
        pieces = render.render(text, limit)
        assert all(len(p) <= limit for p in pieces)
        for piece in pieces:
            assert piece.count("<") == piece.count(">")
            assert all(chunk.startswith(("amp;", "lt;", "gt;")) for chunk in piece.split("&")[1:])
    code = "\n".join(f"x = {n}  # < {n}" for n in range(600))
    pieces = render.render(f"```\n{code}\n```")
    assert len(pieces) >= 3 and all(len(p) <= render.LIMIT for p in pieces)
    assert all(p.startswith("```\n") and p.endswith("\n```") for p in pieces)
