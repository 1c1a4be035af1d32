"""agent/_sse.py: a streamed completion's events from the bytes as they arrive, however the
reads cut them, with the errors openai's own stream raised."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx2
import openai
import pytest

from agent import _sse

pytestmark = pytest.mark.anyio


class Body(httpx2.AsyncByteStream):
    """A response body that arrives in the given reads, then (optionally) fails."""

    def __init__(self, reads: list[bytes], fail: Exception | None = None) -> None:
        self.reads = reads
        self.fail = fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read
        if self.fail is not None:
            raise self.fail


def response(body: Body) -> httpx2.Response:
    request = httpx2.Request("POST", "http://model.test/v1/chat/completions")
    return httpx2.Response(200, stream=body, request=request)


def event(content: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def contents(batches: list[list[object]]) -> list[list[str]]:
    return [[c["choices"][0]["delta"]["content"] for c in b] for b in batches]  # type: ignore[index]


async def read(r: httpx2.Response) -> list[list[object]]:
    return [batch async for batch in _sse.batches(r)]


async def test_events_cut_anywhere_by_the_reads_come_whole_one_reads_together() -> None:
    stream = event("a") + event("b") + b": a comment\n\n" + event("c") + b"data: [DONE]\n\n"
    reads = [stream[:3], stream[3:70], stream[70:71], stream[71:]]
    batches = await read(response(Body(reads)))
    assert [x for b in contents(batches) for x in b] == ["a", "b", "c"]
    whole = await read(response(Body([stream])))
    assert contents(whole) == [["a", "b", "c"]]


async def test_crlf_line_ends_split_between_reads_and_nothing_after_done() -> None:
    stream = (event("x") + event("y")).replace(b"\n", b"\r\n")
    cut = stream.index(b"\r\n\r\n") + 1  # a read ends between a CR and its LF
    after = b"data: [DONE]\r\n\r\n" + event("never")
    batches = await read(response(Body([stream[:cut], stream[cut:], after])))
    assert [x for b in contents(batches) for x in b] == ["x", "y"]


async def test_an_error_event_and_a_cut_body_are_openais_errors() -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    with pytest.raises(openai.APIError, match="overloaded") as raised:
        await read(response(Body([event("a"), error])))
    assert raised.value.body == {"message": "overloaded", "type": "server_error"}
    cut = Body([event("a")], fail=httpx2.ReadError("connection reset"))
    with pytest.raises(openai.APIConnectionError):
        await read(response(cut))
    slow = Body([event("a")], fail=httpx2.ReadTimeout("read timed out"))
    with pytest.raises(openai.APITimeoutError):
        await read(response(slow))
