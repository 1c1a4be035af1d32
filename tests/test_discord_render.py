"""Replies as the Markdown Discord renders, cut into messages: pure functions."""

from __future__ import annotations

from platforms.discord import render


def test_render_keeps_limits_and_fences_and_caps_lines() -> None:
    code = "\n".join(f"x = {n}" for n in range(300))
    text = "Intro line.\n\n```py\n" + code + "\n```\nDone."
    plain = render.render(text, limit=2000)
    assert all(len(p) <= 2000 for p in plain)
    capped = render.render(text, limit=2000, max_lines=17)
    assert all(len(p) <= 2000 and len(p.splitlines()) <= 17 for p in capped)
    for pieces in (plain, capped):
        assert all(p.count("```") % 2 == 0 for p in pieces)
        body = [ln for p in pieces for ln in p.splitlines() if ln.startswith("x = ")]
        assert body == code.splitlines()
    assert len(capped) > len(plain)
    assert render.render("short", limit=2000, max_lines=17) == ["short"]
    assert render.render("   ") == []


def test_a_table_becomes_a_code_block_of_aligned_columns() -> None:
    # Discord renders no tables: passed through, they were rows of pipes in proportional type.
    text = "Sales:\n\n| Region | Sales |\n|---|---:|\n| North | 120 |\n| South-East | 8 |"
    assert render.render(text) == [
        "Sales:\n\n```\nRegion      Sales\n----------  -----\nNorth         120\nSouth-East      8\n```"
    ]


def test_what_discord_renders_is_kept_and_the_rest_is_escaped() -> None:
    text = (
        "# Title\n\n#### Deep\n\n**b** *i* ~~s~~ `c` [docs](https://x.y/a_b) <https://x.y>\n\n"
        "> quoted\n\n- one\n  1. sub\n\n"
        "snake_case, <@123> <t:1:R>, a|b, and a bare https://x.y/a_b_c\n"
        "- not a list\n"
    )
    assert render.to_markdown(text) == (
        "# Title\n\n### Deep\n\n**b** *i* ~~s~~ `c` [docs](<https://x.y/a_b>) <https://x.y>\n\n"
        "> quoted\n\n- one\n  1. sub\n\n"
        "snake\\_case, \\<@123> \\<t:1:R>, a\\|b, and a bare https://x.y/a_b_c\n"
        "- not a list"
    )
    # A line that would start a list, a heading or a quote on Discord is escaped there.
    assert render.to_markdown("text\n\\- not a list\n\\# nor a heading\n2\\. nor this") == (
        "text\n\\- not a list\n\\# nor a heading\n2\\. nor this"
    )


def test_links_other_than_the_web_are_text_and_code_fences_cannot_be_closed_early() -> None:
    assert render.to_markdown("[x](tg://proxy?server=h) [m](mailto:a@b.c)") == (
        "\\[x\\](tg://proxy?server=h) \\[m\\](mailto:a@b.c)"
    )
    assert render.to_markdown("```\nprint('```')\n```") == "```\nprint('`\u200b``')\n```"


def test_a_cut_never_falls_inside_a_masked_link() -> None:
    link = "[the documentation](<https://example.com/" + "a" * 40 + ">)"
    text = " ".join(["word"] * 30 + [link] * 5)
    for limit in range(120, 260, 7):
        for piece in render.render(text, limit=limit):
            assert piece.count("[") == piece.count("](<") == piece.count(">)"), piece
