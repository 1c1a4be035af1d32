"""Tool progress and approvals on the peer API (SPEC 15), as a client sees them with aiohttp:
a whole gateway with an in-process toolbox (tests/fakes/toolbox.py) and the fake model
scripted to call tools. The chat stream's ``event: tool`` and ``event: approval``; the
approvals route (approve, deny, answered twice, unknown calls, another token's session);
routes that cannot ask are offered no tool that needs a yes; a restart while a call waits
keeps the wait, and the answer after it resumes the turn once."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import openai
import pytest

from tests.fakes.openai_server import calls, ok, open_fake_model, server_error
from tests.fakes.toolbox import RecordingToolBox, tool
from tests.harness import FAST, make_config, running_gateway
from tests.support.sse import sse_events

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

TOOLS = '[agent]\ntools = ["*"]\n'
TOKEN_A = "token-a-0123456789abcdef0123"
TOKEN_B = "token-b-fedcba9876543210fedc"
TOKENS = (
    f'[[peer.tokens]]\ntoken = "{TOKEN_A}"\nname = "team-a"\nsessions = ["a-*"]\n'
    f'[[peer.tokens]]\ntoken = "{TOKEN_B}"\nname = "team-b"\nsessions = ["b-*"]\n'
)
STREAM = {"stream": True}


def box() -> RecordingToolBox:
    """A search that needs no yes, a push that does, and a lookup whose result is an error."""
    return RecordingToolBox().add(
        tool("docs__search", lambda a: f"found: {a['text']}"),
        tool("git__push", lambda a: f"pushed {a['text']}", approval=True),
        tool("db__lookup", lambda a: "no such table", error=True),
    )


def offered(request_tools: list[dict[str, Any]] | None) -> list[str]:
    return sorted(t["function"]["name"] for t in request_tools or [])


def tool_rows(db: Path) -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(db) as conn:
        return list(
            conn.execute(
                "SELECT call_id, state, decided_by FROM messages WHERE role = 'tool' ORDER BY id"
            )
        )


async def until(events: AsyncIterator[tuple[str, Any]], name: str) -> list[tuple[str, Any]]:
    """The events up to and including the first one named ``name`` (at most 10 s)."""
    seen: list[tuple[str, Any]] = []
    with anyio.fail_after(10):
        async for event in events:
            seen.append(event)
            if event[0] == name:
                return seen
    raise AssertionError(f"the stream ended without {name}: {seen}")


async def answer(
    http: aiohttp.ClientSession,
    url: str,
    session: str,
    call_id: str,
    approve: Any,
    token: str = "",
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.post(
        f"{url}/api/sessions/{session}/approvals/{call_id}",
        json={"approve": approve},
        headers=headers,
    ) as r:
        return r.status, await r.json()


async def test_the_stream_sends_each_tool_call_as_it_changes_state(tmp_path: Path) -> None:
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, extra=TOOLS), tools=tools
        ) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(
            calls(("docs__search", {"text": "anyio"}), ("db__lookup", {"text": "t"})),
            ok("anyio is a library"),
        )
        body = {"message": "what is anyio?", **STREAM}
        async with http.post(f"{url}/api/sessions/s1/chat", json=body) as r:
            events = [e async for e in sse_events(r)]
    tool_events = [data for name, data in events if name == "tool"]
    by_call = {
        call: [(e["state"], e.get("error", False)) for e in tool_events if e["call_id"] == call]
        for call in ("call_1", "call_2")
    }
    assert by_call == {
        "call_1": [("started", False), ("finished", False)],
        "call_2": [("started", False), ("finished", True)],
    }
    assert {e["tool"] for e in tool_events if e["call_id"] == "call_1"} == {"docs__search"}
    assert [name for name, _ in events if name not in ("tool", "delta")] == ["message"]
    assert events[-1] == (
        "message",
        {
            "session_id": "s1",
            "message": {"role": "assistant", "content": "anyio is a library"},
            "failure": None,
        },
    )
    # The tool events come before the answer's text.
    names = [name for name, _ in events]
    assert max(i for i, n in enumerate(names) if n == "tool") < names.index("delta")
    assert tools.executed == {"docs__search": 1, "db__lookup": 1}
    assert dict(fake.requests[1].tool_results) == {
        "call_1": "found: anyio",
        "call_2": "no such table",
    }


async def test_a_steps_text_is_part_of_the_answer_and_a_later_failure_is_still_retried(
    tmp_path: Path,
) -> None:
    """Text the model writes beside its calls is streamed, so it is in the answer too (the
    pieces add up to the message); being stored and final, it does not bind the next model
    call: a 500 there is retried as any, not the end of the turn."""
    async with (
        open_fake_model() as fake,
        running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, extra=TOOLS, model_extra=FAST),
            tools=box(),
        ) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(
            calls(("docs__search", {"text": "anyio"}), text="Let me look."),
            server_error(),
            ok("anyio is a library"),
        )
        body = {"message": "what is anyio?", **STREAM}
        async with http.post(f"{url}/api/sessions/s1/chat", json=body) as r:
            events = [e async for e in sse_events(r)]
    deltas = "".join(data["content"] for name, data in events if name == "delta")
    name, final = events[-1]
    assert name == "message" and final["failure"] is None
    assert final["message"]["content"] == "Let me look.\n\nanyio is a library" == deltas
    assert len(fake.requests) == 3


async def test_an_approval_is_asked_on_the_stream_and_a_yes_through_the_route_runs_it_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=TOOLS), tools=tools) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(calls(("git__push", {"text": "main"})), ok("pushed main"))
        body = {"message": "push main", **STREAM}
        async with http.post(f"{url}/api/sessions/s1/chat", json=body) as r:
            events = sse_events(r)
            asked = await until(events, "approval")
            assert asked == [
                ("tool", {"call_id": "call_1", "tool": "git__push", "state": "awaiting"}),
                (
                    "approval",
                    {
                        "call_id": "call_1",
                        "tool": "git__push",
                        "arguments": '{"text": "main"}',
                        "timeout_s": 600.0,
                    },
                ),
            ]
            assert tools.executed == {}  # nothing runs before the yes
            # The transcript shows the wait too (a client whose stream dropped finds it).
            async with http.get(f"{url}/api/sessions/s1/messages") as t:
                waiting = [m for m in (await t.json())["messages"] if m["role"] == "tool"]
            assert [(m["call_id"], m["state"]) for m in waiting] == [("call_1", "awaiting")]

            assert await answer(http, url, "s1", "call_1", True) == (
                200,
                {"session_id": "s1", "call_id": "call_1", "verdict": "approved"},
            )
            status, error = await answer(http, url, "s1", "call_1", False)
            assert (status, error["error"]["code"]) == (409, "already_answered")
            status, error = await answer(http, url, "s1", "call_9", True)
            assert (status, error["error"]["code"]) == (404, "not_found")
            rest = [e async for e in events]
    assert [e for e in rest if e[0] == "tool"] == [
        ("tool", {"call_id": "call_1", "tool": "git__push", "state": "started"}),
        ("tool", {"call_id": "call_1", "tool": "git__push", "state": "finished"}),
    ]
    assert [e for e in rest if e[0] == "message"] == [
        (
            "message",
            {
                "session_id": "s1",
                "message": {"role": "assistant", "content": "pushed main"},
                "failure": None,
            },
        )
    ]
    assert tools.executed == {"git__push": 1}
    assert dict(fake.requests[1].tool_results) == {"call_1": "pushed main"}
    assert tool_rows(db) == [("call_1", "finished", "peer")]


async def test_a_no_through_the_route_is_told_to_the_model_and_the_tool_never_runs(
    tmp_path: Path,
) -> None:
    tools = box()
    async with (
        open_fake_model() as fake,
        running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, extra=TOOLS), tools=tools
        ) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        fake.script(calls(("git__push", {"text": "main"})), ok("I did not push"))
        async with http.post(
            f"{url}/api/sessions/s1/chat", json={"message": "push", **STREAM}
        ) as r:
            events = sse_events(r)
            await until(events, "approval")
            assert await answer(http, url, "s1", "call_1", False) == (
                200,
                {"session_id": "s1", "call_id": "call_1", "verdict": "denied"},
            )
            rest = [e async for e in events]
        status, error = await answer(http, url, "s1", "call_1", True)
    assert (status, error["error"]["code"]) == (409, "already_answered")
    assert [data for name, data in rest if name == "tool"] == [
        {"call_id": "call_1", "tool": "git__push", "state": "denied"}
    ]
    assert [data["message"]["content"] for name, data in rest if name == "message"] == [
        "I did not push"
    ]
    assert tools.executed == {}
    told = dict(fake.requests[1].tool_results)["call_1"]
    assert told.startswith("denied: the person asked did not approve this call")


async def test_the_route_takes_only_a_boolean_and_only_in_the_tokens_own_sessions(
    tmp_path: Path,
) -> None:
    tools = box()
    async with open_fake_model() as fake:
        config = make_config(tmp_path / "b.db", fake.base_url, extra=TOOLS + TOKENS)
        async with (
            running_gateway(config, tools=tools) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            fake.script(calls(("git__push", {"text": "main"})), ok("pushed"))
            headers = {"Authorization": f"Bearer {TOKEN_A}"}
            async with http.post(
                f"{url}/api/sessions/a-1/chat",
                json={"message": "push", **STREAM},
                headers=headers,
            ) as r:
                events = sse_events(r)
                await until(events, "approval")
                # Another token: its globs do not reach a-1, so the call does not exist for it.
                status, error = await answer(http, url, "a-1", "call_1", True, token=TOKEN_B)
                assert (status, error["error"]["code"]) == (404, "not_found")
                # Bad input changes nothing.
                for bad in ("yes", 1, None):
                    status, error = await answer(http, url, "a-1", "call_1", bad, token=TOKEN_A)
                    assert (status, error["error"]["code"]) == (400, "bad_request"), bad
                async with http.post(
                    f"{url}/api/sessions/a-1/approvals/call_1",
                    json={"approve": True, "also": 1},
                    headers=headers,
                ) as extra:
                    assert extra.status == 400
                assert tools.executed == {}
                status, _ = await answer(http, url, "a-1", "call_1", True, token=TOKEN_A)
                assert status == 200
                rest = [e async for e in events]
    assert [data["message"]["content"] for name, data in rest if name == "message"] == ["pushed"]
    assert tools.executed == {"git__push": 1}


async def test_routes_that_cannot_ask_are_offered_no_tool_that_needs_a_yes(
    tmp_path: Path,
) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, extra=TOOLS), tools=box()
        ) as (_, url),
        aiohttp.ClientSession() as http,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0) as oai,
    ):
        async with http.post(f"{url}/api/sessions/s1/chat", json={"message": "plain"}) as r:
            assert r.status == 200
        await oai.chat.completions.create(
            model="botmux", messages=[{"role": "user", "content": "completion"}], user="s2"
        )
        stream = await oai.chat.completions.create(
            model="botmux",
            messages=[{"role": "user", "content": "streamed completion"}],
            user="s3",
            stream=True,
        )
        async for _ in stream:
            pass
        await oai.responses.create(model="botmux", input="a response")
        async with http.post(
            f"{url}/api/sessions/s4/chat", json={"message": "streamed chat", **STREAM}
        ) as r:
            [e async for e in sse_events(r)]
    without = ["db__lookup", "docs__search"]
    assert [(r.last_user, offered(r.tools)) for r in fake.requests] == [
        ("plain", without),
        ("completion", without),
        ("streamed completion", without),
        ("a response", without),
        ("streamed chat", ["db__lookup", "docs__search", "git__push"]),
    ]


async def test_a_restart_while_a_call_waits_keeps_the_wait_and_the_answer_resumes_it_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    tools = box()
    # A drain does not wait for a turn that waits for a yes (the wait is stored): the stop
    # takes far less than this deadline.
    long_drain = TOOLS + "[gateway]\ndrain_timeout_s = 600\n"
    key = {"Idempotency-Key": "push-1"}
    async with open_fake_model() as fake:
        config = make_config(db, fake.base_url, extra=long_drain)
        fake.script(calls(("git__push", {"text": "main"})), ok("pushed after the restart"))
        with anyio.fail_after(30):
            async with (
                running_gateway(config, tools=tools) as (_, url),
                aiohttp.ClientSession() as http,
                http.post(
                    f"{url}/api/sessions/s1/chat", json={"message": "push", **STREAM}, headers=key
                ) as r,
            ):
                await until(sse_events(r), "approval")
        # The first gateway stopped with the call waiting: nothing ran, nothing was answered.
        assert tools.executed == {} and len(fake.requests) == 1
        assert tool_rows(db) == [("call_1", "awaiting", None)]

        async with (
            running_gateway(config, tools=tools) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            # The same Idempotency-Key waits for the same turn, resumed by this gateway.
            async def repeat() -> None:
                async with http.post(
                    f"{url}/api/sessions/s1/chat", json={"message": "push"}, headers=key
                ) as again:
                    replies.append((await again.json())["message"]["content"])

            replies: list[str] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(repeat)
                assert await answer(http, url, "s1", "call_1", True) == (
                    200,
                    {"session_id": "s1", "call_id": "call_1", "verdict": "approved"},
                )
            async with http.get(f"{url}/api/sessions/s1/messages") as t:
                transcript = (await t.json())["messages"]
    assert replies == ["pushed after the restart"]
    assert tools.executed == {"git__push": 1}
    assert len(fake.requests) == 2  # the stored step was not asked for again
    assert dict(fake.requests[1].tool_results) == {"call_1": "pushed main"}
    assert [(m["role"], m["state"]) for m in transcript] == [
        ("user", "answered"),
        ("assistant", "step"),
        ("tool", "finished"),
        ("assistant", "final"),
    ]
    assert transcript[2]["content"] == "pushed main"
