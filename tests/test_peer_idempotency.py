"""Idempotency-Key semantics (SPEC 5 and 14, review M3), over real HTTP with the fake model.

The key's fingerprint is the stored user row itself: a repeat must carry the same message,
else 422. An anonymous completion's key is scoped to the token. A stored retryable failure
is not replayed forever: the first repeat after it runs the turn once more.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from gateway.config_peer import PeerToken
from tests.fakes.openai_server import ok, open_fake_model, server_error
from tests.harness import FAST, make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

TOKEN_A = "token-a-0123456789abcdef0123"
TOKEN_B = "token-b-fedcba9876543210fedc"


def user_rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        query = "SELECT conversation, content FROM messages WHERE role = 'user' ORDER BY id"
        return list(conn.execute(query))


async def test_the_same_key_with_another_message_is_422(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(db, fake.base_url)) as (_, url),
        aiohttp.ClientSession(headers={"Idempotency-Key": "k1"}) as http,
    ):
        chat = f"{url}/api/sessions/bob/chat"
        first = await http.post(chat, json={"message": "first body"})
        assert (await first.json())["message"]["content"] == "echo: first body"
        again = await http.post(chat, json={"message": "first body"})
        assert again.status == 200
        assert (await again.json())["message"]["content"] == "echo: first body"
        changed = await http.post(chat, json={"message": "a completely different body"})
        assert changed.status == 422
        assert (await changed.json())["error"]["code"] == "idempotency_key_reused"
        completion = await http.post(
            f"{url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "a third text"}]},
            headers={"X-Botmux-Session": "bob"},
        )
        assert completion.status == 422
        # The same key in another session is another message (keys are per session).
        other = await http.post(f"{url}/api/sessions/carol/chat", json={"message": "other"})
        assert other.status == 200
    assert [r.last_user for r in fake.requests] == ["first body", "other"]
    assert user_rows(db) == [("peer:bob", "first body"), ("peer:carol", "other")]


async def test_an_anonymous_completions_key_is_honoured_per_token(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        config = make_config(db, fake.base_url)
        config = dataclasses.replace(
            config,
            peer=dataclasses.replace(
                config.peer, tokens=(PeerToken.plain(TOKEN_A), PeerToken.plain(TOKEN_B))
            ),
        )
        body = {"messages": [{"role": "user", "content": "once please"}]}
        ids = []
        async with running_gateway(config) as (_, url):
            for token in (TOKEN_A, TOKEN_A, TOKEN_B):
                headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "anon1"}
                async with aiohttp.ClientSession(headers=headers) as http:
                    r = await http.post(f"{url}/v1/chat/completions", json=body)
                    assert r.status == 200
                    ids.append((await r.json())["id"])
    # A's repeat is A's first turn; B's same key is a turn of its own.
    assert ids[0] == ids[1] != ids[2]
    assert [r.last_user for r in fake.requests] == ["once please", "once please"]
    conversations = [c for c, _ in user_rows(db)]
    assert len(set(conversations)) == 2 and all(c.startswith("peer:anon-") for c in conversations)


async def test_a_retryable_failure_is_run_again_once_on_a_repeat(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        config = make_config(db, fake.base_url, model_extra=FAST)
        # One cycle (max_retries 1) and the policy's one re-run: two calls fail.
        fake.script(server_error(502), server_error(502), ok("worked now"), ok("never asked"))
        async with (
            running_gateway(config) as (_, url),
            aiohttp.ClientSession(headers={"Idempotency-Key": "r1"}) as http,
        ):
            chat = f"{url}/api/sessions/dave/chat"
            first = await (await http.post(chat, json={"message": "try"})).json()
            assert first["failure"] == {"reason": "server", "retryable": True}
            calls = len(fake.requests)
            second = await (await http.post(chat, json={"message": "try"})).json()
            assert second["failure"] is None
            assert second["message"]["content"] == "worked now"
            third = await (await http.post(chat, json={"message": "try"})).json()
            assert third == second  # settled: replayed, not run a third time
            assert len(fake.requests) == calls + 1
            changed = await http.post(chat, json={"message": "something else"})
            assert changed.status == 422
    assert user_rows(db) == [("peer:dave", "try"), ("peer:dave", "try")]
