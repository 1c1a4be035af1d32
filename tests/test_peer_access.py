"""Who may reach what through the peer API (SPEC 14, docs/SECURITY.md), over real HTTP.

Presented tokens (H1), the lockout that never refuses a valid token and the trusted proxy
(H4), the no-token mode's local-only checks (H5), and tokens as principals with session
globs (M1). Client addresses are loopback addresses (all of 127.0.0.0/8 is loopback).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config import Config, parse_config
from gateway.config_peer import PeerToken
from gateway.errors import ConfigError
from tests.fakes.openai_server import open_fake_model
from tests.harness import config_text, make_config, running_gateway

pytestmark = pytest.mark.anyio

RIGHT = "right-token-0123456789abcdef"
TOKEN_A = "token-a-0123456789abcdef0123"
TOKEN_B = "token-b-fedcba9876543210fedc"


def peer_config(tmp_path: Path, model_url: str | None = None, **peer: Any) -> Config:
    config = make_config(tmp_path / "b.db", model_url)
    if "tokens" in peer:
        peer["tokens"] = tuple(
            PeerToken.plain(t) if isinstance(t, str) else t for t in peer["tokens"]
        )
    return dataclasses.replace(config, peer=dataclasses.replace(config.peer, **peer))


def client_from(address: str, headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(local_addr=(address, 0), force_close=True)
    return aiohttp.ClientSession(connector=connector, headers=headers or {})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- H1: presented tokens ------------------------------------------------------------------


@pytest.mark.gateway
async def test_a_bearer_with_nothing_after_it_is_no_token(tmp_path: Path) -> None:
    config = peer_config(tmp_path, tokens=(RIGHT,), auth_fail_limit=0)
    async with running_gateway(config) as (_, url), client_from("127.0.0.1") as http:
        for header in ("Bearer", "Bearer ", "Bearer    ", "bearer\t", " Bearer"):
            r = await http.get(f"{url}/v1/models", headers={"Authorization": header})
            assert r.status == 401, repr(header)
            assert (await r.json())["error"]["code"] == "unauthorized"
        # The presented token is stripped, as the configured one is: surrounding blanks
        # (a CRLF env file) still match.
        for header in (f"Bearer {RIGHT}", f"Bearer  {RIGHT} ", f"bearer {RIGHT}\t"):
            r = await http.get(f"{url}/v1/models", headers={"Authorization": header})
            assert r.status == 200, repr(header)


@pytest.mark.gateway
async def test_a_configured_token_with_blanks_matches_the_stripped_one(tmp_path: Path) -> None:
    config = peer_config(tmp_path, tokens=(f" {RIGHT}\r",))
    async with running_gateway(config) as (_, url), client_from("127.0.0.1") as http:
        assert (await http.get(f"{url}/v1/models", headers=bearer(RIGHT))).status == 200


# -- H4: the lockout never refuses a valid token ---------------------------------------------


@pytest.mark.gateway
async def test_a_valid_token_is_served_during_another_clients_lockout(tmp_path: Path) -> None:
    config = peer_config(tmp_path, tokens=(RIGHT,), auth_fail_limit=2, auth_fail_window_s=600)
    async with (
        running_gateway(config) as (app, url),
        client_from("127.0.0.1", bearer("wrong-token-guess")) as guesser,
        client_from("127.0.0.1", bearer(RIGHT)) as peer,
        client_from("127.0.0.1") as nobody,
    ):
        assert [(await guesser.get(f"{url}/v1/models")).status for _ in range(3)] == [
            401,
            401,
            429,
        ]
        # Same address (a NAT, a proxy), a valid token: served, on every route.
        assert (await peer.get(f"{url}/v1/models")).status == 200
        assert (await peer.get(f"{url}/metrics")).status == 200
        assert (await peer.get(f"{url}/api/sessions/s/messages")).status == 200
        # Without a token the address stays locked out.
        assert (await nobody.get(f"{url}/v1/models")).status == 429
        # Unknown paths and CORS preflights are answered and counted as no failure.
        for _ in range(5):
            assert (await nobody.get(f"{url}/nope")).status == 404
            assert (await nobody.options(f"{url}/v1/chat/completions")).status == 405
        assert app.peer is not None
        assert app.peer.statistics().unauthorized == 2


@pytest.mark.gateway
async def test_behind_a_trusted_proxy_the_forwarded_address_is_limited(tmp_path: Path) -> None:
    """127.0.0.1 plays the proxy (trusted); the forwarded addresses are its clients."""
    config = peer_config(
        tmp_path,
        tokens=(RIGHT,),
        auth_fail_limit=2,
        auth_fail_window_s=600,
        trusted_proxies=("127.0.0.1/32",),
    )
    attacker = {"X-Forwarded-For": "198.51.100.7"}
    async with (
        running_gateway(config) as (_, url),
        client_from("127.0.0.1", {**bearer("bad-guess-000000000"), **attacker}) as bad,
        client_from("127.0.0.1") as proxy,
        client_from("127.0.0.2", {"X-Forwarded-For": "10.9.9.9"}) as untrusted,
    ):
        assert [(await bad.get(f"{url}/v1/models")).status for _ in range(3)] == [401, 401, 429]
        # Another client of the same proxy, without a valid token: its own address, not
        # locked. With a valid token: served. A forged hop left of the real one is ignored.
        other = {"X-Forwarded-For": "203.0.113.9"}
        assert (await proxy.get(f"{url}/v1/models", headers=other)).status == 401
        assert (
            await proxy.get(f"{url}/v1/models", headers={**bearer(RIGHT), **attacker})
        ).status == 200
        forged = {"X-Forwarded-For": "203.0.113.50, 198.51.100.7"}
        assert (await proxy.get(f"{url}/v1/models", headers=forged)).status == 429
        # A peer that is not a trusted proxy cannot pick its address: 127.0.0.2 is keyed on
        # itself, whatever it forwards, and two failures lock it.
        assert [(await untrusted.get(f"{url}/v1/models")).status for _ in range(3)] == [
            401,
            401,
            429,
        ]
        spoof = {"X-Forwarded-For": "192.0.2.1"}
        assert (await untrusted.get(f"{url}/v1/models", headers=spoof)).status == 429


# -- H5: without tokens, only this machine's programs ----------------------------------------


@pytest.mark.gateway
async def test_without_tokens_only_local_requests_are_served(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(peer_config(tmp_path, fake.base_url)) as (app, url),
        client_from("127.0.0.1") as http,
    ):
        assert app.peer is not None
        port = app.peer.port
        # DNS rebinding: the browser sends the attacker's name as Host.
        for host in ("rebind.attacker.example", f"rebind.attacker.example:{port}", "10.0.0.1"):
            r = await http.get(f"{url}/api/sessions/alice/messages", headers={"Host": host})
            assert r.status == 421, host
            assert (await r.json())["error"]["code"] == "misdirected"
        assert (await http.get(f"{url}/metrics", headers={"Host": "x"})).status == 421
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
            r = await http.get(f"{url}/api/sessions/alice/messages", headers={"Host": host})
            assert r.status == 200, host
        # CSRF: a page's fetch carries its Origin.
        for origin in ("http://evil.example", "null", "https://127.0.0.1.evil.example"):
            r = await http.post(
                f"{url}/api/sessions/alice/chat",
                json={"message": "/new"},
                headers={"Origin": origin},
            )
            assert r.status == 403, origin
            assert (await r.json())["error"]["code"] == "forbidden_origin"
        r = await http.get(
            f"{url}/api/sessions/alice/messages", headers={"Origin": f"http://localhost:{port}"}
        )
        assert r.status == 200
        # A form or text/plain POST (no preflight) is refused; curl -d sends a form.
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": content_type} if content_type else {}
            r = await http.post(
                f"{url}/api/sessions/alice/chat", data=b'{"message": "hi"}', headers=headers
            )
            assert r.status == 415, content_type
            assert (await r.json())["error"]["code"] == "unsupported_media_type"
        # The probes answer any Host (load balancers); a JSON POST from here is served.
        assert (await http.get(f"{url}/healthz", headers={"Host": "lb.internal"})).status == 200
        r = await http.post(f"{url}/api/sessions/alice/chat", json={"message": "hi"})
        assert r.status == 200
        assert (await r.json())["message"]["content"] == "echo: hi"
    assert [r.last_user for r in fake.requests] == ["hi"]  # nothing refused reached the model


# -- M1: tokens are principals ---------------------------------------------------------------


def two_tokens(tmp_path: Path, model_url: str) -> Config:
    listen = 'listen = "127.0.0.1:0"\n'
    text = config_text(tmp_path / "b.db", model_url).replace(
        listen,
        listen
        + f'[[peer.tokens]]\ntoken = "{TOKEN_A}"\nname = "team-a"\nsessions = ["a-*"]\n'
        + f'[[peer.tokens]]\ntoken = "{TOKEN_B}"\nname = "team-b"\n'
        + 'sessions = ["b-*", "shared"]\n',
    )
    return parse_config(text, source="test", env={})


@pytest.mark.gateway
async def test_a_token_cannot_reach_another_tokens_sessions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with open_fake_model() as fake:
        config = two_tokens(tmp_path, fake.base_url)
        assert [t.name for t in config.peer.tokens] == ["team-a", "team-b"]
        async with (
            running_gateway(config) as (_, url),
            client_from("127.0.0.1", bearer(TOKEN_A)) as a,
            client_from("127.0.0.1", bearer(TOKEN_B)) as b,
        ):
            r = await a.post(f"{url}/api/sessions/a-private/chat", json={"message": "secret"})
            assert r.status == 200
            # B: reading, resetting, chatting, streaming in A's session: 404 as if absent,
            # the same answer as for a session that does not exist at all.
            missing = await b.get(f"{url}/api/sessions/b-nothing-here/messages")
            assert missing.status == 200  # in B's scope, merely empty
            for method, path, body in (
                ("GET", "/api/sessions/a-private/messages", None),
                ("POST", "/api/sessions/a-private/chat", {"message": "/new"}),
                ("POST", "/api/sessions/a-private/chat", {"message": "hello"}),
            ):
                r = await b.request(method, url + path, json=body)
                assert r.status == 404, (method, path)
                assert (await r.json())["error"]["code"] == "not_found"
            completion = {"messages": [{"role": "user", "content": "x"}], "stream": True}
            for headers, body in (
                ({"X-Botmux-Session": "a-private"}, completion),
                ({}, {**completion, "user": "a-private"}),
            ):
                r = await b.post(f"{url}/v1/chat/completions", json=body, headers=headers)
                assert r.status == 404
            # A's own session is intact and A cannot reach B's.
            r = await a.get(f"{url}/api/sessions/a-private/messages")
            assert [m["content"] for m in (await r.json())["messages"]] == [
                "secret",
                "echo: secret",
            ]
            assert (await a.get(f"{url}/api/sessions/shared/messages")).status == 404
            # Anonymous completions are the token's own, whatever its globs.
            r = await a.post(
                f"{url}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "anon"}]},
            )
            assert r.status == 200
            metrics = await (await a.get(f"{url}/metrics")).text()
    assert [r.last_user for r in fake.requests] == ["secret", "anon"]
    assert 'botmux_peer_requests_total{status="404",token="team-b"}' in metrics
    assert 'botmux_peer_requests_total{status="200",token="team-a"}' in metrics
    scoped = [r for r in caplog.records if "outside the token's scope" in r.getMessage()]
    assert {getattr(r, "token", None) for r in scoped} == {"team-a", "team-b"}
    everything = metrics + "".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    assert TOKEN_A not in everything and TOKEN_B not in everything


def test_plain_string_tokens_are_principals_with_every_session(tmp_path: Path) -> None:
    listen = 'listen = "127.0.0.1:0"\n'
    text = config_text(tmp_path / "b.db", None).replace(listen, listen + f'tokens = ["{RIGHT}"]\n')
    config = parse_config(text, source="test", env={})
    (token,) = config.peer.tokens
    assert token.sessions == ("*",) and token.name.startswith("token-")
    assert RIGHT not in repr(config.peer) and RIGHT not in token.name
    assert config.peer.token_values == (RIGHT,)
    assert isinstance(token, PeerToken)


@pytest.mark.gateway
async def test_a_tokens_own_rate_overrides_the_default(tmp_path: Path) -> None:
    limited = PeerToken(token=TOKEN_A, name="slow", requests_per_min=1)
    config = peer_config(tmp_path, tokens=(limited, TOKEN_B), token_burst=2)
    async with (
        running_gateway(config) as (_, url),
        client_from("127.0.0.1", bearer(TOKEN_A)) as a,
        client_from("127.0.0.1", bearer(TOKEN_B)) as b,
    ):
        assert [(await a.get(f"{url}/v1/models")).status for _ in range(3)] == [200, 200, 429]
        # token_requests_per_min is 0 (off): the other token is not limited.
        assert {(await b.get(f"{url}/v1/models")).status for _ in range(5)} == {200}


def test_token_tables_and_proxies_are_checked_at_load(tmp_path: Path) -> None:
    base = config_text(tmp_path / "b.db", None)
    listen = 'listen = "127.0.0.1:0"\n'
    config = parse_config(
        base.replace(
            listen,
            listen + 'trusted_proxies = ["10.0.0.0/8", "::1"]\n'
            '[[peer.tokens]]\ntoken = "${T}"\nsessions = ["x-*"]\n',
        ),
        source="test",
        env={"T": RIGHT},
    )
    (token,) = config.peer.tokens
    assert (token.token, token.sessions) == (RIGHT, ("x-*",))
    assert token.name.startswith("token-") and RIGHT not in token.name  # derived, not shown
    assert config.peer.trusted_proxies == ("10.0.0.0/8", "::1")
    with pytest.raises(ConfigError, match=r"peer\.trusted_proxies"):
        parse_config(
            base.replace(listen, listen + 'trusted_proxies = ["nginx"]\n'), source="t", env={}
        )
