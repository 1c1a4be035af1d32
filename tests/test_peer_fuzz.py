"""The peer API against its own OpenAPI document: valid, true to the routes, and fuzzed.

schemathesis's command line fuzzes the in-process gateway (the fake model behind it) from the
document the gateway serves at /openapi.json. It runs as a subprocess on purpose: our event loop
stays free to serve it (no sync client blocking the loop, no thread bridging), its pytest
plugin and hypothesis settings never meet ours (warnings are errors here), and it brings every
phase: coverage (boundary values, wrong methods, missing and wrong auth) and fuzzing (valid and
invalid data). Its checks include no 5xx, every status and body as documented (so every error
is the documented JSON shape), invalid data refused and valid data served. We read its HAR log
too, and check the gateway still serves and its store is consistent afterwards.

The explicit cases at the end are what the fuzzing and the review behind it turned up.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import aiohttp
import anyio
import pytest
from openapi_spec_validator import validate

from gateway.config import Config
from gateway.config_peer import PeerToken
from platforms.a2a.openapi import a2a_paths
from platforms.peer.openapi import build_openapi
from tests.fakes.openai_server import open_fake_model
from tests.harness import make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

TOKEN = "fuzz-peer-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Per operation and phase: about 10 s in all. For a longer local run, for example:
# BOTMUX_FUZZ_EXAMPLES=400 BOTMUX_FUZZ_SEED=$RANDOM pytest --timeout 900 tests/test_peer_fuzz.py
#: JSON-RPC's error codes and A2A's (platforms/a2a/errors.py).
JSON_RPC_CODES = {-32700, -32600, -32601, -32602, -32603, *range(-32009, -32000)}
EXAMPLES = int(os.environ.get("BOTMUX_FUZZ_EXAMPLES", "30"))
SEED = os.environ.get("BOTMUX_FUZZ_SEED", "20261130")


def fuzz_config(db: Path, model_url: str) -> Config:
    """Tokens on, and both limits on but far out of reach, so their code runs on every request."""
    config = make_config(db, model_url, extra='[a2a]\nname = "fuzzed"\n')  # its routes too
    peer = dataclasses.replace(
        config.peer,
        tokens=(PeerToken.plain(TOKEN),),
        auth_fail_limit=1_000_000,
        token_requests_per_min=1_000_000,
        token_burst=1_000_000,
    )
    return dataclasses.replace(config, peer=peer)


async def test_the_document_is_valid_openapi_and_names_exactly_the_served_routes(
    tmp_path: Path,
) -> None:
    validate(build_openapi(auth=False))  # the variant served when no tokens are set
    async with (
        open_fake_model() as fake,
        running_gateway(fuzz_config(tmp_path / "b.db", fake.base_url)) as (app, url),
        aiohttp.ClientSession() as http,
    ):
        r = await http.get(f"{url}/openapi.json")
        assert r.status == 401  # behind the token like every route but the probes
        r = await http.get(f"{url}/openapi.json", headers=AUTH)
        assert r.status == 200
        assert r.content_type == "application/json"
        doc = await r.json()
        validate(doc)
        assert doc["openapi"] == "3.1.0"
        assert doc == build_openapi(auth=True, extra=a2a_paths())

        assert app.peer is not None
        served = {
            (route.method, route.resource.canonical)
            for route in app.peer.build_app().router.routes()
            if route.method != "HEAD" and route.resource is not None
        }
        documented = {
            (method.upper(), path) for path, ops in doc["paths"].items() for method in ops
        }
        assert documented == served

        # The document's security is what the server does: probes open, the rest need a token.
        for path, ops in doc["paths"].items():
            for method, op in ops.items():
                needs_token = op.get("security", doc["security"]) != []
                concrete = path.replace("{session_id}", "s").replace("{model_id}", "botmux")
                concrete = concrete.replace("{sha256}", "0" * 64)
                concrete = concrete.replace("{response_id}", "resp_1")
                concrete = concrete.replace("{call_id}", "call_1")
                r = await http.request(method.upper(), url + concrete)
                assert r.status == (401 if needs_token else 200), (method, path)
                # Every status a route answers is documented, with an Error body for errors.
                assert str(r.status) in op["responses"], (method, path, r.status)


async def run_schemathesis(url: str, workdir: Path) -> tuple[int, str, dict, list[dict]]:
    """``st run`` against ``url``: (exit code, output, JSON report, HAR entries)."""
    report, har = workdir / "report.json", workdir / "fuzz.har"
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        "all",
        "--phases",
        "coverage,fuzzing",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        SEED,
        # One worker: with more, hypothesis parses lambdas' source from several threads at
        # once, which CPython 3.11's ast.parse does not survive ("AST constructor recursion
        # depth mismatch", a schemathesis Runtime Error about one run in four).
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--report",
        "json,har",
        "--report-json-path",
        str(report),
        "--report-har-path",
        str(har),
    ]
    # A schema-valid chat may reuse an Idempotency-Key with another message: 422 (SPEC 14),
    # a conflict with stored state that no schema can express.
    # JSON-RPC answers a request it could read with 200 and an error object, a bad one too
    # (SPEC 12): for /a2a, the test checks every answer is one of those instead.
    (workdir / "schemathesis.toml").write_text(
        "[checks.positive_data_acceptance]\n"
        'expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]\n'
        "[[operations]]\n"
        'include-path = "/a2a"\n'
        'checks.negative_data_rejection.expected-statuses = ["200", "4xx"]\n'
    )
    # Its crash cache (.schemathesis/) and hypothesis database go to the test's directory.
    result = await anyio.run_process(
        command,
        cwd=workdir,
        check=False,
        stderr=-2,  # subprocess.STDOUT
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"},
    )
    output = result.stdout.decode(errors="replace")
    summary = json.loads(report.read_text()) if report.exists() else {}
    entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    return result.returncode, output, summary, entries


@pytest.mark.process
@pytest.mark.timeout(180)
async def test_schemathesis_finds_no_5xx_every_error_is_json_and_the_gateway_keeps_serving(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    workdir = tmp_path / "st"
    workdir.mkdir()
    async with (
        open_fake_model() as fake,
        running_gateway(fuzz_config(db, fake.base_url)) as (app, url),
    ):
        # 22 operations since the admin API (SPEC 13): about 30 s idle, 90 s on a busy machine.
        with anyio.fail_after(max(150, 4 * EXAMPLES)):  # longer runs need pytest --timeout
            code, output, summary, entries = await run_schemathesis(url, workdir)
        assert code == 0, output[-8000:]
        assert summary["failures"] == [] and summary["errors"] == [], output[-8000:]
        operations = summary["operations"]
        assert operations["tested"] == operations["total"] >= 7

        # Independently of its checks: what every response on the wire was.
        statuses = Counter(e["response"]["status"] for e in entries)
        assert len(entries) > 200, statuses
        assert not {s for s in statuses if s >= 500}, statuses
        assert {200, 400, 401, 405} <= set(statuses), statuses
        a2a = [e for e in entries if e["request"]["url"].endswith("/a2a")]
        assert len(a2a) > 20
        for entry in a2a:  # JSON-RPC: 200 with a result or the spec's error object
            response = entry["response"]
            if response["status"] == 200 and response["content"]["mimeType"].startswith(
                "application/json"
            ):
                answer = json.loads(response["content"]["text"])
                assert ("result" in answer) != ("error" in answer), entry
                assert "error" not in answer or answer["error"]["code"] in JSON_RPC_CODES, entry
        # The Responses routes were fuzzed too, and served some of it (SPEC 12).
        responses = Counter(
            (e["request"]["method"], e["response"]["status"])
            for e in entries
            if "/v1/responses" in e["request"]["url"]
        )
        assert {("POST", 200), ("POST", 400), ("GET", 404), ("DELETE", 404)} <= set(responses), (
            responses
        )
        for entry in entries:
            response = entry["response"]
            if response["status"] >= 400:
                assert response["content"]["mimeType"].startswith("application/json"), entry
                error = json.loads(response["content"]["text"])["error"]
                assert error["status"] == response["status"] and error["message"], entry

        # Still serving, nothing left waiting, and a plain turn still works.
        async with aiohttp.ClientSession() as http:
            r = await http.post(
                f"{url}/api/sessions/after-fuzz/chat",
                json={"message": "still there?"},
                headers=AUTH,
            )
            assert r.status == 200
            assert (await r.json())["message"]["content"] == "echo: still there?"
            assert (await http.get(f"{url}/readyz")).status == 200
        assert app.peer is not None
        stats = app.peer.statistics()
        assert stats.waiting == 0
        print(f"\nfuzz: {len(entries)} requests, statuses {dict(sorted(statuses.items()))}")
        print(f"fuzz: schemathesis {summary['running_time']:.1f}s, peer {stats}")

    # The store is consistent: no user row left pending, one reply per answered row.
    with sqlite3.connect(db) as conn:
        states = Counter(
            s for (s,) in conn.execute("SELECT state FROM messages WHERE role = 'user'")
        )
        replies = list(
            conn.execute(
                "SELECT COUNT(a.id) FROM messages u LEFT JOIN messages a"
                " ON a.user_row_id = u.id AND a.role = 'assistant'"
                " WHERE u.role = 'user' AND u.state = 'answered' GROUP BY u.id"
            )
        )
        odd_keys = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE conversation GLOB '*[^A-Za-z0-9._:-]*'"
        ).fetchone()[0]
    assert states["pending"] == 0, states
    assert states["answered"] > 0, states
    assert {n for (n,) in replies} == {1}
    assert odd_keys == 0  # every conversation key is peer:<a valid session id>


async def raw_http(port: int, request: bytes) -> bytes:
    """Send bytes no well-behaved client would, and read the answer until the server closes."""
    chunks = []
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        with anyio.fail_after(5):
            try:
                while True:
                    chunks.append(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return b"".join(chunks)


def status_and_body(response: bytes) -> tuple[int, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_hostile_requests_get_json_errors_and_change_nothing(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(fuzz_config(db, fake.base_url)) as (app, url),
        aiohttp.ClientSession(headers=AUTH) as http,
    ):
        assert app.peer is not None and app.peer.port is not None
        # Deep nesting fits well inside the size limit; json.loads used to overflow the stack.
        for route in ("/api/sessions/s/chat", "/v1/chat/completions"):
            r = await http.post(url + route, data=b"[" * 100_000 + b"]" * 100_000)
            assert r.status == 400
            assert (await r.json())["error"]["code"] == "invalid_json"
        # A trailing newline used to pass the session id check ("$" matches before it).
        r = await http.post(f"{url}/api/sessions/alice%0A/chat", json={"message": "x"})
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "bad_session_id"
        r = await http.get(f"{url}/api/sessions/alice%0A/messages")
        assert r.status == 400
        # Non-UTF-8 bytes in the Authorization header used to raise while comparing: 500.
        for header in (b"Bearer \xff\xfe", b"\xff", b"Bearer " + TOKEN.encode() + b"\xc3"):
            answer = await raw_http(
                app.peer.port,
                b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: "
                + header
                + b"\r\nConnection: close\r\n\r\n",
            )
            status, body = status_and_body(answer)
            assert status == 401, answer
            assert json.loads(body)["error"]["code"] == "unauthorized"
        # Broken HTTP never reaches botmux: aiohttp's parser refuses it (plain text, closed
        # connection), and the server goes on.
        for garbage in (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64),  # a TLS hello
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            answer = await raw_http(app.peer.port, garbage)
            assert answer == b"" or re.match(rb"HTTP/1\.[01] 4\d\d ", answer), answer[:200]
        # None of it ran a turn or stored a row; the gateway still answers.
        assert fake.requests == []
        r = await http.post(f"{url}/api/sessions/s/chat", json={"message": "fine"})
        assert r.status == 200
    with sqlite3.connect(db) as conn:
        assert list(
            conn.execute("SELECT conversation, content FROM messages WHERE role='user'")
        ) == [("peer:s", "fine")]


async def test_openai_clients_may_send_null_for_optional_fields(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(fuzz_config(tmp_path / "b.db", fake.base_url)) as (_, url),
        aiohttp.ClientSession(headers=AUTH) as http,
    ):
        r = await http.post(
            f"{url}/v1/chat/completions",
            json={
                "model": None,
                "stream": None,
                "user": None,
                "temperature": None,
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
        assert r.status == 200
        body = await r.json()
        assert body["model"] == "botmux"
        assert body["choices"][0]["message"]["content"] == "echo: hi"
        # A user field that is no valid session id still gets a session of its own, never
        # the same id with a newline on it.
        r = await http.post(
            f"{url}/v1/chat/completions",
            json={"user": "bob\n", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status == 200
        r = await http.get(f"{url}/api/sessions/bob/messages")
        assert (await r.json())["messages"] == []
