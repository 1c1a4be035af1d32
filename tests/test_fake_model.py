"""Self-tests of the fake model, with no botmux code involved.

The overlap record, which the cluster tests rely on: two calls of one session overlap when
both clients were waiting at once, not when the first had hung up before the second was sent
(however late this server reads the hang-up). Then, through the real ``openai`` client, what
the streaming tests rely on: deltas reach the client while the fake still writes, usage is
what was scripted, a cut stream is the client's connection error, and each request's content
parts, ``max_tokens`` and ``response_format`` are recorded."""

from __future__ import annotations

import socket
import time
from typing import Any

import aiohttp
import anyio
import openai
import pytest

from tests.fakes.openai_server import (
    FakeModel,
    Hold,
    Usage,
    bench_stream,
    ok,
    open_fake_model,
    streamed,
    streamed_text,
    word_usage,
)

pytestmark = pytest.mark.anyio


def body(text: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


async def test_two_waiting_clients_of_one_session_overlap() -> None:
    async with open_fake_model() as fake, aiohttp.ClientSession() as http:
        fake.script(Hold(), Hold())
        url = f"{fake.base_url}/chat/completions"

        async def call(text: str) -> None:
            async with http.post(url, json=body(text)) as r:
                assert r.status == 200

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "s#1")
            await fake.wait_for_requests(1)
            tg.start_soon(call, "s#2")
            await fake.wait_for_requests(2)
            fake.release()
    assert [
        (late.last_user, [r.last_user for r in running]) for late, running in fake.overlaps
    ] == [("s#2", ["s#1"])]


async def test_a_call_whose_client_hung_up_first_is_no_overlap() -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(), Hold())
        host, port = fake.base_url.removeprefix("http://").split("/")[0].split(":")
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 58\r\n\r\n{"model":"m","messages":[{"role":"user","content":"s#1"}]}'
        )
        with (
            socket.create_connection((host, int(port))) as first,
            socket.create_connection((host, int(port))) as second,
        ):
            first.sendall(request)
            await fake.wait_for_requests(1)
            # The first client hangs up, and the second call arrives before this server has
            # read the hang-up (a busy loop: here, reading is paused on the first connection).
            ((_, held),) = fake.in_flight["all"]
            assert held.transport is not None
            held.transport.pause_reading()
            first.shutdown(socket.SHUT_RDWR)
            second.sendall(request.replace(b"s#1", b"s#2"))
            with anyio.fail_after(5):
                await fake.wait_for_requests(2)
            assert len(fake.in_flight["all"]) == 2  # the first is still running here
            fake.release()
    assert fake.overlaps == []


# -- streaming, usage and what a request carried, seen through the real openai client -------


def client(fake: FakeModel, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0, **options)


USER = [{"role": "user", "content": "hi there"}]


async def test_a_held_stream_delivers_its_first_deltas_while_the_model_still_writes() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        fake.script(streamed("one ", "two ", "three", hold_after=2))
        with anyio.fail_after(10):
            stream = await api.chat.completions.create(model="m", messages=USER, stream=True)
            deltas = aiter(stream)
            got = [(await anext(deltas)).choices[0].delta.content for _ in range(2)]
            # Both arrived while the fake holds the response open before the third chunk.
            assert got == ["one ", "two "]
            assert [c.text for c in fake.chunks_sent] == ["one ", "two "]
            assert fake.streams_done == []
            fake.release_streams()
            rest = [c async for c in deltas]
    assert [c.choices[0].delta.content for c in rest] == ["three", None]
    assert rest[-1].choices[0].finish_reason == "stop"
    assert fake.streams_done == [0]


async def test_scripted_delays_hold_the_response_open_between_chunks() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        fake.script(streamed_text("abcdef", 3, interval_s=0.2))
        arrived: list[tuple[str, float]] = []
        with anyio.fail_after(10):
            stream = await api.chat.completions.create(model="m", messages=USER, stream=True)
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    arrived.append((chunk.choices[0].delta.content, time.monotonic()))
    assert [text for text, _ in arrived] == ["ab", "cd", "ef"]
    written = [c.at for c in fake.chunks_sent]
    # The first delta reached the client before the fake had even written the last chunk.
    assert arrived[0][1] < written[-1]


async def test_include_usage_sends_a_last_chunk_with_the_scripted_counts() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        fake.script(streamed("a", "b", usage=Usage(11, 7)))
        with anyio.fail_after(10):
            stream = await api.chat.completions.create(
                model="m", messages=USER, stream=True, stream_options={"include_usage": True}
            )
            chunks = [c async for c in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (11, 7)
    assert chunks[-1].usage.total_tokens == 18
    assert all(c.usage is None for c in chunks[:-1])
    assert fake.requests[0].include_usage


async def test_a_stream_without_include_usage_has_no_usage_chunk() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        with anyio.fail_after(10):
            stream = await api.chat.completions.create(model="m", messages=USER, stream=True)
            chunks = [c async for c in stream]
    assert all(c.choices and c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: hi there"


async def test_plain_replies_carry_scripted_or_deterministic_usage() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        fake.script(ok("scripted", usage=Usage(40, 9)))
        with anyio.fail_after(10):
            scripted = await api.chat.completions.create(model="m", messages=USER)
            default = await api.chat.completions.create(model="m", messages=USER)
            fake.usage_of = word_usage
            counted = await api.chat.completions.create(model="m", messages=USER)
            fake.script(streamed("x y", " z"))  # a Stream for a plain request: one reply
            joined = await api.chat.completions.create(model="m", messages=USER)
    usages = [r.usage for r in (scripted, default, counted, joined)]
    assert [(u.prompt_tokens, u.completion_tokens, u.total_tokens) for u in usages if u] == [
        (40, 9, 49),
        (3, 2, 5),
        (2, 3, 5),  # words of "hi there"; of "echo: hi there"
        (2, 3, 5),
    ]
    assert joined.choices[0].message.content == "x y z"


async def test_an_enforced_context_limit_refuses_as_openai_and_counts_prompt_tokens() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        fake.enforce_context(100)  # characters / 4, plus max_tokens
        system = {"role": "system", "content": "s" * 40}  # 10 tokens
        with anyio.fail_after(10):
            fits = await api.chat.completions.create(
                model="m", messages=[system, {"role": "user", "content": "u" * 161}], max_tokens=49
            )  # 10 + 41 + 49 = 100: at the limit
            with pytest.raises(openai.BadRequestError) as refused:
                await api.chat.completions.create(
                    model="m",
                    messages=[system, {"role": "user", "content": "u" * 161}],
                    max_tokens=50,
                )
    assert fits.usage is not None and fits.usage.prompt_tokens == 51
    assert refused.value.status_code == 400 and refused.value.code == "context_length_exceeded"
    assert refused.value.type == "invalid_request_error"
    assert fake.overflowed == [1] and len(fake.requests) == 2


@pytest.mark.parametrize("http_client", ["httpx", "aiohttp"])
async def test_a_stream_cut_after_n_chunks_raises_the_clients_connection_error(
    http_client: str,
) -> None:
    async with open_fake_model() as fake:
        options = {} if http_client == "httpx" else {"http_client": openai.DefaultAioHttpClient()}
        async with client(fake, **options) as api:
            fake.script(streamed("1", "2", "3", "4", "5", cut_after=3))
            got: list[str | None] = []
            with anyio.fail_after(10), pytest.raises(openai.APIConnectionError):
                stream = await api.chat.completions.create(model="m", messages=USER, stream=True)
                async for chunk in stream:
                    got.append(chunk.choices[0].delta.content)
    assert got == ["1", "2", "3"]
    assert fake.streams_cut == [0]


async def test_each_request_records_its_parts_max_tokens_and_response_format() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    async with open_fake_model() as fake, client(fake) as api:
        with anyio.fail_after(10):
            await api.chat.completions.create(
                model="m",
                messages=[
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": [{"type": "text", "text": "what?"}, image]},
                ],
                max_tokens=123,
                response_format={"type": "json_object"},
            )
            await api.chat.completions.create(model="m", messages=USER)
    first, second = fake.requests
    assert first.content_parts == [
        {"type": "text", "text": "be brief"},
        {"type": "text", "text": "what?"},
        image,
    ]
    assert (first.max_tokens, first.response_format) == (123, {"type": "json_object"})
    assert (second.max_tokens, second.response_format, second.tools) == (None, None, None)


async def test_fifty_concurrent_streams_each_get_every_chunk_in_order() -> None:
    async with open_fake_model() as fake, client(fake) as api:
        fake.default = lambda r: bench_stream(10, 0.01)

        async def one(i: int, texts: dict[int, str]) -> None:
            messages = [{"role": "user", "content": f"u{i}"}]
            stream = await api.chat.completions.create(model="m", messages=messages, stream=True)
            texts[i] = "".join([c.choices[0].delta.content or "" async for c in stream])

        texts: dict[int, str] = {}
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i, texts)
    assert texts == {i: "".join(f"w{k} " for k in range(10)) for i in range(50)}
    assert sorted(fake.streams_done) == list(range(50))
    assert fake.max_concurrency["all"] > 1  # they really overlapped
    for i, request in enumerate(fake.requests):
        first = fake.first_chunk(i)
        assert first is not None and first.index == 0 and first.at >= request.started
