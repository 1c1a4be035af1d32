"""The shared chunker: every piece fits, nothing is lost, code fences survive the cuts."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from platforms._chunking import _open_fence_at, split, split_marked, utf16_len

words = st.sampled_from(
    [
        "hello",
        "world.",
        "naïve",
        "😀",
        "𝄞",
        "日本語",
        "a" * 50,
        "\n",
        "\n\n",
        " ",
        "```",
        "```py\n",
        "~~~",
        "code();",
    ]
)
texts = st.lists(words, max_size=400).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(text=texts, limit=st.integers(40, 500), utf16=st.booleans())
def test_pieces_fit_and_join_back(text: str, limit: int, utf16: bool) -> None:
    length = utf16_len if utf16 else len
    pieces = split_marked(text, limit, length=length)
    assert "".join(p.body for p in pieces) == text
    for p in pieces:
        assert length(p.text) <= limit
    assert all(piece.strip() for piece in split(text, limit, length=length))


@settings(max_examples=200, deadline=None)
@given(
    code=st.lists(
        st.sampled_from(["x = 1", "print(x)", "", "# comment", "y" * 70]), min_size=50, max_size=300
    )
)
def test_a_cut_code_block_is_closed_and_reopened(code: list[str]) -> None:
    text = "Intro paragraph.\n\n```python\n" + "\n".join(code) + "\n```\n\nOutro."
    pieces = split(text, 300)
    for piece in pieces:
        assert _open_fence_at(piece) is None, piece  # every piece is balanced on its own
    inner = [p for p in pieces[1:] if "x = 1" in p or "print" in p]
    assert all(p.startswith("```python\n") or not p.startswith("```") for p in inner)


def test_prefers_paragraphs_then_lines_then_sentences() -> None:
    text = "First paragraph is here.\n\nSecond one. It has two sentences."
    assert split(text, 40) == ["First paragraph is here.\n\n", "Second one. It has two sentences."]
    assert split("a first line here\nanother line that is long", 30) == [
        "a first line here\n",
        "another line that is long",
    ]
    assert split("Sentence one is here. Sentence two is longer", 30) == [
        "Sentence one is here. ",
        "Sentence two is longer",
    ]


def test_counts_utf16_for_telegram() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units
    pieces = split(text, 4096, length=utf16_len)
    assert [utf16_len(p) for p in pieces] == [4096, 1904]
    assert "".join(pieces) == text


def test_a_cut_moves_out_of_an_atom_to_its_start() -> None:
    atoms = re.compile(r"<[^<>]*>")
    text = "some words <https://example.com/link|a label> and more words after it"
    pieces = split(text, 45, atoms=atoms)
    assert "".join(pieces) == text
    assert pieces[1].startswith("<https://") and all(p.count("<") == p.count(">") for p in pieces)
    assert split(text, 45) != pieces  # without atoms, the best cut falls inside the link
    # An atom longer than a piece, at a piece's start, is cut all the same: every piece fits.
    assert all(len(p) <= 20 for p in split("<" + "x" * 50 + ">", 20, atoms=atoms))
