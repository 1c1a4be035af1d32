"""Anonymous peer conversations belong to the token that made them (security review 2026-12-05,
H-1): another token cannot read, continue or delete them, through a response id it minted
itself or by naming the session, after a restart as before. Driven by the real ``openai``
client against the real gateway and store."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import aiohttp
import openai
import pytest

from gateway.config import Config, parse_config
from tests.fakes.openai_server import open_fake_model
from tests.harness import config_text, make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

ALICE = "alice-token-0123456789abcdef"  # sessions = ["alice-*"]
BOB = "bob-token-0123456789abcdef"  # sessions = ["bob-*"]
OP = "op-token-0123456789abcdef01"  # sessions = ["*"]


def tokens(db: Path, model_url: str) -> Config:
    listen = 'listen = "127.0.0.1:0"\n'
    text = config_text(db, model_url).replace(
        listen,
        listen
        + f'[[peer.tokens]]\ntoken = "{OP}"\nname = "op"\nsessions = ["*"]\n'
        + f'[[peer.tokens]]\ntoken = "{ALICE}"\nname = "alice"\nsessions = ["alice-*"]\n'
        + f'[[peer.tokens]]\ntoken = "{BOB}"\nname = "bob"\nsessions = ["bob-*"]\n',
    )
    return parse_config(text, source="test", env={})


def forge(row_id: int, token: str) -> str:
    """A response id for ``row_id`` as any token can compute it for itself (the id's MAC is
    keyed on the presenting token's digest): a handle, never the access check."""
    key = hashlib.sha256(token.encode()).digest()
    mac = hmac.new(key, b"botmux-response\0%d" % row_id, hashlib.sha256).hexdigest()[:24]
    return f"resp_{row_id}_{mac}"


def client(url: str, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0)


async def refused_everywhere(c: openai.AsyncOpenAI, resp_id: str) -> None:
    with pytest.raises(openai.NotFoundError):
        await c.responses.retrieve(resp_id)
    with pytest.raises(openai.NotFoundError):
        await c.responses.create(input="HISTORY please", previous_response_id=resp_id)
    with pytest.raises(openai.NotFoundError):
        await c.responses.delete(resp_id)


async def test_another_tokens_anonymous_turns_are_not_found(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        async with running_gateway(tokens(db, fake.base_url)) as (_, url):
            bob = client(url, BOB)
            secret = await bob.responses.create(input="bob secret: the vault code is 4711")
            completion = await bob.chat.completions.create(
                model="botmux", messages=[{"role": "user", "content": "bob salary 123k"}]
            )
            completion_row = int(completion.id.rsplit("-", 1)[1])
            secret_row = int(secret.id.split("_")[1])
            assert secret.conversation is not None
            bob_session = secret.conversation.id
            asked = len(fake.requests)

            alice, op = client(url, ALICE), client(url, OP)
            for row in (secret_row, completion_row):
                await refused_everywhere(alice, forge(row, ALICE))
                await refused_everywhere(op, forge(row, OP))  # "*" globs change nothing
            # Naming Bob's anonymous session is refused too, whatever the token's globs.
            with pytest.raises(openai.NotFoundError):
                await op.responses.create(input="x", conversation=bob_session)
            with pytest.raises(openai.NotFoundError):
                await op.chat.completions.create(
                    model="botmux",
                    messages=[{"role": "user", "content": "x"}],
                    extra_headers={"X-Botmux-Session": bob_session},
                )
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {OP}"}) as http:
                for method, path in (
                    ("GET", f"/api/sessions/{bob_session}/messages"),
                    ("DELETE", f"/api/sessions/{bob_session}"),
                ):
                    async with http.request(method, url + path) as r:
                        assert r.status == 404, (method, path)
            assert len(fake.requests) == asked  # no hijacked turn reached the model
            await alice.close()
            await op.close()
            await bob.close()

        # After a restart (ownership is in the conversation's key, nothing held in memory):
        # still refused to the others, and Bob still reads, continues and deletes his own.
        async with running_gateway(tokens(db, fake.base_url)) as (_, url):
            alice, bob = client(url, ALICE), client(url, BOB)
            await refused_everywhere(alice, forge(secret_row, ALICE))
            got = await bob.responses.retrieve(secret.id)
            assert got.output_text == "echo: bob secret: the vault code is 4711"
            more = await bob.responses.create(input="and more", previous_response_id=secret.id)
            assert more.conversation is not None and more.conversation.id == bob_session
            assert fake.requests[-1].last_user == "and more"
            assert await bob.responses.delete(secret.id) is None
            with pytest.raises(openai.NotFoundError):
                await bob.responses.retrieve(secret.id)
            await alice.close()
            await bob.close()


async def test_without_tokens_anonymous_turns_still_work(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (_, url),
    ):
        c = client(url, "none")
        first = await c.responses.create(input="one")
        second = await c.responses.create(input="two", previous_response_id=first.id)
        assert second.conversation is not None and first.conversation is not None
        assert second.conversation.id == first.conversation.id
        assert (await c.responses.retrieve(second.id)).previous_response_id == first.id
        assert await c.responses.delete(first.id) is None
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/api/sessions/{first.conversation.id}/messages") as r:
                assert r.status == 200
                assert [m["content"] for m in (await r.json())["messages"]] == [
                    "two",
                    "echo: two",
                ]
        await c.close()
