"""What a model call sends and gets back, in OpenAI's chat completions format: a message's
content parts, and an answer's text, tool calls and token counts (plain or streamed).

Apart from :mod:`agent.turn` so that module stays the turn; pure functions over JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.messages import DataUrl, Image, ToolCall, Usage


@dataclass(frozen=True, slots=True)
class Completion:
    """One model call's answer: its text, its token counts, and the tool calls it asked for
    (SPEC 15; none: the text is the answer)."""

    text: str
    usage: Usage
    calls: tuple[ToolCall, ...] = ()


def content(text: str, images: Sequence[Image]) -> str | list[dict[str, Any]]:
    """A message's content: its text, or with images the text part and one ``image_url``
    part each (only resolved ones: a ``sha256:`` reference is an image not re-sent)."""
    urls = [
        u
        for u in images
        if isinstance(u, DataUrl) or u.startswith(("data:", "https://", "http://"))
    ]
    if not urls:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts.extend({"type": "image_url", "image_url": {"url": u}} for u in urls)
    return parts


def message_text(choices: Any) -> str:
    """The text of a plain completion's first choice ("" when it has none)."""
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def message_calls(choices: Any) -> tuple[ToolCall, ...]:
    """The tool calls of a plain completion's first choice."""
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    found = message.get("tool_calls") if isinstance(message, dict) else None
    calls = []
    for i, call in enumerate(found if isinstance(found, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments")
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{i}"
        calls.append(
            ToolCall(call_id, function["name"], arguments if isinstance(arguments, str) else "{}")
        )
    return tuple(calls)


class StreamedCalls:
    """A streamed answer's tool calls, put together from their deltas (each call's id and
    name come first, its arguments in pieces, all by the call's ``index``)."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]

    def add(self, choices: Any) -> None:
        for choice in choices or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            found = delta.get("tool_calls") if isinstance(delta, dict) else None
            for call in found if isinstance(found, list) else ():
                if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                    continue
                parts = self._calls.setdefault(call["index"], ["", "", ""])
                if isinstance(call.get("id"), str):
                    parts[0] = call["id"]
                function = call.get("function")
                if isinstance(function, dict):
                    if isinstance(function.get("name"), str):
                        parts[1] += function["name"]
                    if isinstance(function.get("arguments"), str):
                        parts[2] += function["arguments"]

    def done(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(call_id or f"call_{i}", name, arguments or "{}")
            for i, (call_id, name, arguments) in sorted(self._calls.items())
            if name
        )


def delta_text(choices: Any) -> str:
    """The text of a streamed chunk's choices' deltas."""
    text = ""
    for choice in choices or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        piece = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(piece, str):
            text += piece
    return text


def usage_of(value: Any) -> Usage | None:
    """The usage of a reply, or of a streamed chunk (the last one, with ``include_usage``), if
    it has one."""
    if not isinstance(value, dict):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt, completion)
