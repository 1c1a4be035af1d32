"""The peer HTTP API end to end: real gateway, real store, real HTTP, the fake model."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import aiohttp
import anyio
import openai
import pytest

from gateway.config_peer import PeerToken
from gateway.router import RouterStatistics
from tests.fakes.openai_server import Hold, ok, open_fake_model, unauthorized
from tests.harness import make_config, running_gateway
from tests.support.clocks import ShiftedClock

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def rows(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT role, content, state FROM messages ORDER BY id"))


async def test_chat_round_trip_stores_both_rows(tmp_path: Path) -> None:
    db = tmp_path / "botmux.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        r = await http.post(f"{url}/api/sessions/alice/chat", json={"message": "hi there"})
        body = await r.json()
        assert r.status == 200
        assert body == {
            "session_id": "alice",
            "message": {"role": "assistant", "content": "echo: hi there"},
            "failure": None,
        }
        r = await http.get(f"{url}/api/sessions/alice/messages")
        transcript = (await r.json())["messages"]
    assert [(m["role"], m["content"], m["state"]) for m in transcript] == [
        ("user", "hi there", "answered"),
        ("assistant", "echo: hi there", "final"),
    ]
    assert transcript[0]["created_at"].endswith("Z")
    assert rows(db) == [("user", "hi there", "answered"), ("assistant", "echo: hi there", "final")]
    # The response is the delivery: the answer's commit stored the chunk delivered.
    with sqlite3.connect(db) as conn:
        chunks = list(conn.execute("SELECT state, platform_message_id FROM outbox"))
    assert chunks == [("delivered", "http:1")]
    # The model saw the system prompt and the message once, with the configured key.
    (request,) = fake.requests
    assert request.api_key == "sk-test-key-0001"
    assert [m["role"] for m in request.messages] == ["system", "user"]


async def test_history_is_sent_and_the_pending_row_only_once(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
    ):
        async with aiohttp.ClientSession() as http:
            for text in ("one", "two", "three"):
                r = await http.post(f"{url}/api/sessions/s/chat", json={"message": text})
                assert r.status == 200
    last = fake.requests[-1].messages
    assert [(m["role"], m["content"]) for m in last[1:]] == [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two"),
        ("assistant", "echo: two"),
        ("user", "three"),
    ]


async def test_one_session_is_serial_in_arrival_order_while_others_run_in_parallel(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
    ):
        fake.session_of = lambda r: r.last_user.split("#")[0]
        fake.default = lambda r: Hold(ok(f"re {r.last_user}"))
        results: dict[str, list[str]] = {}
        async with aiohttp.ClientSession() as http:

            async def send(session: str, i: int) -> None:
                r = await http.post(
                    f"{url}/api/sessions/{session}/chat", json={"message": f"{session}#{i}"}
                )
                assert r.status == 200
                results.setdefault(session, []).append((await r.json())["message"]["content"])

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(send, "busy", i)
                for other in ("a", "b", "c"):
                    tg.start_soon(send, other, 0)
                # One turn of "busy" and one of each other session are in the model at once.
                await fake.wait_for_requests(4)
                fake.release()
    assert fake.max_concurrency["busy"] == 1
    assert all(fake.max_concurrency[s] == 1 for s in "abc")
    assert len(fake.requests) == 23
    # Turns ran in admission order: the model saw busy's messages in stored-row order.
    with sqlite3.connect(db) as conn:
        stored = [
            c
            for (c,) in conn.execute(
                "SELECT content FROM messages WHERE conversation = 'peer:busy' AND role = 'user'"
                " ORDER BY id"
            )
        ]
    seen = [r.last_user for r in fake.requests if r.last_user.startswith("busy#")]
    assert seen == stored and len(stored) == 20
    transcript_order = [f"re {t}" for t in stored]
    with sqlite3.connect(db) as conn:
        answers = [
            c
            for (c,) in conn.execute(
                "SELECT content FROM messages WHERE conversation = 'peer:busy'"
                " AND role = 'assistant' ORDER BY id"
            )
        ]
    assert answers == transcript_order
    assert sorted(results["busy"]) == sorted(transcript_order)


async def test_idempotency_key_repeat_runs_no_second_turn(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        headers = {"Idempotency-Key": "req-1"}
        first = await http.post(
            f"{url}/api/sessions/k/chat", json={"message": "hello"}, headers=headers
        )
        again = await http.post(
            f"{url}/api/sessions/k/chat", json={"message": "hello"}, headers=headers
        )
        assert (await first.json()) == (await again.json())
        # The key is scoped to its conversation: another session runs its own turn.
        other = await http.post(
            f"{url}/api/sessions/k2/chat", json={"message": "hello"}, headers=headers
        )
        assert other.status == 200
    assert len(fake.requests) == 2
    assert len([r for r in rows(db) if r[0] == "user"]) == 2


async def test_concurrent_repeats_of_one_key_share_one_turn(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
    ):
        fake.default = lambda r: Hold(ok("only once"))
        bodies = []
        async with aiohttp.ClientSession() as http:

            async def send() -> None:
                r = await http.post(
                    f"{url}/api/sessions/k/chat",
                    json={"message": "hello"},
                    headers={"Idempotency-Key": "same"},
                )
                bodies.append(await r.json())

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(send)
                await fake.wait_for_requests(1)
                await anyio.wait_all_tasks_blocked()
                fake.release()
    assert len(fake.requests) == 1
    assert [b["message"]["content"] for b in bodies] == ["only once"] * 3


async def test_openai_client_uses_botmux_as_its_model(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
    ):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        async with client:
            models = await client.models.list()
            assert [m.id for m in models.data] == ["botmux"]
            reply = await client.chat.completions.create(
                model="botmux",
                messages=[
                    {"role": "system", "content": "ignored: botmux keeps its own context"},
                    {"role": "user", "content": "first"},
                ],
                extra_headers={"X-Botmux-Session": "ocli"},
            )
            assert reply.choices[0].message.content == "echo: first"
            stream = await client.chat.completions.create(
                model="botmux",
                messages=[{"role": "user", "content": "second"}],
                stream=True,
                user="ocli",
            )
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            assert "".join(pieces) == "echo: second"
    # Both requests landed in one conversation, peer:ocli, and the second saw the first.
    assert [m["content"] for m in fake.requests[1].messages[1:]] == [
        "first",
        "echo: first",
        "second",
    ]
    with sqlite3.connect(db) as conn:
        assert {c for (c,) in conn.execute("SELECT DISTINCT conversation FROM messages")} == {
            "peer:ocli"
        }


async def test_failed_turn_reports_its_class_and_is_not_raw(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
    ):
        fake.script(unauthorized())
        async with aiohttp.ClientSession() as http:
            r = await http.post(f"{url}/api/sessions/x/chat", json={"message": "hi"})
            body = await r.json()
    assert r.status == 200
    assert body["failure"] == {"reason": "auth", "retryable": False}
    assert "api key" in body["message"]["content"].lower()
    assert "sk-" not in body["message"]["content"]
    assert "Incorrect API key provided" not in body["message"]["content"]


async def test_no_model_configured_answers_how_to_configure(tmp_path: Path) -> None:
    async with running_gateway(make_config(tmp_path / "b.db", None)) as (_, url):
        async with aiohttp.ClientSession() as http:
            r = await http.post(f"{url}/api/sessions/x/chat", json={"message": "hi"})
            body = await r.json()
    assert "OPENAI_API_KEY" in body["message"]["content"]
    assert body["failure"]["reason"] == "model_not_found"


BAD_INPUTS = [
    ("POST", "/api/sessions/ok/chat", b"{not json", {}, 400),
    ("POST", "/api/sessions/ok/chat", b'{"message": 5}', {}, 400),
    ("POST", "/api/sessions/ok/chat", b'["message"]', {}, 400),
    ("POST", "/api/sessions/ok/chat", b'{"message": ""}', {}, 400),
    ("POST", "/api/sessions/ok/chat", b'{"message": "x", "extra": 1}', {}, 400),
    ("POST", "/api/sessions/ok/chat", b'{"message": "\\ud800"}', {}, 400),
    ("POST", "/api/sessions/ok/chat", b"\xff\xfe", {}, 400),
    ("POST", "/api/sessions/bad%20id/chat", b'{"message": "x"}', {}, 400),
    ("POST", "/api/sessions/" + "a" * 129 + "/chat", b'{"message": "x"}', {}, 400),
    ("GET", "/api/sessions/bad!id/messages", b"", {}, 400),
    ("POST", "/api/sessions/ok/chat", b'{"message": "x"}', {"Idempotency-Key": "a b"}, 400),
    (
        "POST",
        "/api/sessions/ok/chat",
        json.dumps({"message": "x" * (1024 * 1024)}).encode(),
        {},
        413,
    ),
    ("POST", "/v1/chat/completions", b'{"messages": []}', {}, 400),
    (
        "POST",
        "/v1/chat/completions",
        b'{"messages": [{"role": "system", "content": "x"}]}',
        {},
        400,
    ),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": 3}]}', {}, 400),
    (
        "POST",
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
        {},
        400,
    ),
    (
        "POST",
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}]}',
        {"X-Botmux-Session": "no spaces"},
        400,
    ),
    ("GET", "/nope", b"", {}, 404),
    ("DELETE", "/api/sessions/ok/chat", b"", {}, 405),
]


async def test_bad_input_gets_a_json_error_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        for method, path, data, headers, status in BAD_INPUTS:
            r = await http.request(
                method,
                url + path,
                data=io.BytesIO(data),
                headers={"Content-Type": "application/json", **headers},
            )
            assert r.status == status, (method, path, data[:60], await r.text())
            body = await r.json()
            assert body["error"]["message"], path
    assert fake.requests == []
    assert rows(db) == []


async def test_bearer_tokens_guard_every_route_but_the_probes(tmp_path: Path) -> None:
    config = make_config(tmp_path / "b.db", None, extra="")
    config = type(config)(
        **{
            **{f: getattr(config, f) for f in config.__dataclass_fields__},
            "peer": type(config.peer)(
                listen="127.0.0.1:0", tokens=(PeerToken.plain("s3cret-token"),)
            ),
        }
    )
    async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz"):
            assert (await http.get(url + path)).status == 200
        for method, path in (
            ("GET", "/metrics"),
            ("GET", "/v1/models"),
            ("GET", "/api/sessions/a/messages"),
        ):
            r = await http.request(method, url + path)
            assert r.status == 401
            assert (await r.json())["error"]["code"] == "unauthorized"
            r = await http.request(method, url + path, headers={"Authorization": "Bearer wrong"})
            assert r.status == 401
            r = await http.request(
                method, url + path, headers={"Authorization": "Bearer s3cret-token"}
            )
            assert r.status == 200, path


async def test_idle_actors_are_evicted_and_come_back_with_their_history(tmp_path: Path) -> None:
    clock = ShiftedClock()
    async with open_fake_model() as fake:
        config = make_config(
            tmp_path / "b.db", fake.base_url, extra="[gateway]\nidle_evict_s = 60\n"
        )
        async with (
            running_gateway(config, clock=clock) as (app, url),
            aiohttp.ClientSession() as http,
        ):
            assert app.router is not None
            for session in ("e1", "e2"):
                r = await http.post(f"{url}/api/sessions/{session}/chat", json={"message": "first"})
                assert r.status == 200
            assert app.router.statistics().live == 2
            assert app.router.evict_idle() == 0  # not idle long enough
            # The replies went out before the turns recorded their delivery; no event marks the
            # end of that, so look until both actors are idle.
            with anyio.fail_after(5):
                while any(  # noqa: ASYNC110
                    a.idle_since is None
                    for a in (app.router.get("peer:e1"), app.router.get("peer:e2"))
                    if a
                ):
                    await anyio.sleep(0.01)
            clock.offset += 61
            assert app.router.evict_idle() == 2
            await anyio.wait_all_tasks_blocked()
            assert app.router.statistics() == RouterStatistics(
                spawned=2, evicted=2, crashed=0, store_failures=0, lost=0, live=0
            )
            r = await http.post(f"{url}/api/sessions/e1/chat", json={"message": "second"})
            assert (await r.json())["message"]["content"] == "echo: second"
            assert app.router.statistics().spawned == 3
    # The fresh actor rebuilt the history from the store.
    assert [m["content"] for m in fake.requests[-1].messages[1:]] == [
        "first",
        "echo: first",
        "second",
    ]
