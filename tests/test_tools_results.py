"""A tools/call result as the model is given it (agent/tools/results.py): pure, no server."""

from __future__ import annotations

import json

import pytest

from agent.tools import MAX_TEXT, MalformedReply, tool_outcome
from gateway.messages import DataUrl


def test_text_blocks_are_joined_and_is_error_kept() -> None:
    result = {"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}
    assert tool_outcome(result).text == "one\ntwo"
    failed = tool_outcome({**result, "isError": True})
    assert failed.is_error and failed.text == "one\ntwo"
    assert tool_outcome({"content": []}).text == ""


def test_images_become_data_urls_and_other_blocks_are_named() -> None:
    result = {
        "content": [
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/tiff"},
            {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            {"type": "audio", "data": "aGVsbG8=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b.txt", "text": "inside b"}},
            {"type": "resource", "resource": {"uri": "file:///c.bin", "blob": "AAAA"}},
        ]
    }
    outcome = tool_outcome(result)
    (image,) = outcome.images
    assert isinstance(image, DataUrl) and str(image) == "data:image/png;base64,aGVsbG8="
    assert outcome.text.splitlines() == [
        "[an image of type image/tiff: not shown]",
        "[an image whose data is not base64: not shown]",
        "[an audio clip: not shown]",
        "[a resource: file:///a.txt]",
        "inside b",
        "[a binary resource: file:///c.bin]",
    ]


def test_structured_content_is_the_text_when_no_block_is() -> None:
    both = {"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}}
    assert tool_outcome(both).text == "3"
    alone = tool_outcome({"content": [], "structuredContent": {"é": [1, None]}})
    assert json.loads(alone.text) == {"é": [1, None]} and "é" in alone.text


def test_a_huge_result_is_cut_at_the_safety_bound_with_a_note() -> None:
    blocks = [{"type": "text", "text": "x" * 700_000} for _ in range(3)]
    outcome = tool_outcome({"content": blocks})
    body, note = outcome.text.rsplit("\n", 1)
    assert len(body.replace("\n", "")) == MAX_TEXT
    assert note == f"[cut: the tool returned more than {MAX_TEXT} characters]"
    exact = tool_outcome({"content": [{"type": "text", "text": "y" * MAX_TEXT}]})
    assert exact.text == "y" * MAX_TEXT  # nothing cut: no note
    huge = tool_outcome({"content": [], "structuredContent": {"k": "z" * (2 * MAX_TEXT)}})
    assert huge.text.endswith("characters]") and len(huge.text) < MAX_TEXT + 100


@pytest.mark.parametrize(
    "result",
    [
        "text",
        {"content": "not a list"},
        {"content": ["not a block"]},
        {"content": [{"type": "text"}]},
        {"content": [{"type": "image", "data": "x"}]},
    ],
)
def test_a_reply_that_is_no_result_is_refused_with_why(result: object) -> None:
    with pytest.raises(MalformedReply) as refused:
        tool_outcome(result)
    assert str(refused.value)
