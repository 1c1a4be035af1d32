"""``/v1/responses`` (Open Responses, SPEC 12) end to end: the real gateway and store, the
real ``openai`` client and raw aiohttp, the fake model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import openai
import pytest

from gateway.config import Config, parse_config
from tests.fakes.openai_server import Hold, Usage, ok, open_fake_model, streamed, unauthorized
from tests.harness import config_text, make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

TOKEN_A = "token-a-0123456789abcdef0123"
TOKEN_B = "token-b-fedcba9876543210fedc"


def rows(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(
            conn.execute("SELECT conversation, role, content FROM messages ORDER BY id").fetchall()
        )


def client(url: str, token: str = "none") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0)


def two_tokens(tmp_path: Path, model_url: str) -> Config:
    listen = 'listen = "127.0.0.1:0"\n'
    text = config_text(tmp_path / "b.db", model_url).replace(
        listen,
        listen
        + f'[[peer.tokens]]\ntoken = "{TOKEN_A}"\nname = "team-a"\nsessions = ["a-*"]\n'
        + f'[[peer.tokens]]\ntoken = "{TOKEN_B}"\nname = "team-b"\nsessions = ["*"]\n',
    )
    return parse_config(text, source="test", env={})


async def test_create_follow_up_retrieve_delete_with_the_openai_client(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
    ):
        fake.script(ok("Paris.", usage=Usage(11, 2)))
        c = client(url)
        first = await c.responses.create(
            model="botmux",
            input="Capital of France?",
            instructions="Answer in one word.",
            store=True,
            metadata={"ticket": "T-1"},
        )
        assert first.metadata == {"ticket": "T-1"}
        assert first.id.startswith("resp_")
        assert first.status == "completed"
        assert first.output_text == "Paris."
        assert first.output[0].type == "message"
        assert first.usage is not None
        assert (first.usage.input_tokens, first.usage.output_tokens) == (11, 2)
        assert first.usage.total_tokens == 13
        # The instructions reached the model as a system message of that call only.
        assert [(m["role"], m["content"]) for m in fake.requests[0].messages[1:]] == [
            ("system", "Answer in one word."),
            ("user", "Capital of France?"),
        ]
        second = await c.responses.create(
            model="botmux",
            input=[{"type": "message", "role": "user", "content": "And of Italy?"}],
            previous_response_id=first.id,
        )
        assert second.output_text == "echo: And of Italy?"
        assert second.previous_response_id == first.id
        # The follow-up is the same conversation: the model saw the earlier turn, not the
        # earlier call's instructions.
        assert [(m["role"], m["content"]) for m in fake.requests[1].messages[1:]] == [
            ("user", "Capital of France?"),
            ("assistant", "Paris."),
            ("user", "And of Italy?"),
        ]
        got = await c.responses.retrieve(second.id)
        assert got.id == second.id and got.status == "completed"
        assert got.output_text == "echo: And of Italy?"
        assert got.previous_response_id == first.id
        assert got.conversation is not None and got.conversation.id == second.conversation.id
        deleted = await c.responses.delete(first.id)
        assert deleted is None  # the client returns nothing for a 200 delete
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            await c.responses.delete(first.id)
        # The conversation's other turn stays, and the model no longer sees the deleted one.
        assert (await c.responses.retrieve(second.id)).output_text == "echo: And of Italy?"
        third = await c.responses.create(input="Spain?", previous_response_id=second.id)
        assert third.output_text == "echo: Spain?"
        assert [m["content"] for m in fake.requests[2].messages[1:]] == [
            "And of Italy?",
            "echo: And of Italy?",
            "Spain?",
        ]
        await c.close()
    assert [(role, content) for _, role, content in rows(db)] == [
        ("user", "And of Italy?"),
        ("assistant", "echo: And of Italy?"),
        ("user", "Spain?"),
        ("assistant", "echo: Spain?"),
    ]


async def test_retrieve_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        async with running_gateway(make_config(db, fake.base_url)) as (_, url):
            c = client(url)
            made = await c.responses.create(
                input=[
                    {"role": "developer", "content": "Be terse."},
                    {"role": "user", "content": [{"type": "input_text", "text": "remember me"}]},
                ],
                conversation="kept",
            )
            await c.close()
        async with running_gateway(make_config(db, fake.base_url)) as (_, url):
            c = client(url)
            got = await c.responses.retrieve(made.id)
            await c.close()
    assert got.output_text == "echo: remember me"
    assert got.conversation is not None and got.conversation.id == "kept"
    # The short-form items: the developer message reached the model as a system message.
    assert [(m["role"], m["content"]) for m in fake.requests[0].messages[1:]] == [
        ("system", "Be terse."),
        ("user", "remember me"),
    ]
    assert len(fake.requests) == 1


async def test_streamed_response_events_in_order(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
    ):
        fake.script(streamed("Hel", "lo ", "there", usage=Usage(5, 3)))
        c = client(url)
        stream = await c.responses.create(input="hi", stream=True)
        events = [event async for event in stream]
        got = await c.responses.retrieve(events[-1].response.id)  # type: ignore[union-attr]
        await c.close()
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == [  # type: ignore[union-attr]
        "Hel",
        "lo ",
        "there",
    ]
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.output_text == "Hello there"
    assert completed.usage is not None and completed.usage.total_tokens == 8
    assert events[0].response.id == completed.id  # type: ignore[union-attr]
    assert got.output_text == "Hello there"


async def test_a_failure_after_the_first_piece_is_response_failed(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(streamed("partial ", "answer", cut_after=1))
        r = await http.post(f"{url}/v1/responses", json={"input": "hi", "stream": True})
        assert r.status == 200
        text = await r.text()
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    names = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert names == [e["type"] for e in events]  # each event: line names its data's type
    assert [e["type"] for e in events][:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "connection"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_idempotency_key_same_body_is_the_same_response(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        headers = {"Idempotency-Key": "r-1"}
        body = {"input": "once"}
        first = await (await http.post(f"{url}/v1/responses", json=body, headers=headers)).json()
        again = await (await http.post(f"{url}/v1/responses", json=body, headers=headers)).json()
        streamed_again = await http.post(
            f"{url}/v1/responses", json={**body, "stream": True}, headers=headers
        )
        text = await streamed_again.text()
        other = await http.post(f"{url}/v1/responses", json={"input": "twice"}, headers=headers)
        other_body = await other.json()
    assert first["id"] == again["id"]
    assert again["output"][0]["content"][0]["text"] == "echo: once"
    assert first["id"] in text and "response.completed" in text
    assert other.status == 422 and other_body["error"]["code"] == "idempotency_key_reused"
    assert len(fake.requests) == 1


BAD: list[tuple[Any, int, str]] = [
    ("not json", 400, "invalid_json"),
    ([], 400, "bad_request"),
    ({}, 400, "bad_request"),
    ({"input": 5}, 400, "bad_request"),
    ({"input": ""}, 400, "bad_request"),
    ({"input": []}, 400, "bad_request"),
    ({"input": [{"role": "assistant", "content": "x"}]}, 400, "bad_request"),
    ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, 400, ""),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, 400, ""),
    ({"input": "x", "stream": "yes"}, 400, "bad_request"),
    ({"input": "x", "model": 3}, 400, "bad_request"),
    ({"input": "x", "instructions": ["a"]}, 400, "bad_request"),
    ({"input": "x", "tools": [{"type": "function", "name": "f"}]}, 400, "unsupported_parameter"),
    ({"input": "x", "background": True}, 400, "unsupported_parameter"),
    ({"input": "x", "metadata": {"k": 1}}, 400, "bad_request"),
    ({"input": "x", "conversation": "bad id!"}, 400, "bad_session_id"),
    ({"input": "x", "conversation": {"id": 7}}, 400, "bad_request"),
    ({"input": "x", "previous_response_id": "resp_1_" + "0" * 24}, 404, "not_found"),
    ({"input": "x", "previous_response_id": "resp_" + "9" * 5000}, 404, "not_found"),
    ({"input": "x", "previous_response_id": 12}, 400, "bad_request"),
    (
        {"input": "x", "previous_response_id": "resp_1_x", "conversation": "c"},
        400,
        "bad_request",
    ),
]


async def test_bad_input_is_an_openai_error_and_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        for body, status, code in BAD:
            data = body if isinstance(body, str) else json.dumps(body)
            r = await http.post(
                f"{url}/v1/responses", data=data, headers={"Content-Type": "application/json"}
            )
            error = (await r.json())["error"]
            assert r.status == status, body
            assert error["message"] and error["type"] == error["code"]
            assert not code or error["code"] == code, (body, error)
        for resp_id in ("nope", "resp_1_" + "0" * 24, "resp_" + "1" * 3000, "msg_1_" + "0" * 24):
            for method in ("GET", "DELETE"):
                r = await http.request(method, f"{url}/v1/responses/{resp_id}")
                assert r.status == 404
                assert (await r.json())["error"]["code"] == "not_found"
        c = client(url)
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(
                input="x", tools=[{"type": "function", "name": "f", "parameters": {}}]
            )
        await c.close()
    assert "tools" in str(refused.value)
    assert fake.requests == []
    assert rows(db) == []


async def test_another_tokens_responses_are_not_found(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        async with running_gateway(two_tokens(tmp_path, fake.base_url)) as (_, url):
            a, b = client(url, TOKEN_A), client(url, TOKEN_B)
            anon = await a.responses.create(input="a's own")
            named = await a.responses.create(input="a's named", conversation="a-room")
            assert (await a.responses.retrieve(anon.id)).output_text == "echo: a's own"
            # B reaches every session by its globs, yet cannot read, delete or continue A's
            # responses: their ids are minted for A's token.
            for resp_id in (anon.id, named.id):
                with pytest.raises(openai.NotFoundError):
                    await b.responses.retrieve(resp_id)
                with pytest.raises(openai.NotFoundError):
                    await b.responses.delete(resp_id)
                with pytest.raises(openai.NotFoundError):
                    await b.responses.create(input="hijack", previous_response_id=resp_id)
            # A cannot name a session outside its globs.
            with pytest.raises(openai.NotFoundError):
                await a.responses.create(input="x", conversation="b-room")
            # A can continue its own anonymous conversation.
            more = await a.responses.create(input="more", previous_response_id=anon.id)
            assert more.conversation is not None and anon.conversation is not None
            assert more.conversation.id == anon.conversation.id
            await a.close()
            await b.close()
    assert [r.last_user for r in fake.requests] == ["a's own", "a's named", "more"]


async def test_a_response_in_progress_reads_so_and_cannot_be_deleted(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(streamed("first ", "second", hold_after=1))
        c = client(url)
        stream = await c.responses.create(
            input="slow", stream=True, conversation={"id": "named-room"}
        )
        events = aiter(stream)
        created = await anext(events)
        assert created.type == "response.created"
        resp_id = created.response.id
        r = await http.get(f"{url}/v1/responses/{resp_id}")
        running = await r.json()
        assert running["status"] == "in_progress" and running["output"] == []
        assert running["conversation"] == {"id": "named-room"}
        r = await http.delete(f"{url}/v1/responses/{resp_id}")
        assert r.status == 409 and (await r.json())["error"]["code"] == "in_progress"
        fake.release_streams()
        rest = [event.type async for event in events]
        assert rest[-1] == "response.completed"
        r = await http.delete(f"{url}/v1/responses/{resp_id}")
        assert await r.json() == {"id": resp_id, "object": "response", "deleted": True}
        r = await http.get(f"{url}/api/sessions/named-room/messages")
        assert (await r.json())["messages"] == []
        await c.close()


async def test_a_failed_turn_is_an_openai_error_and_reads_as_failed(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(streamed("partial", cut_after=1))
        r = await http.post(
            f"{url}/v1/responses", json={"input": "hi", "stream": True, "conversation": "f"}
        )
        text = await r.text()
        fake.script(unauthorized())
        c = client(url)
        with pytest.raises(openai.APIStatusError) as failed:
            await c.responses.create(input="again", conversation="f")
        await c.close()
        resp_id = json.loads(text.split("data: ", 2)[1].split("\n")[0])["response"]["id"]
        stored = await (await http.get(f"{url}/v1/responses/{resp_id}")).json()
    assert failed.value.status_code == 502
    assert isinstance(failed.value.body, dict) and failed.value.body["code"] == "auth"
    assert stored["status"] == "failed" and stored["error"]["code"] == "connection"
    assert stored["output"] == []


async def test_two_nodes_on_postgres_serve_each_others_responses(
    tmp_path: Path, postgres_url: str
) -> None:
    """A response made on node A is read, continued and deleted through node B: it is rows."""

    def node(name: str) -> Config:
        cluster = f'[cluster]\nnode_id = "{name}"\nlease_s = 5\nheartbeat_s = 1\n'
        text = config_text(tmp_path / f"{name}.db", fake.base_url, store_url=postgres_url)
        return parse_config(text + cluster, source="test", env={})

    async with open_fake_model() as fake:
        async with (
            running_gateway(node("a")) as (_, url_a),
            running_gateway(node("b")) as (_, url_b),
        ):
            a, b = client(url_a), client(url_b)
            made = await a.responses.create(input="on a", conversation="shared-room")
            got = await b.responses.retrieve(made.id)
            assert got.output_text == "echo: on a" and got.status == "completed"
            more = await b.responses.create(input="on b", previous_response_id=made.id)
            assert more.output_text == "echo: on b"
            await b.responses.delete(made.id)
            with pytest.raises(openai.NotFoundError):
                await a.responses.retrieve(made.id)
            assert (await a.responses.retrieve(more.id)).previous_response_id is None
            await a.close()
            await b.close()
    assert [m["content"] for m in fake.requests[1].messages[1:]] == [
        "on a",
        "echo: on a",
        "on b",
    ]


async def test_a_stopped_turn_is_a_cancelled_response(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
        anyio.create_task_group() as tg,
    ):
        fake.script(Hold(ok("never")))
        answers: list[dict[str, Any]] = []

        async def create() -> None:
            body = {"input": "long one", "conversation": "stop-me"}
            answers.append(await (await http.post(f"{url}/v1/responses", json=body)).json())

        tg.start_soon(create)
        await fake.wait_for_requests(1)
        r = await http.post(f"{url}/api/sessions/stop-me/chat", json={"message": "/stop"})
        assert r.status == 200
    (stopped,) = answers
    assert stopped["status"] == "cancelled" and stopped["output"] == []
    assert stopped["error"]["code"] == "cancelled"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        stored = await (await http.get(f"{url}/v1/responses/{stopped['id']}")).json()
    assert stored["status"] == "cancelled" and stored["error"]["code"] == "cancelled"


async def test_the_openai_stream_helper_accumulates_the_answer(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
    ):
        fake.script(streamed("one ", "two ", "three"))
        c = client(url)
        async with c.responses.stream(model="botmux", input="count") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        await c.close()
    assert deltas == ["one ", "two ", "three"]
    assert final.output_text == "one two three" and final.status == "completed"
