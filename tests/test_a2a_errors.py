"""Bad input on ``POST /a2a`` (SPEC 12): every mistake is the spec's JSON-RPC error object
(HTTP 200, as JSON-RPC answers), never a 5xx, and nothing is stored; tasks are the token's
own."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config import parse_config
from tests.fakes.openai_server import open_fake_model
from tests.harness import config_text, make_config, running_gateway
from tests.support.a2a import A2A

pytestmark = pytest.mark.anyio

V1 = {"A2A-Version": "1.0"}
TEXT = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def rpc(method: str, params: Any, rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


CASES: list[tuple[str, bytes | dict[str, Any], dict[str, str], int, Any]] = [
    ("malformed JSON", b'{"jsonrpc": "2.0", "id": 1,', V1, -32700, None),
    ("not an object", b"[1, 2]", V1, -32600, None),
    ("no jsonrpc", {"id": 3, "method": "GetTask", "params": {"id": "1"}}, V1, -32600, 3),
    ("unknown method", rpc("tasks/explode", {}), V1, -32601, 1),
    ("params not an object", rpc("GetTask", [1]), V1, -32602, 1),
    ("no message", rpc("SendMessage", {}), V1, -32602, 1),
    ("parts wrong", rpc("SendMessage", {"message": {**TEXT, "parts": 5}}), V1, -32602, 1),
    ("agent role", rpc("SendMessage", {"message": {**TEXT, "role": "ROLE_AGENT"}}), V1, -32602, 1),
    (
        "a file part",
        rpc("SendMessage", {"message": {**TEXT, "parts": [{"url": "http://x/y.png"}]}}),
        V1,
        -32005,
        1,
    ),
    ("huge request id", rpc("GetTask", {"id": "1"}, "x" * 100_000), V1, -32600, None),
    ("huge task id", rpc("GetTask", {"id": "9" * 100_000}), V1, -32602, 1),
    ("task id not a number", rpc("GetTask", {"id": "../etc"}), V1, -32001, 1),
    ("huge integer id", rpc("GetTask", {"id": "1"}, 10**30), V1, -32600, None),
    (
        "huge messageId",
        rpc("SendMessage", {"message": {**TEXT, "messageId": "m" * 100_000}}),
        V1,
        -32602,
        1,
    ),
    ("1.0 method without the header", rpc("GetTask", {"id": "1"}), {}, -32009, 1),
    ("an unknown version", rpc("GetTask", {"id": "1"}), {"A2A-Version": "7.1"}, -32009, 1),
    ("no such task", rpc("tasks/get", {"id": "12345"}, "a"), {}, -32001, "a"),
    ("extended card", rpc("GetExtendedAgentCard", {}), V1, -32007, 1),
    ("list without context", rpc("ListTasks", {}), V1, -32602, 1),
    ("bad page token", rpc("ListTasks", {"contextId": "c", "pageToken": "zz"}), V1, -32602, 1),
]


@pytest.mark.gateway
async def test_bad_input_is_a_json_rpc_error_and_nothing_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    answers: dict[str, tuple[int, Any, int]] = {}
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url, extra=A2A)) as (_, url),
        httpx.AsyncClient() as http,
    ):
        for name, body, headers, _, _ in CASES:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            r = await http.post(
                f"{url}/a2a", content=raw, headers={"Content-Type": "application/json", **headers}
            )
            answer = r.json()
            assert answer["jsonrpc"] == "2.0" and "result" not in answer, name
            assert answer["error"]["message"], name
            answers[name] = (r.status_code, answer["id"], answer["error"]["code"])
    assert answers == {name: (200, rid, code) for name, _, _, code, rid in CASES}
    assert fake.requests == []
    with sqlite3.connect(db) as conn:
        assert list(conn.execute("SELECT COUNT(*) FROM messages")) == [(0,)]


@pytest.mark.gateway
async def test_a_task_is_its_tokens_own(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        text = config_text(db, fake.base_url, extra=A2A).replace(
            "[peer]\n", '[peer]\ntokens = ["alice-token-0123456789", "bob-token-0123456789ab"]\n'
        )
        config = parse_config(text, source="test", env={})
        async with running_gateway(config) as (_, url), httpx.AsyncClient() as http:
            card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
            alice = {"Authorization": "Bearer alice-token-0123456789", **V1}
            bob = {"Authorization": "Bearer bob-token-0123456789ab", **V1}
            r = await http.post(f"{url}/a2a", json=rpc("SendMessage", {"message": TEXT}))
            assert r.status_code == 401  # the listener's auth, before any JSON-RPC
            r = await http.post(
                f"{url}/a2a", json=rpc("SendMessage", {"message": TEXT}), headers=alice
            )
            task = r.json()["result"]["task"]
            r = await http.post(f"{url}/a2a", json=rpc("GetTask", {"id": task["id"]}), headers=bob)
            assert r.json()["error"]["code"] == -32001  # as if it did not exist
            # The same messageId from another token is another task.
            r = await http.post(
                f"{url}/a2a", json=rpc("SendMessage", {"message": TEXT}), headers=bob
            )
            bobs = r.json()["result"]["task"]
            assert bobs["id"] != task["id"]
            # The same contextId from another token is another conversation: no shared history.
            shared = {**TEXT, "messageId": "m-ctx", "contextId": "same"}
            for who in (alice, bob):
                r = await http.post(
                    f"{url}/a2a", json=rpc("SendMessage", {"message": shared}), headers=who
                )
                assert r.json()["result"]["task"]["contextId"] == "same"
            r = await http.post(
                f"{url}/a2a", json=rpc("CancelTask", {"id": task["id"]}), headers=alice
            )
            assert r.json()["error"]["code"] == -32002  # completed: not cancelable
    assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "bearer"}}}
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(fake.requests) == 4
    assert [len(r.messages) for r in fake.requests[2:]] == [2, 2]  # system + its own message


def test_our_error_codes_are_the_sdks() -> None:
    from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP

    from platforms.a2a import errors

    sdk = {cls.__name__: code for cls, code in JSON_RPC_ERROR_CODE_MAP.items()}
    assert set(errors.MESSAGES) <= set(sdk.values())
    assert sdk["TaskNotFoundError"] == errors.TASK_NOT_FOUND
    assert sdk["TaskNotCancelableError"] == errors.TASK_NOT_CANCELABLE
    assert sdk["PushNotificationNotSupportedError"] == errors.PUSH_NOT_SUPPORTED
    assert sdk["UnsupportedOperationError"] == errors.UNSUPPORTED_OPERATION
    assert sdk["ContentTypeNotSupportedError"] == errors.CONTENT_TYPE_NOT_SUPPORTED
    assert sdk["VersionNotSupportedError"] == errors.VERSION_NOT_SUPPORTED
    assert sdk["ExtendedAgentCardNotConfiguredError"] == errors.EXTENDED_CARD_NOT_CONFIGURED


def test_every_runtime_failure_has_a_json_rpc_answer() -> None:
    from gateway.errors import ConversationClosed, MessageTooLong, Overloaded, StoreUnavailable
    from platforms.a2a.errors import INTERNAL_ERROR, INVALID_PARAMS, rpc_error_of

    cases = {
        MessageTooLong("x", limit=5, length=9): INVALID_PARAMS,
        Overloaded("x", retry_after=1.0, scope="gateway"): INTERNAL_ERROR,
        ConversationClosed("draining"): INTERNAL_ERROR,
        StoreUnavailable("down"): INTERNAL_ERROR,
        RuntimeError("a bug"): INTERNAL_ERROR,
    }
    assert {type(e).__name__: rpc_error_of(e).code for e in cases} == {
        type(e).__name__: code for e, code in cases.items()
    }
