"""agent/_wire.py against the loopback fake model: the plain and the streamed call, and every
failure made the gateway.errors exception translate_openai_errors makes of openai's."""

from __future__ import annotations

import pytest

from agent._wire import WireClient, proxy_for
from gateway.errors import ProviderError, ProviderTimeout, ProviderUnreachable
from tests.fakes.openai_server import (
    open_fake_model,
    rate_limited,
    server_error,
    streamed,
    timeout,
    unauthorized,
)
from tests.harness import free_port

pytestmark = pytest.mark.anyio

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


async def test_a_plain_call_sends_the_body_with_the_key_and_reads_the_reply() -> None:
    async with open_fake_model() as fake:
        wire = WireClient(fake.base_url, "sk-wire", 5.0)
        try:
            reply = await wire.chat(BODY, "m")
            again = await wire.chat(BODY, "m")
        finally:
            await wire.aclose()
    assert reply["choices"][0]["message"]["content"] == "echo: hello"
    assert again["choices"][0]["message"]["content"] == "echo: hello"
    assert [r.last_user for r in fake.requests] == ["hello", "hello"]
    assert fake.requests[0].api_key == "sk-wire"


async def test_status_errors_carry_status_code_type_and_the_headers_policy_reads() -> None:
    async with open_fake_model() as fake:
        fake.script(rate_limited(7), unauthorized(), server_error(503))
        wire = WireClient(fake.base_url, "sk", 5.0)
        try:
            errors = []
            for _ in range(3):
                with pytest.raises(ProviderError) as caught:
                    await wire.chat(BODY, "m")
                errors.append(caught.value)
        finally:
            await wire.aclose()
    limited, denied, down = errors
    assert (limited.status, limited.headers.get("retry-after")) == (429, "7")
    assert limited.model == "m" and limited.message
    assert denied.status == 401 and type(denied) is ProviderError
    assert down.status == 503


async def test_a_timeout_and_a_dead_port_are_timeout_and_unreachable() -> None:
    async with open_fake_model() as fake:
        fake.script(timeout(5.0))
        wire = WireClient(fake.base_url, "sk", 0.3)
        try:
            with pytest.raises(ProviderTimeout):
                await wire.chat(BODY, "m")
        finally:
            await wire.aclose()
    dead = WireClient(f"http://127.0.0.1:{free_port()}/v1", "sk", 2.0)
    try:
        with pytest.raises(ProviderUnreachable):
            await dead.chat(BODY, "m")
    finally:
        await dead.aclose()


async def test_a_stream_gives_its_events_and_a_cut_stream_is_unreachable() -> None:
    async with open_fake_model() as fake:
        fake.script(streamed("a", "b", "c"), streamed("x", "y", "z", cut_after=1))
        wire = WireClient(fake.base_url, "sk", 5.0)
        try:
            pieces = []
            async with wire.stream({**BODY, "stream": True}, "m") as events:
                async for batch in events:
                    for chunk in batch:
                        for choice in chunk.get("choices") or ():
                            pieces.append(choice["delta"].get("content") or "")
            with pytest.raises(ProviderUnreachable):
                async with wire.stream({**BODY, "stream": True}, "m") as events:
                    async for _ in events:
                        pass
            # The connection pool still works after a cut stream.
            reply = await wire.chat(BODY, "m")
        finally:
            await wire.aclose()
    assert "".join(pieces) == "abc"
    assert reply["choices"][0]["message"]["content"] == "echo: hello"


async def test_a_stream_refused_with_a_status_raises_before_any_event() -> None:
    async with open_fake_model() as fake:
        fake.script(rate_limited(3))
        wire = WireClient(fake.base_url, "sk", 5.0)
        try:
            with pytest.raises(ProviderError) as caught:
                async with wire.stream({**BODY, "stream": True}, "m"):
                    pass
        finally:
            await wire.aclose()
    assert caught.value.status == 429


def test_the_proxy_is_read_from_the_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert proxy_for("http://api.example/v1/chat/completions") == "http://proxy.test:3128"
    assert proxy_for("http://127.0.0.1:8000/v1/chat/completions") is None
    monkeypatch.delenv("HTTP_PROXY")
    assert proxy_for("http://api.example/v1/chat/completions") is None


async def test_the_openai_clients_organization_and_project_variables_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-test")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-test")
    async with open_fake_model() as fake:
        wire = WireClient(fake.base_url, "sk", 5.0)
        try:
            await wire.chat(BODY, "m")
        finally:
            await wire.aclose()
    headers = fake.requests[0].headers
    assert (headers["OpenAI-Organization"], headers["OpenAI-Project"]) == ("org-test", "proj-test")
