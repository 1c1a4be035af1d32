"""The admin API (SPEC 13) with an aiohttp client against a real gateway: every route behind
the peer tokens (and, without tokens, the loopback rules), the static page holding no secret,
conversations searched and paged, transcripts, pairing decisions logged with who made them,
and the event stream's tickets (never logged)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from gateway.config import Config, parse_config
from platforms.peer.admin import PAGE_FILES, PAGE_ROUTES, Tickets
from platforms.peer.openapi import build_openapi
from tests.fakes.openai_server import Fail, FakeModel, Hold
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import config_text, running_gateway, telegram_section
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio

OPS = "ops-console-token-0123456789"
OTHER = "bots-console-token-987654321"
TOKENS = (
    f'[[peer.tokens]]\ntoken = "{OPS}"\nname = "ops"\n\n'
    f'[[peer.tokens]]\ntoken = "{OTHER}"\nname = "bots"\nsessions = ["bot-*"]\n'
)
AUTH = {"Authorization": f"Bearer {OPS}"}


def config(tmp_path: Path, model: FakeModel, extra: str = TOKENS) -> Config:
    """Failed-auth limiting far out of reach: these tests send many refused requests."""
    parsed = parse_config(
        config_text(tmp_path / "botmux.db", model.base_url, extra=extra), source="t", env={}
    )
    return dataclasses.replace(
        parsed, peer=dataclasses.replace(parsed.peer, auth_fail_limit=1_000_000)
    )


def admin_routes() -> list[tuple[str, str]]:
    doc = build_openapi(auth=True)
    concrete = {"{key}": "peer:x", "{platform}": "telegram", "{code}": "ABCD", "{user_id}": "7"}
    routes = []
    for path, ops in doc["paths"].items():
        if path.startswith("/api/admin/"):
            for name, value in concrete.items():
                path = path.replace(name, value)
            routes.extend((method.upper(), path) for method in ops)
    return routes


async def next_event(response: aiohttp.ClientResponse) -> tuple[str, dict[str, Any]]:
    """The next named server-sent event (comments skipped)."""
    name, data = "", ""
    while True:
        line = (await response.content.readline()).decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line and name:
            return name, json.loads(data)


@pytest.mark.gateway
async def test_every_admin_route_refuses_a_missing_or_wrong_token_and_the_page_holds_none(
    tmp_path: Path, model: FakeModel
) -> None:
    routes = admin_routes()
    assert len(routes) >= 10  # and the reload route
    async with (
        running_gateway(config(tmp_path, model)) as (app, url),
        aiohttp.ClientSession() as http,
    ):
        for method, path in routes:
            for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789abc"}):
                r = await http.request(method, url + path, headers=headers, json={})
                assert r.status == 401, (method, path, headers)
                assert (await r.json())["error"]["code"] == "unauthorized"
        # The event stream takes a ticket, not the bearer token; a forged one is refused.
        r = await http.get(f"{url}/api/admin/events", headers=AUTH)
        assert r.status == 401
        ticket = (await (await http.post(f"{url}/api/admin/events/ticket", headers=AUTH)).json())[
            "ticket"
        ]
        expiry, name, nonce, mac = ticket.split(".")
        assert app.peer is not None
        failed = app.peer.statistics().unauthorized
        for forged in (
            f"{expiry}.Ym90cw.{nonce}.{mac}",
            f"{int(expiry) + 600}.{name}.{nonce}.{mac}",
            f"{expiry}.{name}.{nonce}x.{mac}",
            ticket + "x",
        ):
            r = await http.get(f"{url}/api/admin/events", params={"ticket": forged})
            assert r.status == 401, forged
        # An expired ticket is what a reconnecting page has: no failed authentication.
        assert app.peer.statistics().unauthorized == failed

        for path, name in PAGE_ROUTES.items():
            r = await http.get(url + path)
            assert r.status == 200, path
            assert r.content_type == PAGE_FILES[name]
            assert "default-src 'self'" in r.headers["Content-Security-Policy"]
            body = await r.text()
            assert OPS not in body and OTHER not in body
            assert "{{auth}}" not in body
            # Offline: the only URL in the page is the SVG namespace (a name, never fetched).
            assert set(re.findall(r"https?://[^\s\"'`]+", body)) <= {"http://www.w3.org/2000/svg"}
        assert 'data-auth="token"' in await (await http.get(f"{url}/console/")).text()


@pytest.mark.gateway
async def test_conversations_are_searched_paged_and_read_with_their_transcript(
    tmp_path: Path, model: FakeModel
) -> None:
    async with (
        running_gateway(config(tmp_path, model)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        for session in ("alpha-1", "alpha-2", "beta"):
            r = await http.post(
                f"{url}/api/sessions/{session}/chat",
                json={"message": f"hi {session}"},
                headers=AUTH,
            )
            assert r.status == 200
        r = await http.get(f"{url}/api/admin/conversations", params={"q": "alpha"}, headers=AUTH)
        found = await r.json()
        assert [c["key"] for c in found["conversations"]] == ["peer:alpha-2", "peer:alpha-1"]
        assert found["next_cursor"] is None
        assert all(c["messages"] == 2 and c["pending"] == 0 for c in found["conversations"])

        seen, cursor = [], None
        while True:
            params = {"limit": "1", **({"cursor": cursor} if cursor else {})}
            page = await (
                await http.get(f"{url}/api/admin/conversations", params=params, headers=AUTH)
            ).json()
            seen += [c["key"] for c in page["conversations"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == ["peer:beta", "peer:alpha-2", "peer:alpha-1"]
        for bad in ({"limit": "0"}, {"limit": "x"}, {"cursor": "nope"}, {"q": "q" * 201}):
            r = await http.get(f"{url}/api/admin/conversations", params=bad, headers=AUTH)
            assert r.status == 400, bad

        r = await http.get(f"{url}/api/admin/conversations/peer%3Aalpha-1/messages", headers=AUTH)
        transcript = await r.json()
        assert [(m["role"], m["content"]) for m in transcript["messages"]] == [
            ("user", "hi alpha-1"),
            ("assistant", "echo: hi alpha-1"),
        ]
        assert all(m["attachments"] == [] for m in transcript["messages"])
        assert transcript["next"] is None
        # A page at a time (L-8): the newest row, then the one before it, then no more.
        alpha = f"{url}/api/admin/conversations/peer%3Aalpha-1/messages"
        newest = await (await http.get(alpha, params={"limit": "1"}, headers=AUTH)).json()
        assert [m["content"] for m in newest["messages"]] == ["echo: hi alpha-1"]
        assert newest["next"] == newest["messages"][0]["id"]
        params = {"limit": "1", "before": str(newest["next"])}
        older = await (await http.get(alpha, params=params, headers=AUTH)).json()
        assert ([m["content"] for m in older["messages"]], older["next"]) == (["hi alpha-1"], None)
        for bad in ({"limit": "0"}, {"limit": "1001"}, {"before": "x"}, {"before": "0"}):
            r = await http.get(alpha, params=bad, headers=AUTH)
            assert (r.status, (await r.json())["error"]["param"]) == (400, next(iter(bad))), bad
        r = await http.get(f"{url}/api/admin/conversations/peer%3Anone/messages", headers=AUTH)
        assert r.status == 404

        overview = await (await http.get(f"{url}/api/admin/overview", headers=AUTH)).json()
        assert all(overview["ready"].values())
        assert sum(overview["series"]["turns"]) == 3 and sum(overview["series"]["failures"]) == 0
        assert len(overview["series"]["turns"]) == 60
        assert [c["key"] for c in overview["recent"]][:1] == ["peer:beta"]
        assert overview["live_turns"] == 0 and overview["cluster"] is None
        outbox = await (await http.get(f"{url}/api/admin/outbox", headers=AUTH)).json()
        assert outbox == {"chunks": []}  # peer replies are delivered in the HTTP response


@pytest.mark.gateway
async def test_the_event_stream_pushes_overviews_and_tickets_are_never_logged(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        running_gateway(config(tmp_path, model)) as (app, url),
        aiohttp.ClientSession() as http,
    ):
        r = await http.post(f"{url}/api/admin/events/ticket", headers=AUTH)
        ticket = (await r.json())["ticket"]
        with anyio.fail_after(10):
            async with http.get(f"{url}/api/admin/events", params={"ticket": ticket}) as events:
                assert events.status == 200
                assert events.content_type == "text/event-stream"
                name, first = await next_event(events)
                assert name == "overview" and first["recent"] == []
                r = await http.post(
                    f"{url}/api/sessions/live-1/chat", json={"message": "hello"}, headers=AUTH
                )
                assert r.status == 200
                while "peer:live-1" not in [c["key"] for c in first["recent"]]:
                    name, first = await next_event(events)
                assert name == "overview"
                # Stopping the gateway ends the stream cleanly (not cut at the stop deadline).
                assert app.peer is not None and app.peer.admin is not None
                assert app.peer.admin.streams == 1
                app.stop.set()
                await events.content.read()  # to its end: ClientPayloadError if it was cut
                assert app.peer.admin.streams == 0
    records = [f"{r.getMessage()} {r.__dict__}" for r in caplog.records]
    assert records  # the gateway logged (startup, the turn) ...
    assert not [r for r in records if ticket in r or OPS in r]  # ... never a ticket or token


def test_a_ticket_is_good_for_a_minute_and_only_from_this_process() -> None:
    clock = Clock()
    tickets = Tickets(ttl_s=60, wall=clock)
    ticket = tickets.mint("ops")
    assert tickets.check(ticket) == "ops"
    assert tickets.check(tickets.mint("")) == ""
    assert Tickets(ttl_s=60, wall=clock).check(ticket) is None  # another key
    # Redeemed (a stream opened), it opens nothing more (security review 2026-12-05, L-1).
    assert tickets.redeem(ticket) == "ops"
    assert tickets.redeem(ticket) is None
    assert tickets.redeem(tickets.mint("ops")) == "ops"  # a new one does
    clock.now += 61
    assert tickets.check(ticket) is None and tickets.redeem(ticket) is None
    assert tickets.check("") is None and tickets.check("...") is None
    assert tickets.redeem(tickets.mint("ops")) == "ops"


@pytest.mark.gateway
async def test_a_ticket_opens_one_stream_and_a_reload_ends_a_removed_tokens_streams(
    tmp_path: Path, model: FakeModel
) -> None:
    """Security review 2026-12-05, L-1: a replayed ticket is refused, and a stream whose
    token a reload removed ends at once; the other operator's stream goes on."""
    second = "ops-second-token-0123456789"
    running = [config(tmp_path, model, extra=TOKENS + f'[[peer.tokens]]\ntoken = "{second}"\n')]
    events = "/api/admin/events"
    async with (
        running_gateway(running[0], read=lambda: running[0]) as (app, url),
        aiohttp.ClientSession() as http,
    ):

        async def ticket(token: str) -> str:
            headers = {"Authorization": f"Bearer {token}"}
            r = await http.post(f"{url}/api/admin/events/ticket", headers=headers)
            return str((await r.json())["ticket"])

        mine, theirs = await ticket(OPS), await ticket(second)
        with anyio.fail_after(10):
            async with (
                http.get(url + events, params={"ticket": mine}) as one,
                http.get(url + events, params={"ticket": theirs}) as two,
            ):
                assert (one.status, two.status) == (200, 200)
                assert (await next_event(one))[0] == (await next_event(two))[0] == "overview"
                replayed = await http.get(url + events, params={"ticket": mine})
                assert replayed.status == 401
                running[0] = config(tmp_path, model)  # the second token removed
                r = await http.post(f"{url}/api/admin/reload", json={}, headers=AUTH)
                assert (await r.json())["outcome"] == "applied"
                await two.content.read()  # its stream ended, cleanly
                assert (await next_event(one))[0] == "overview"  # this one goes on
                assert app.peer is not None and app.peer.admin is not None
                assert app.peer.admin.streams == 1


@pytest.mark.gateway
async def test_pairing_decisions_are_made_over_the_api_and_logged_with_the_token_name(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    section = telegram_section(tg, "allow_users = [42]\n")
    async with (
        running_gateway(config(tmp_path, model, TOKENS + section)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        for user in (701, 702):
            tg.inject_message(user, "let me in")
        with anyio.fail_after(20):
            await tg.wait_until(lambda: bool(tg.sent_messages(701) and tg.sent_messages(702)))
        pairing = await (await http.get(f"{url}/api/admin/pairing", headers=AUTH)).json()
        codes = {int(c["user_id"]): c["code"] for c in pairing["pending"]}
        assert set(codes) == {701, 702} and pairing["approved"] == []
        assert codes[701] in tg.sent_messages(701)[0]

        base = f"{url}/api/admin/pairing/telegram"
        r = await http.post(f"{base}/{codes[701].lower()}/approve", headers=AUTH)
        assert r.status == 200 and (await r.json())["user_id"] == "701"
        r = await http.post(f"{base}/{codes[702]}/reject", headers=AUTH)
        assert r.status == 200 and (await r.json())["user_id"] == "702"
        r = await http.post(f"{base}/{codes[702]}/approve", headers=AUTH)
        assert r.status == 404  # a rejected code is dead

        tg.inject_message(701, "now?")
        with anyio.fail_after(10):
            await tg.wait_for_sent(2, 701)
        assert tg.sent_messages(701)[1] == "echo: now?"

        pairing = await (await http.get(f"{url}/api/admin/pairing", headers=AUTH)).json()
        assert pairing["pending"] == []
        assert [(u["platform"], u["user_id"]) for u in pairing["approved"]] == [("telegram", "701")]
        r = await http.post(f"{url}/api/admin/users/telegram/701/revoke", headers=AUTH)
        assert r.status == 200
        r = await http.post(f"{url}/api/admin/users/telegram/701/revoke", headers=AUTH)
        assert r.status == 404
        metrics = await (await http.get(f"{url}/metrics", headers=AUTH)).text()
        assert 'botmux_admin_actions_total{action="approve",result="ok"} 1.0' in metrics
        assert 'botmux_admin_actions_total{action="revoke",result="unknown"} 1.0' in metrics

    actions = [
        (r.action, r.by, r.target, r.result)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "admin_action"
    ]
    assert actions == [
        ("approve", "ops", codes[701], "ok"),
        ("reject", "ops", codes[702], "ok"),
        ("approve", "ops", codes[702], "unknown"),
        ("revoke", "ops", "701", "ok"),
        ("revoke", "ops", "701", "unknown"),
    ]
    assert not [r for r in caplog.records if OPS in f"{r.getMessage()} {r.__dict__}"]


@pytest.mark.gateway
async def test_without_tokens_the_admin_api_keeps_the_loopback_rules(
    tmp_path: Path, model: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with (
        running_gateway(config(tmp_path, model, extra="")) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        page = await (await http.get(f"{url}/console/")).text()
        assert 'data-auth="loopback"' in page  # the page opens without a login
        overview = f"{url}/api/admin/overview"
        assert (await http.get(overview)).status == 200
        assert (await http.get(overview, headers={"Host": "evil.example"})).status == 421
        assert (await http.get(overview, headers={"Origin": "http://evil.example"})).status == 403
        approve = f"{url}/api/admin/pairing/telegram/ABCD/approve"
        r = await http.post(approve, data="x", headers={"Content-Type": "text/plain"})
        assert r.status == 415
        assert (await http.post(approve, json={})).status == 404  # no such code, but heard
        ticket = (await (await http.post(f"{url}/api/admin/events/ticket", json={})).json())[
            "ticket"
        ]
        assert (await http.get(f"{url}/api/admin/events")).status == 401
        with anyio.fail_after(10):
            async with http.get(f"{url}/api/admin/events", params={"ticket": ticket}) as events:
                assert (await next_event(events))[0] == "overview"
    (action,) = [r for r in caplog.records if r.getMessage() == "admin_action"]
    assert action.by == "loopback" and action.result == "unknown"  # type: ignore[attr-defined]


@pytest.mark.gateway
async def test_the_overview_shows_running_turns_benched_keys_failures_and_the_cluster(
    tmp_path: Path, model: FakeModel, postgres_url: str
) -> None:
    text = config_text(
        tmp_path / "unused.db",
        model.base_url,
        keys=("sk-first-key-000001", "sk-second-key-00002"),
        extra=TOKENS,
        store_url=postgres_url,
    )
    bad_key = {"error": {"message": "invalid api key", "type": "invalid_request_error"}}
    model.script(Fail(401, bad_key), Hold())  # the first key is refused, the second holds
    async with (
        running_gateway(parse_config(text, source="t", env={})) as (app, url),
        aiohttp.ClientSession() as http,
        anyio.create_task_group() as tg,
    ):
        answered = anyio.Event()

        async def chat(session: str) -> None:
            await http.post(
                f"{url}/api/sessions/{session}/chat", json={"message": "hi"}, headers=AUTH
            )

        async def held() -> None:
            await chat("held")
            answered.set()

        tg.start_soon(held)
        with anyio.fail_after(10):
            await model.wait_for_requests(2)
        overview = await (await http.get(f"{url}/api/admin/overview", headers=AUTH)).json()
        assert overview["live_turns"] == 1 and overview["running"] == ["peer:held"]
        assert overview["queued"] == {"peer": 1}
        (benched,) = overview["benched"]
        assert benched["model"] == "gpt-test" and "sk-first" not in json.dumps(overview)
        assert app.cluster is not None
        cluster = overview["cluster"]
        assert cluster["node"] == app.cluster.node
        assert [(n["node"], n["alive"]) for n in cluster["nodes"]] == [(app.cluster.node, True)]

        model.release()
        model.script(Fail(400, {"error": {"message": "no", "type": "invalid_request_error"}}))
        with anyio.fail_after(10):
            await answered.wait()
            await chat("broken")
        # The reply reaches its client before the turn is counted: wait for the timeline
        # to count it (each finished turn is a change).
        with anyio.fail_after(10):
            seen = -1
            while sum(app.timeline.series().turns) < 2:
                seen = await app.timeline.wait_changed(seen)
        overview = await (await http.get(f"{url}/api/admin/overview", headers=AUTH)).json()
        assert sum(overview["series"]["turns"]) == 2 and sum(overview["series"]["failures"]) == 1
        assert sum(overview["series"]["model_failures"]) >= 2
        (broken,) = [c for c in overview["recent"] if c["key"] == "peer:broken"]
        assert broken["last_failure"] is not None


@pytest.mark.gateway
async def test_diagnostics_show_every_parts_statistics_and_no_secret(
    tmp_path: Path, model: FakeModel, tg: FakeTelegram
) -> None:
    section = telegram_section(tg, "allow_users = [42]\n")
    async with (
        running_gateway(config(tmp_path, model, TOKENS + section)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        r = await http.post(f"{url}/api/sessions/diag/chat", json={"message": "hi"}, headers=AUTH)
        assert r.status == 200
        tg.inject_message(42, "hello")
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, 42)
        r = await http.get(f"{url}/api/admin/diagnostics", headers=AUTH)
        assert r.status == 200
        text = await r.text()
        diagnostics = json.loads(text)
        refused = await http.get(
            f"{url}/api/admin/diagnostics", headers={"Authorization": f"Bearer {OTHER}"}
        )
        assert refused.status == 403  # a token limited to some sessions is no operator's

    assert set(diagnostics) == {
        "store",
        "router",
        "intake",
        "peer",
        "reload",
        "model_clients",
        "scheduler",
        "telegram",
    }
    assert diagnostics["scheduler"]["schedules"] == 0
    assert diagnostics["intake"]["admitted"] == 2
    assert diagnostics["router"]["spawned"] == 2
    assert diagnostics["peer"]["turns"] == 1
    telegram = diagnostics["telegram"]
    assert telegram["admitted"] == 1 and telegram["polling"] is False
    assert telegram["poller"] is None  # one node: no poller lease
    assert set(telegram["courier"]) >= {"sent", "retries", "failed"}  # its parts, nested
    store = diagnostics["store"]
    assert store["leases"] is None and store["writer"]["operations"] >= 4  # 2 admits, 2 answers
    assert diagnostics["model_clients"]["built"] == 1
    for secret in (tg.token, OPS, OTHER, "sk-"):
        assert secret not in text
