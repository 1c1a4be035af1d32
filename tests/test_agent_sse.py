"""agent/_sse.py: a streamed completion's events from the bytes as they arrive, however the
reads cut them; an error event is the ProviderError openai's APIError was translated to."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest

from agent import _sse
from gateway.errors import ProviderError

pytestmark = pytest.mark.anyio


def body(reads: list[bytes]) -> Callable[[], Awaitable[bytes]]:
    """A response body that arrives in the given reads: aiohttp's ``readany``, which gives
    b"" only at the end (so an empty read in ``reads`` is none)."""
    left = iter([r for r in reads if r])

    async def readany() -> bytes:
        return next(left, b"")

    return readany


def event(content: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def contents(batches: list[list[object]]) -> list[list[str]]:
    return [[c["choices"][0]["delta"]["content"] for c in b] for b in batches]  # type: ignore[index]


async def read(reads: Callable[[], Awaitable[bytes]]) -> list[list[object]]:
    return [batch async for batch in _sse.batches(reads, "m")]


async def test_events_cut_anywhere_by_the_reads_come_whole_one_reads_together() -> None:
    stream = event("a") + event("b") + b": a comment\n\n" + event("c") + b"data: [DONE]\n\n"
    reads = [stream[:3], stream[3:70], stream[70:71], stream[71:]]
    batches = await read(body(reads))
    assert [x for b in contents(batches) for x in b] == ["a", "b", "c"]
    whole = await read(body([stream]))
    assert contents(whole) == [["a", "b", "c"]]


async def test_crlf_line_ends_split_between_reads_and_nothing_after_done() -> None:
    stream = (event("x") + event("y")).replace(b"\n", b"\r\n")
    cut = stream.index(b"\r\n\r\n") + 1  # a read ends between a CR and its LF
    after = b"data: [DONE]\r\n\r\n" + event("never")
    batches = await read(body([stream[:cut], stream[cut:], after]))
    assert [x for b in contents(batches) for x in b] == ["x", "y"]


async def test_an_error_event_and_a_bad_event_are_provider_errors() -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    with pytest.raises(ProviderError, match="APIError: overloaded") as raised:
        await read(body([event("a"), error]))
    assert raised.value.status == 0 and raised.value.model == "m"  # as openai's APIError was
    with pytest.raises(ProviderError, match="invalid stream event") as bad:
        await read(body([event("a"), b"data: {not json\n\n"]))
    assert bad.value.status == 200


async def test_what_json_loads_refused_is_refused_and_spaces_around_are_allowed() -> None:
    """The decoder is ``raw_decode`` with a check of what follows: the same verdicts as
    ``json.loads`` on the event's data."""
    spaced = b'data:   {"choices": [{"delta": {"content": "s"}}]}  \n\n'
    bare = b'data:{"choices": [{"delta": {"content": "b"}}]}\n\n'
    lines = b': comment\nevent: x\ndata: {"choices":\ndata: [{"delta": {"content": "m"}}]}\n\n'
    batches = await read(body([spaced, bare, lines, b"data: [DONE]\n\n"]))
    assert [x for b in contents(batches) for x in b] == ["s", "b", "m"]
    for bad in (b'data: {"a": 1} {"b": 2}\n\n', b'data: {"a": 1} x\n\n', b"data: \xff{}\n\n"):
        with pytest.raises(ProviderError, match="invalid stream event"):
            await read(body([bad]))
