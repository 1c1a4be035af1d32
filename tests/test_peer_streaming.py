"""Streaming through the peer API (SPEC 8) and the OpenAI-compatible route as clients see it
(SPEC 5): the real ``openai`` client and raw SSE against the real gateway and the fake model,
which holds its stream open between chunks (``hold_after``), so a relay that buffers the whole
answer cannot pass."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import aiohttp
import anyio
import openai
import pytest

from tests.fakes.openai_server import Usage, ok, open_fake_model, streamed
from tests.harness import FAST, fallback, make_config, running_gateway
from tests.support.sse import sse_events

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)


def rows(db: Path) -> list[tuple[str, str, str, str | None]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, content, state, failure FROM messages ORDER BY id"))


async def test_the_openai_client_gets_deltas_while_the_model_still_writes(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        client(url) as oai,
    ):
        fake.script(streamed("one ", "two ", "three ", "four ", "five", hold_after=3))
        stream = await oai.chat.completions.create(
            model="botmux",
            messages=[{"role": "user", "content": "count"}],
            stream=True,
            user="counter",
        )
        pieces: list[str] = []
        chunks = aiter(stream)
        while len(pieces) < 3:
            chunk = await anext(chunks)
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        # Three deltas arrived while the model holds its stream open: relayed, not buffered.
        assert pieces == ["one ", "two ", "three "]
        assert fake.streams_done == []
        fake.release_streams()
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        assert "".join(pieces) == "one two three four five"
    assert fake.requests[0].stream and fake.requests[0].include_usage


async def test_the_sse_chat_route_sends_deltas_then_the_message(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(streamed("Hel", "lo ", "the", "re", hold_after=2))
        body = {"message": "hi", "stream": True}
        async with http.post(f"{url}/api/sessions/s1/chat", json=body) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "text/event-stream"
            events = sse_events(r)
            first = [await anext(events), await anext(events)]
            assert first == [("delta", {"content": "Hel"}), ("delta", {"content": "lo "})]
            assert fake.streams_done == []  # the model is still writing
            fake.release_streams()
            rest = [e async for e in events]
        assert rest == [
            ("delta", {"content": "the"}),
            ("delta", {"content": "re"}),
            (
                "message",
                {
                    "session_id": "s1",
                    "message": {"role": "assistant", "content": "Hello there"},
                    "failure": None,
                },
            ),
        ]
        # Accept: text/event-stream asks for the same; the answer is in the transcript.
        fake.script(streamed("a", "b"))
        headers = {"Accept": "text/event-stream"}
        async with http.post(
            f"{url}/api/sessions/s1/chat", json={"message": "again"}, headers=headers
        ) as r:
            names = [name async for name, _ in sse_events(r)]
        assert names == ["delta", "delta", "message"]
        async with http.get(f"{url}/api/sessions/s1/messages") as r:
            transcript = (await r.json())["messages"]
    assert [m["content"] for m in transcript] == ["hi", "Hello there", "again", "ab"]


async def test_a_cut_before_anything_was_shown_falls_back_to_one_answer(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        config = make_config(
            db, fake.base_url, model="gpt-primary", model_extra=FAST + fallback(fake.base_url)
        )
        async with (
            running_gateway(config) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            # The plain chat route: the model is not streamed to, and its cut after 3 chunks
            # is a connection failure like any other (retry, recover, fall back).
            cut = streamed("a", "b", "c", "d", cut_after=3)
            fake.script(cut, cut, model="gpt-primary")
            fake.script(ok("from the fallback"), model="gpt-fallback")
            r = await http.post(f"{url}/api/sessions/p/chat", json={"message": "q1"})
            assert (await r.json())["message"]["content"] == "from the fallback"
            # Streamed, cut before its first chunk: nothing reached the client, so the policy
            # is free to fall back, and the client sees the fallback's answer only.
            early = streamed("x", "y", cut_after=0)
            fake.script(early, early, model="gpt-primary")
            fake.script(streamed("fall", "back"), model="gpt-fallback")
            body = {"message": "q2", "stream": True}
            async with http.post(f"{url}/api/sessions/p/chat", json=body) as r:
                events = [e async for e in sse_events(r)]
    assert events == [
        ("delta", {"content": "fall"}),
        ("delta", {"content": "back"}),
        (
            "message",
            {
                "session_id": "p",
                "message": {"role": "assistant", "content": "fallback"},
                "failure": None,
            },
        ),
    ]
    assert [r.model for r in fake.requests] == ["gpt-primary"] * 2 + ["gpt-fallback"] + [
        "gpt-primary"
    ] * 2 + ["gpt-fallback"]
    assert [(role, content, failure) for role, content, _, failure in rows(db)] == [
        ("user", "q1", None),
        ("assistant", "from the fallback", None),
        ("user", "q2", None),
        ("assistant", "fallback", None),
    ]


async def test_a_cut_after_deltas_reached_the_client_ends_the_turn_failed(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        config = make_config(
            db, fake.base_url, model="gpt-primary", model_extra=FAST + fallback(fake.base_url)
        )
        async with (
            running_gateway(config) as (app, url),
            aiohttp.ClientSession() as http,
        ):
            fake.script(streamed("one ", "two ", "three ", "four", cut_after=3))
            body = {"message": "q", "stream": True}
            async with http.post(f"{url}/api/sessions/c/chat", json=body) as r:
                events = [e async for e in sse_events(r)]
            # The same on /v1/chat/completions: the final event is an error naming the class.
            fake.script(streamed("uno ", "dos ", "tres", cut_after=2))
            async with client(url) as oai:
                stream = await oai.chat.completions.create(
                    model="botmux", messages=[{"role": "user", "content": "q"}], stream=True
                )
                pieces: list[str] = []
                with pytest.raises(openai.APIError) as raised:
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            pieces.append(chunk.choices[0].delta.content)
            decisions = app.metrics.decisions
            assert decisions.labels("give_up", "connection")._value.get() == 2
            assert decisions.labels("fallback", "connection")._value.get() == 0
    assert [e[0] for e in events] == ["delta"] * 3 + ["message"]
    final = events[-1][1]
    assert final["failure"] == {"reason": "connection", "retryable": True}
    assert "one two three" not in final["message"]["content"]
    assert pieces == ["uno ", "dos "]
    assert raised.value.body is not None and "connection" in json.dumps(raised.value.body)
    # No retry, no fallback, no re-run after text was shown: one model call per turn.
    assert [r.model for r in fake.requests] == ["gpt-primary", "gpt-primary"]
    assert [(role, failure) for role, _, _, failure in rows(db)][:2] == [
        ("user", None),
        ("assistant", "connection"),
    ]


async def test_a_client_that_hangs_up_mid_stream_still_gets_its_answer_stored(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(streamed("still ", "answered ", "in ", "full", hold_after=2))
        body = {"message": "bye", "stream": True}
        async with http.post(f"{url}/api/sessions/gone/chat", json=body) as r:
            events = sse_events(r)
            assert (await anext(events))[0] == "delta"
            r.close()  # the client hangs up mid-stream
        fake.release_streams()
        with anyio.fail_after(10):
            await fake.wait_for_completed(1)
            while len(rows(db)) < 2:  # noqa: ASYNC110 - the commit follows the model's end
                await anyio.sleep(0.01)
        async with http.get(f"{url}/api/sessions/gone/messages") as r:
            transcript = (await r.json())["messages"]
    assert [(m["role"], m["content"], m["state"]) for m in transcript] == [
        ("user", "bye", "answered"),
        ("assistant", "still answered in full", "final"),
    ]


async def test_an_idempotency_key_repeat_of_a_streamed_turn_gets_the_stored_answer(
    tmp_path: Path,
) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(streamed("once ", "only"))
        body = {"message": "k", "stream": True}
        headers = {"Idempotency-Key": "key-1"}
        answers = []
        for _ in range(2):
            async with http.post(f"{url}/api/sessions/i/chat", json=body, headers=headers) as r:
                answers.append([e async for e in sse_events(r)])
    assert [name for name, _ in answers[0]] == ["delta", "delta", "message"]
    assert answers[1] == [answers[0][-1]]  # the stored answer, no second turn
    assert answers[1][0][1]["message"]["content"] == "once only"
    assert len(fake.requests) == 1


async def test_usage_is_the_models_own_plain_and_streamed(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        client(url) as oai,
    ):
        fake.script(ok("plain answer", usage=Usage(11, 7)))
        reply = await oai.chat.completions.create(
            model="botmux", messages=[{"role": "user", "content": "a"}], user="u"
        )
        assert reply.usage is not None
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 7)
        assert reply.usage.total_tokens == 18
        fake.script(streamed("str", "eamed", usage=Usage(13, 5)))
        stream = await oai.chat.completions.create(
            model="botmux",
            messages=[{"role": "user", "content": "b"}],
            user="u",
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        last = chunks[-1]
        assert last.choices == [] and last.usage is not None
        assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (13, 5)
        assert all(c.usage is None for c in chunks[:-1])
        # Without include_usage: no usage chunk.
        fake.script(streamed("x"))
        stream = await oai.chat.completions.create(
            model="botmux", messages=[{"role": "user", "content": "c"}], user="u", stream=True
        )
        assert all(c.choices for c in [c async for c in stream])
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/api/sessions/u/messages") as r:
                transcript = (await r.json())["messages"]
            async with http.get(f"{url}/metrics") as r:
                metrics = await r.text()
    usage = [m.get("usage") for m in transcript if m["role"] == "assistant"]
    assert usage[:2] == [
        {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        {"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18},
    ]
    with sqlite3.connect(db) as conn:
        stored = list(
            conn.execute(
                "SELECT prompt_tokens, completion_tokens FROM messages WHERE role = 'assistant'"
                " ORDER BY id"
            )
        )
    assert stored[:2] == [(11, 7), (13, 5)]
    # 11 + 13 + the default 3 of the fake's third answer; 7 + 5 + 2.
    assert 'botmux_model_tokens_total{kind="prompt",model="gpt-test"} 27.0' in metrics
    assert 'botmux_model_tokens_total{kind="completion",model="gpt-test"} 14.0' in metrics
    assert 'botmux_first_token_seconds_count{platform="peer"} 2.0' in metrics


async def test_tools_are_refused_response_format_passed_and_the_model_served(
    tmp_path: Path,
) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        client(url) as oai,
    ):
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        with pytest.raises(openai.BadRequestError) as refused:
            await oai.chat.completions.create(
                model="botmux",
                messages=[{"role": "user", "content": "use a tool"}],
                tools=[tool],  # type: ignore[list-item]
            )
        assert refused.value.code == "unsupported_parameter"
        assert refused.value.param == "tools"
        assert "tools" in refused.value.message
        with pytest.raises(openai.BadRequestError) as refused:
            await oai.chat.completions.create(
                model="botmux",
                messages=[{"role": "user", "content": "x"}],
                tool_choice="none",
            )
        assert refused.value.param == "tool_choice"
        assert fake.requests == []  # refused before anything was stored or sent
        fake.script(ok('{"a": 1}'))
        reply = await oai.chat.completions.create(
            model="botmux",
            messages=[{"role": "user", "content": "json please"}],
            response_format={"type": "json_object"},
        )
        assert reply.choices[0].message.content == '{"a": 1}'
        assert fake.requests[0].response_format == {"type": "json_object"}
        model = await oai.models.retrieve("botmux")
        assert (model.id, model.owned_by) == ("botmux", "botmux")
        with pytest.raises(openai.NotFoundError):
            await oai.models.retrieve("gpt-4o")


async def test_with_agent_stream_off_the_model_is_not_streamed_to(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        config = make_config(tmp_path / "b.db", fake.base_url, extra="[agent]\nstream = false\n")
        async with (
            running_gateway(config) as (_, url),
            aiohttp.ClientSession() as http,
            client(url) as oai,
        ):
            body = {"message": "whole", "stream": True}
            async with http.post(f"{url}/api/sessions/o/chat", json=body) as r:
                events = [e async for e in sse_events(r)]
            stream = await oai.chat.completions.create(
                model="botmux", messages=[{"role": "user", "content": "v1"}], stream=True
            )
            pieces = [c.choices[0].delta.content async for c in stream if c.choices]
    assert [name for name, _ in events] == ["message"]
    assert events[0][1]["message"]["content"] == "echo: whole"
    assert [p for p in pieces if p] == ["echo: v1"]  # the whole answer in one chunk
    assert [r.stream for r in fake.requests] == [False, False]
