"""The peer API's front door: failed auth limited per address, requests limited per token.

The decisions (platforms/peer/limits.py) are tested on a clock the test moves; the behaviour
over real HTTP against the in-process gateway, with a second client address (127.0.0.2: all
of 127.0.0.0/8 is loopback) to show that one client's limit is not another's. Windows there
are a fraction of a second, so nothing waits long.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from gateway.config import Config, parse_config
from gateway.config_peer import PeerToken
from gateway.errors import ConfigError
from platforms.peer.limits import (
    FailureWindow,
    TokenBuckets,
    client_key,
    match_bearer,
    token_digests,
)
from tests.harness import config_text, make_config, running_gateway
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio

RIGHT = "right-token-0123456789abcdef"
OTHER = "other-token-fedcba9876543210"


# -- the decisions, on a clock the test moves ----------------------------------------------


def test_failures_lock_an_address_until_the_oldest_leaves_the_window() -> None:
    clock = Clock()
    window = FailureWindow(3, 60.0, clock=clock)
    assert window.check("10.0.0.1").allowed
    assert [window.record_failure("10.0.0.1") for _ in range(3)] == [False, False, True]
    verdict = window.check("10.0.0.1")
    assert not verdict.allowed and verdict.retry_after_s == 60.0
    assert verdict.retry_after_header == "60"
    assert window.check("10.0.0.2").allowed  # another address is not touched
    clock.now += 59.5
    assert window.check("10.0.0.1").retry_after_header == "1"  # rounded up, never 0
    clock.now += 0.5
    assert window.check("10.0.0.1").allowed
    # Failures spread over time: only those inside the window count.
    window.record_failure("10.0.0.3")
    clock.now += 40
    window.record_failure("10.0.0.3")
    clock.now += 30  # the first has left the window
    assert not window.record_failure("10.0.0.3")
    assert window.check("10.0.0.3").allowed
    assert FailureWindow(0, 60.0, clock=clock).check("x").allowed  # 0: off
    assert window.statistics().refused == 2


def test_the_failure_state_stays_bounded() -> None:
    clock = Clock()
    window = FailureWindow(5, 60.0, clock=clock, max_keys=100)
    for i in range(1000):
        window.record_failure(f"10.0.{i // 256}.{i % 256}")
    assert window.statistics().keys <= 100
    clock.now += 61
    window.record_failure("10.9.9.9")  # expired keys go first
    assert window.statistics().keys <= 100


def test_token_buckets_allow_a_burst_then_the_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(60, 3, clock=clock)  # one a second, three at once
    assert [buckets.take(0).allowed for _ in range(4)] == [True, True, True, False]
    refused = buckets.take(0)
    assert refused.retry_after_s == pytest.approx(1.0)
    assert buckets.take(1).allowed  # another token has its own bucket
    clock.now += 1.0
    assert buckets.take(0).allowed
    assert not buckets.take(0).allowed
    clock.now += 100  # refills up to the burst, no more
    assert [buckets.take(0).allowed for _ in range(4)] == [True, True, True, False]
    assert TokenBuckets(0, 1, clock=clock).take(0).allowed  # 0: off


def test_client_key_groups_an_ipv6_host_by_its_64() -> None:
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9")
    assert client_key("2001:db8:1:2::1") != client_key("2001:db8:1:3::1")
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key(None) == "unknown"


def test_bearer_matching_finds_the_token_and_nothing_like_it() -> None:
    # Constant time is by construction (SHA-256 digests of both sides, compare_digest against
    # every token, no early exit), not timed here: encoding the header costs more than a
    # plain == would leak, so a timing test could not tell the two apart.
    digests = token_digests((RIGHT, OTHER))
    assert match_bearer(f"Bearer {RIGHT}", digests) == 0
    assert match_bearer(f"bearer {OTHER}", digests) == 1
    for header in (
        "",
        RIGHT,
        f"Basic {RIGHT}",
        f"Bearer {RIGHT[:-1]}",
        f"Bearer {RIGHT}x",
        f"Bearer {RIGHT[:-1]}X",
        "Bearer \udcff",  # non-UTF-8 bytes, as aiohttp passes them on
    ):
        assert match_bearer(header, digests) is None, header


def test_the_limits_are_configured_in_the_peer_section(tmp_path: Path) -> None:
    config = parse_config(
        config_text(
            tmp_path / "b.db",
            None,
            extra="",
        ).replace(
            "[peer]\n",
            "[peer]\nauth_fail_limit = 5\nauth_fail_window_s = 30\n"
            "token_requests_per_min = 120\ntoken_burst = 10\n",
        ),
        source="test",
        env={},
    )
    assert (
        config.peer.auth_fail_limit,
        config.peer.auth_fail_window_s,
        config.peer.token_requests_per_min,
        config.peer.token_burst,
    ) == (5, 30.0, 120, 10)
    defaults = make_config(tmp_path / "b.db", None).peer
    assert (defaults.auth_fail_limit, defaults.token_requests_per_min) == (10, 0)
    with pytest.raises(ConfigError, match=r"peer\.token_burst"):
        parse_config(
            config_text(tmp_path / "b.db", None).replace("[peer]\n", "[peer]\ntoken_burst = 0\n"),
            source="test",
            env={},
        )


# -- over real HTTP --------------------------------------------------------------------------


def peer_config(tmp_path: Path, **peer: Any) -> Config:
    config = make_config(tmp_path / "b.db", None)
    if "tokens" in peer:
        peer["tokens"] = tuple(PeerToken.plain(t) for t in peer["tokens"])
    return dataclasses.replace(config, peer=dataclasses.replace(config.peer, **peer))


def client_from(address: str, token: str | None = None) -> aiohttp.ClientSession:
    """An HTTP client whose requests come from ``address`` (a loopback address)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connector = aiohttp.TCPConnector(local_addr=(address, 0), force_close=True)
    return aiohttp.ClientSession(connector=connector, headers=headers)


async def assert_429(response: aiohttp.ClientResponse, code: str) -> int:
    assert response.status == 429
    body = await response.json()
    assert body["error"]["code"] == code and body["error"]["status"] == 429
    retry_after = int(response.headers["Retry-After"])
    assert retry_after >= 1
    return retry_after


@pytest.mark.gateway
async def test_failed_auth_is_limited_per_address_and_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    config = peer_config(tmp_path, tokens=(RIGHT,), auth_fail_limit=3, auth_fail_window_s=60)
    async with (
        running_gateway(config) as (app, url),
        client_from("127.0.0.1", "guess-number-x") as guesser,
        client_from("127.0.0.1", RIGHT) as same_address,
        client_from("127.0.0.2", RIGHT) as elsewhere,
        client_from("127.0.0.2", "typo-token") as elsewhere_wrong,
    ):
        for _ in range(3):
            assert (await guesser.get(f"{url}/v1/models")).status == 401
        retry_after = await assert_429(
            await guesser.get(f"{url}/v1/models"), "too_many_auth_failures"
        )
        assert 55 <= retry_after <= 60
        # A valid token is served whatever others at its address (a proxy, a NAT) failed.
        assert (await same_address.get(f"{url}/v1/models")).status == 200
        await assert_429(
            await guesser.post(f"{url}/api/sessions/s/chat", json={"message": "x"}),
            "too_many_auth_failures",
        )
        # The probes stay open for the locked address (a load balancer may share it).
        assert (await same_address.get(f"{url}/healthz")).status == 200
        assert (await same_address.get(f"{url}/readyz")).status == 200
        # Another address is not touched: served, and its own failures counted on their own.
        for _ in range(2):
            assert (await elsewhere.get(f"{url}/v1/models")).status == 200
            assert (await elsewhere_wrong.get(f"{url}/v1/models")).status == 401
        assert (await elsewhere.get(f"{url}/metrics")).status == 200
        assert app.peer is not None
        stats = app.peer.statistics()
        assert stats.unauthorized == 5 and stats.locked_out_refusals == 2
    locked = [r for r in caplog.records if "too many failures" in r.getMessage()]
    assert [getattr(r, "client", None) for r in locked] == ["127.0.0.1"]
    assert all("guess-number-x" not in r.getMessage() + str(r.__dict__) for r in caplog.records)


@pytest.mark.gateway
async def test_an_address_is_let_in_again_when_the_window_has_passed(tmp_path: Path) -> None:
    window = 0.3
    config = peer_config(tmp_path, tokens=(RIGHT,), auth_fail_limit=2, auth_fail_window_s=window)
    async with (
        running_gateway(config) as (_, url),
        client_from("127.0.0.1", "wrong-token") as wrong,
        client_from("127.0.0.1", RIGHT) as right,
    ):
        # Fail until locked out (on a slow machine a failure may age out before the next).
        statuses = []
        for _ in range(50):
            r = await wrong.get(f"{url}/v1/models")
            statuses.append(r.status)
            if r.status == 429:
                await assert_429(r, "too_many_auth_failures")
                break
        assert statuses[:2] == [401, 401] and statuses[-1] == 429, statuses
        assert (await right.get(f"{url}/v1/models")).status == 200  # never locked out
        await anyio.sleep(window)  # every failure has now left the window
        assert (await right.get(f"{url}/v1/models")).status == 200
        assert (await wrong.get(f"{url}/v1/models")).status == 401  # counted afresh


@pytest.mark.gateway
async def test_each_token_has_its_own_request_rate(tmp_path: Path) -> None:
    per_min, burst = 600, 3  # ten a second, three at once
    config = peer_config(
        tmp_path, tokens=(RIGHT, OTHER), token_requests_per_min=per_min, token_burst=burst
    )
    async with (
        running_gateway(config) as (app, url),
        client_from("127.0.0.1", RIGHT) as busy,
        client_from("127.0.0.1", OTHER) as other,
        client_from("127.0.0.1") as anonymous,
    ):
        statuses = []
        for _ in range(50):
            r = await busy.get(f"{url}/v1/models")
            statuses.append(r.status)
            if r.status == 429:
                assert await assert_429(r, "rate_limited") == 1
                break
        assert statuses[:burst] == [200] * burst and statuses[-1] == 429, statuses
        # Another token, from the same address, is served; so are the probes.
        for _ in range(burst):
            assert (await other.get(f"{url}/v1/models")).status == 200
        assert (await anonymous.get(f"{url}/healthz")).status == 200
        # Being limited is not failing auth: no lockout follows.
        assert (await anonymous.get(f"{url}/v1/models")).status == 401
        await anyio.sleep(1.5 * 60 / per_min)  # more than one request's worth refilled
        assert (await busy.get(f"{url}/v1/models")).status == 200
        assert app.peer is not None
        assert app.peer.statistics().rate_limited == 1


@pytest.mark.gateway
async def test_without_tokens_nothing_is_limited(tmp_path: Path) -> None:
    config = peer_config(tmp_path, auth_fail_limit=1, token_requests_per_min=1, token_burst=1)
    async with running_gateway(config) as (_, url), client_from("127.0.0.1", "any") as http:
        for _ in range(5):
            assert (await http.get(f"{url}/v1/models")).status == 200
