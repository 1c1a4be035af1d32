"""SPEC section 4 end to end: the real gateway, the real openai client, the fake model server.

Each test asserts on what the fake model received (model, key, order), on the reply and on the
stored rows, including the two reference behaviours in ``shared/reference``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.fakes.openai_server import (
    Sleep,
    context_overflow,
    drop,
    model_not_found,
    ok,
    open_fake_model,
    quota,
    rate_limited,
    server_error,
    unauthorized,
)
from tests.harness import fallback, make_config, running_gateway
from tests.support.clocks import ShiftedClock

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

FAST = "backoff_base_s = 0.01\nbackoff_cap_s = 0.05\n"


async def chat(url: str, session: str, text: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{url}/api/sessions/{session}/chat", json={"message": text})
        assert r.status == 200
        body: dict[str, Any] = await r.json()
        return body


def user_rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(
            conn.execute("SELECT content, state FROM messages WHERE role = 'user' ORDER BY id")
        )


async def test_transient_turn_is_rerun_once_adopting_the_row_and_auth_is_not(
    tmp_path: Path,
) -> None:
    """Reference: peer_dm_transient_retry."""
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        config = make_config(db, fake.base_url, model_extra=FAST + "max_retries = 1\n")
        async with running_gateway(config) as (_, url):
            fake.script(rate_limited(), ok("2+2 is 4"))
            body = await chat(url, "peer_dm_retry", "disk status?")
            assert len(fake.requests) == 2, "a transient failure re-runs the turn exactly once"
            assert body["message"]["content"] == "2+2 is 4"
            assert body["failure"] is None
            rerun = fake.requests[1].messages
            assert [m["content"] for m in rerun if m["role"] == "user"] == ["disk status?"]
            assert user_rows(db) == [("disk status?", "answered")]

            fake.script(unauthorized(), unauthorized())
            body = await chat(url, "peer_dm_retry", "disk status?")
            assert len(fake.requests) == 3, "auth is never re-run"
            assert body["failure"] == {"reason": "auth", "retryable": False}
            assert "model.api_keys" in body["message"]["content"]
            assert "Incorrect API key" not in body["message"]["content"]


async def test_timeouts_then_recovery_then_429_falls_back(tmp_path: Path) -> None:
    """Reference: fallback_429_after_timeout (max_retries = 2: primary x3, then fallback)."""
    async with open_fake_model() as fake:
        extra = FAST + "max_retries = 2\n" + fallback(fake.base_url)
        config = make_config(
            tmp_path / "b.db", fake.base_url, model="gpt-primary", model_extra=extra
        )
        config = _with_timeout(config, 0.3)
        fake.script(Sleep(3), Sleep(3), rate_limited(), model="gpt-primary")
        fake.script(ok("Recovered via fallback"), model="gpt-fallback")
        async with running_gateway(config) as (app, url):
            body = await chat(url, "s", "hello")
            assert app.metrics.decisions.labels("recover", "timeout")._value.get() == 1
            assert app.metrics.decisions.labels("fallback", "rate_limit")._value.get() == 1
    assert body["message"]["content"] == "Recovered via fallback"
    assert [r.model for r in fake.requests] == ["gpt-primary"] * 3 + ["gpt-fallback"]


async def test_rotation_skips_benched_keys_until_their_time(tmp_path: Path) -> None:
    clock = ShiftedClock()  # benches are measured on it
    keys = ("sk-key-one-1111", "sk-key-two-2222", "sk-key-three-3333")
    async with open_fake_model() as fake:
        config = make_config(tmp_path / "b.db", fake.base_url, keys=keys, model_extra=FAST)
        async with running_gateway(config, clock=clock) as (_, url):
            fake.script(rate_limited(retry_after=30), unauthorized())
            body = await chat(url, "rot", "first")
            assert body["message"]["content"] == "echo: first"
            assert [k for _, k in fake.calls()] == list(keys)

            await chat(url, "rot", "second")  # both benched keys are skipped
            assert fake.calls()[-1][1] == keys[2]
            status = (await chat(url, "rot", "/status"))["message"]["content"]
            assert "gpt-test key1 (rate_limit)" in status
            assert "gpt-test key2 (auth) until restart" in status
            assert "1111" not in status and "2222" not in status  # no part of a key is shown

            clock.offset += 31  # the rate-limit bench is over; the auth bench is not
            await chat(url, "rot", "third")
            assert fake.calls()[-1][1] == keys[0]
            await chat(url, "rot", "fourth")
            assert fake.calls()[-1][1] == keys[2]
    assert keys[1] not in [k for _, k in fake.calls()[2:]]


async def test_quota_is_reported_as_quota_and_not_rerun(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        async with running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, model_extra=FAST)
        ) as (_, url):
            fake.script(quota())
            body = await chat(url, "q", "hi")
    assert len(fake.requests) == 1
    assert body["failure"] == {"reason": "quota", "retryable": False}
    assert "quota" in body["message"]["content"] and "auth" not in body["message"]["content"]


async def test_retry_after_two_seconds_is_waited(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        async with running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, model_extra=FAST)
        ) as (_, url):
            fake.script(rate_limited(retry_after=2), ok("patience"))
            body = await chat(url, "w", "hi")
    assert body["message"]["content"] == "patience"
    first, second = fake.requests
    assert second.started - first.started >= 2.0
    assert second.api_key == first.api_key


async def test_retry_after_an_hour_fails_over_without_waiting(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = FAST + fallback(fake.base_url)
        config = make_config(
            tmp_path / "b.db", fake.base_url, model="gpt-primary", model_extra=extra
        )
        async with running_gateway(config) as (_, url):
            fake.script(rate_limited(retry_after=3600), model="gpt-primary")
            body = await chat(url, "h", "hi")
            assert body["message"]["content"] == "echo: hi"
            assert [r.model for r in fake.requests] == ["gpt-primary", "gpt-fallback"]
            assert fake.requests[1].started - fake.requests[0].started < 1.0
            # The primary's only key is benched for the hour: the next turn starts on the fallback.
            await chat(url, "h", "again")
            assert fake.requests[-1].model == "gpt-fallback"


async def test_retry_after_an_hour_with_nowhere_to_go_fails_at_once(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        async with running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, model_extra=FAST)
        ) as (_, url):
            fake.script(rate_limited(retry_after=3600))
            body = await chat(url, "h", "hi")
    assert body["failure"] == {"reason": "rate_limit", "retryable": True}
    assert len(fake.requests) == 1  # the re-run found the only key benched past the cap


async def test_the_turn_after_a_fallback_starts_on_the_primary(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = FAST + "max_retries = 1\n" + fallback(fake.base_url)
        config = make_config(
            tmp_path / "b.db", fake.base_url, model="gpt-primary", model_extra=extra
        )
        async with running_gateway(config) as (_, url):
            fake.script(server_error(503), model="gpt-primary")
            await chat(url, "f", "one")
            status = (await chat(url, "f", "/status"))["message"]["content"]
            assert "fell back to gpt-fallback" in status
            await chat(url, "f", "two")
    assert [r.model for r in fake.requests] == ["gpt-primary", "gpt-fallback", "gpt-primary"]


async def test_a_chain_that_fails_transiently_is_rerun_once_then_reports(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = FAST + "max_retries = 2\n" + fallback(fake.base_url)
        config = make_config(
            tmp_path / "b.db", fake.base_url, model="gpt-primary", model_extra=extra
        )
        fake.default = lambda r: server_error(502)
        async with running_gateway(config) as (_, url):
            body = await chat(url, "down", "anyone?")
    assert body["failure"] == {"reason": "server", "retryable": True}
    assert "server trouble" in body["message"]["content"]
    # One cycle is the primary's 2 calls, then the fallback's 3 (its own default max_retries);
    # the turn is re-run once: ten calls, no more.
    assert [r.model for r in fake.requests] == (["gpt-primary"] * 2 + ["gpt-fallback"] * 3) * 2


async def test_model_not_found_falls_back_and_context_overflow_does_not(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = FAST + fallback(fake.base_url)
        config = make_config(
            tmp_path / "b.db", fake.base_url, model="gpt-primary", model_extra=extra
        )
        async with running_gateway(config) as (_, url):
            fake.script(model_not_found("gpt-primary"), model="gpt-primary")
            assert (await chat(url, "m", "hi"))["message"]["content"] == "echo: hi"
            fake.script(context_overflow(), context_overflow(), model="gpt-primary")
            body = await chat(url, "m", "long")
    assert body["failure"] == {"reason": "context_overflow", "retryable": False}
    assert "/new" in body["message"]["content"]
    # The overflow is trimmed and tried once more (SPEC 11), on the same model; then no retry.
    assert [r.model for r in fake.requests] == [
        "gpt-primary",
        "gpt-fallback",
        "gpt-primary",
        "gpt-primary",
    ]


def _with_timeout(config: Any, seconds: float) -> Any:
    import dataclasses

    return dataclasses.replace(config, model=dataclasses.replace(config.model, timeout_s=seconds))


async def test_stop_ends_a_retry_after_wait_at_once(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with open_fake_model() as fake:
        async with running_gateway(make_config(db, fake.base_url, model_extra=FAST)) as (_, url):
            fake.script(rate_limited(retry_after=50))
            async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
                replies: list[dict[str, Any]] = []

                async def waiting() -> None:
                    r = await http.post(f"{url}/api/sessions/st/chat", json={"message": "slow"})
                    replies.append(await r.json())

                tg.start_soon(waiting)
                await fake.wait_for_requests(1)
                await anyio.wait_all_tasks_blocked()  # the turn now sleeps out the Retry-After
                with anyio.fail_after(5):
                    stop = await chat(url, "st", "/stop")
            assert stop["message"]["content"] == "Stopping the current reply."
            assert replies[0]["message"]["content"] == "The turn was stopped before it answered."
    assert len(fake.requests) == 1
    assert user_rows(db) == [("slow", "cancelled")]


async def test_a_dropped_connection_is_retried(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        async with running_gateway(
            make_config(tmp_path / "b.db", fake.base_url, model_extra=FAST)
        ) as (app, url):
            fake.script(drop(), ok("second time lucky"))
            body = await chat(url, "d", "hi")
            assert app.metrics.decisions.labels("retry", "connection")._value.get() == 1
    assert body["message"]["content"] == "second time lucky"
    assert len(fake.requests) == 2


async def test_a_refused_connection_is_reported_as_connection(tmp_path: Path) -> None:
    from tests.harness import free_port

    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    config = make_config(tmp_path / "b.db", nowhere, model_extra=FAST + "max_retries = 2\n")
    async with running_gateway(config) as (app, url):
        body = await chat(url, "r", "hello?")
        assert (
            app.metrics.decisions.labels("recover", "connection")._value.get() == 2
        )  # once per run
    assert body["failure"] == {"reason": "connection", "retryable": True}
    assert "model.base_url" in body["message"]["content"]
