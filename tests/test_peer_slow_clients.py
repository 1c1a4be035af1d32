"""Slow and greedy clients against the real gateway process (SPEC 14, review H3 and L3).

Raw sockets play the attacker: connections that trickle their headers, send an over-long
header line, or hang up on a stream. The gateway closes what is too slow, refuses
connections past its cap, keeps serving valid requests, and writes no ERROR and no
traceback for any of it. Deadlines here (fail_after) only stop a broken test; nothing
asserts how long anything took.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from tests.fakes.openai_server import Hold, Sleep, ok, open_fake_model, streamed
from tests.harness import GatewayProcess, config_text, free_port, make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.process]


def gateway(
    tmp_path: Path, model_url: str | None, peer: str, level: str = "info"
) -> GatewayProcess:
    port = free_port()
    listen = f'listen = "127.0.0.1:{port}"\n'
    text = config_text(tmp_path / "b.db", model_url, listen=f"127.0.0.1:{port}")
    text = text.replace(listen, listen + peer) + f'\n[log]\nlevel = "{level}"\nformat = "json"\n'
    path = tmp_path / "botmux.toml"
    path.write_text(text)
    return GatewayProcess(path, port, tmp_path / "botmux.log")


async def open_slow(port: int) -> anyio.abc.SocketStream:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n")
    return stream


async def closed_by_server(stream: anyio.abc.SocketStream) -> bytes:
    """Keep trickling header lines until the server closes; what it sent, if anything."""
    received = b""
    n = 0
    while True:
        try:
            await stream.send(f"X-Slow-{n}: 1\r\n".encode())
            n += 1
            with anyio.move_on_after(0.1):
                chunk = await stream.receive()
                received += chunk
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
            return received


async def wait_closed(stream: anyio.abc.SocketStream) -> bytes:
    """Send nothing; what the server sent before it closed."""
    received = b""
    try:
        while True:
            received += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
        await stream.aclose()
        return received


async def read_response(stream: anyio.abc.SocketStream) -> bytes:
    """One whole response with a Content-Length (head and body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive()
    return data


def problems(log: str) -> list[str]:
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [
        line["event"] for line in lines if line["level"] in ("error", "critical") or "exc" in line
    ]


async def test_slow_header_connections_are_closed_and_valid_requests_served(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        node = gateway(
            tmp_path, fake.base_url, "header_timeout_s = 0.5\nidle_timeout_s = 30\n", "debug"
        )
        try:
            await node.start()
            slow = [await open_slow(node.port) for _ in range(40)]
            async with aiohttp.ClientSession() as http:
                r = await http.post(
                    f"{node.url}/api/sessions/victim/chat", json={"message": "still here"}
                )
                assert r.status == 200
                assert (await r.json())["message"]["content"] == "echo: still here"
            with anyio.fail_after(20):
                for stream in slow:
                    # Trickling header lines does not keep a connection: the deadline counts
                    # from the connection, not from the last byte.
                    assert await closed_by_server(stream) == b""
                    await stream.aclose()
            # An over-long header line: 400 on that connection, one warning line.
            with anyio.fail_after(10):
                stream = await anyio.connect_tcp("127.0.0.1", node.port)
                await stream.send(
                    b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: "
                    + b"A" * 20_000
                    + b"\r\n\r\n"
                )
                answer = await wait_closed(stream)
            assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
            # Not HTTP at all (a TLS hello): 400, a debug line, no traceback.
            with anyio.fail_after(10):
                stream = await anyio.connect_tcp("127.0.0.1", node.port)
                await stream.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")
                assert b"400" in (await wait_closed(stream)).split(b"\r\n", 1)[0]
            # A kept-alive connection idle between requests is the idle timeout's (30 s here),
            # not the header deadline's: it still serves a request after the deadline passed.
            with anyio.fail_after(10):
                stream = await anyio.connect_tcp("127.0.0.1", node.port)
                request = b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n"
                for _ in range(2):
                    await stream.send(request)
                    head = await read_response(stream)
                    assert head.startswith(b"HTTP/1.1 200"), head[:80]
                    await anyio.sleep(1.0)  # twice the header deadline
                await stream.aclose()
        finally:
            node.signal(signal.SIGTERM)
            with anyio.fail_after(20):
                await node.wait()
    log = node.log()
    assert problems(log) == [], node.log_tail()
    assert "Traceback" not in log
    assert "a bad request was refused" in log  # the over-long header, as one warning line
    assert "AAAAAAAAAA" * 20 not in log  # and not the client's bytes at length


async def test_at_the_connection_cap_idle_ones_make_room_and_busy_ones_503(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"re {r.last_user}"))
        node = gateway(tmp_path, fake.base_url, "header_timeout_s = 30\nmax_connections = 5\n")
        try:
            await node.start()
            # Five connections that send nothing fill the cap; a prompt client still gets in,
            # in the place of the oldest of them.
            idle = [await anyio.connect_tcp("127.0.0.1", node.port) for _ in range(5)]
            async with aiohttp.ClientSession() as http:
                r = await http.get(f"{node.url}/v1/models")
                assert r.status == 200
            with anyio.fail_after(20):
                assert await wait_closed(idle[0]) == b""
            for stream in idle[1:]:
                await stream.aclose()
            # Five connections each with a request in progress: nothing to make room with,
            # so a sixth is refused with 503 at once.
            async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
                replies: list[int] = []

                async def chat(n: int) -> None:
                    url = f"{node.url}/api/sessions/s{n}/chat"
                    async with http.post(url, json={"message": f"m{n}"}) as r:
                        replies.append(r.status)

                for n in range(5):
                    tg.start_soon(chat, n)
                with anyio.fail_after(20):
                    await fake.wait_for_requests(5)  # all five are in, each holds a slot
                    refusal = await wait_closed(await anyio.connect_tcp("127.0.0.1", node.port))
                fake.release()
            assert replies == [200] * 5
        finally:
            node.signal(signal.SIGTERM)
            with anyio.fail_after(20):
                await node.wait()
    assert refusal.startswith(b"HTTP/1.1 503")
    assert b"Retry-After: 1" in refusal
    assert json.loads(refusal.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "overloaded"
    assert problems(node.log()) == [], node.log_tail()
    assert "connection cap reached" in node.log()


@pytest.mark.gateway
async def test_a_stream_that_goes_quiet_after_a_piece_gets_a_keepalive(tmp_path: Path) -> None:
    """The keep-alive compares the pieces written once a ``sse_keepalive_s``: a stream silent
    after its first piece gets a comment within twice that of it, and the answer completes."""
    body = {"messages": [{"role": "user", "content": "then wait"}], "stream": True}
    async with open_fake_model() as fake:
        fake.default = lambda r: streamed("first ", "last", hold_after=1)
        async with (
            running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (app, url),
            aiohttp.ClientSession() as http,
        ):
            assert app.peer is not None
            app.peer.sse_keepalive_s = 0.2
            async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                lines: list[bytes] = []
                while not any(b'"first "' in x for x in lines):
                    lines.append((await r.content.readline()).strip())
                with anyio.fail_after(0.4 + 0.3):  # twice the keep-alive, and some slack
                    while (line := (await r.content.readline()).strip()) == b"":
                        pass
                assert line == b": keepalive"
                fake.release_streams()
                rest = [x.strip() async for x in r.content if x.strip()]
            assert b'"last"' in b"".join(rest) and rest[-1] == b"data: [DONE]"


@pytest.mark.gateway
async def test_a_long_stream_gets_keepalives_and_a_hang_up_is_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"messages": [{"role": "user", "content": "slow one"}], "stream": True}
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"done: {r.last_user}"))
        async with (
            running_gateway(make_config(tmp_path / "b.db", fake.base_url)) as (app, url),
            aiohttp.ClientSession() as http,
        ):
            assert app.peer is not None
            app.peer.sse_keepalive_s = 0.3
            lines: list[bytes] = []
            started = anyio.current_time()
            async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                assert r.status == 200
                assert r.headers["Content-Type"] == "text/event-stream"
                while len(lines) < 3:  # three comments, while the model still holds the reply
                    line = await r.content.readline()
                    if line.strip():
                        lines.append(line.strip())
                assert lines == [b": keepalive"] * 3
                # One every keepalive_s (0.9 s), not one every other (a comment is no piece).
                assert anyio.current_time() - started < 1.4
                fake.release()
                async for line in r.content:
                    if line.strip():
                        lines.append(line.strip())
            events = [json.loads(x[6:]) for x in lines if x.startswith(b"data: {")]
            assert (
                "".join(e["choices"][0]["delta"].get("content", "") for e in events)
                == "done: slow one"
            )
            assert lines[-1] == b"data: [DONE]"
            # A client that leaves a stream while it waits: the turn still completes and is
            # stored; the hang-up is no ERROR.
            fake.default = lambda r: Sleep(0.5, ok("for nobody"))
            async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                assert (await r.content.readline()).strip() == b": keepalive"
            with anyio.fail_after(10):
                await fake.wait_for_completed(2)
    assert [r.levelname for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")] == []
    assert all(r.exc_info is None for r in caplog.records if r.name.startswith("platforms"))


@pytest.mark.gateway
async def test_one_token_holds_at_most_its_share_of_the_connections(tmp_path: Path) -> None:
    """Security review 2026-12-05, L-2: a token's waiting requests took every slot and the
    others got 503. Now a token holds at most half of ``max_connections`` (or its own
    ``max_connections``): past it 429, and another token still gets in."""
    hog, other = "hog-token-0123456789abcdef", "other-token-0123456789abcd"
    listen = 'listen = "127.0.0.1:0"\n'
    async with open_fake_model() as fake:
        fake.default = lambda r: Hold(ok(f"re {r.last_user}"))
        text = config_text(tmp_path / "b.db", fake.base_url).replace(
            listen,
            listen
            + "max_connections = 6\n"
            + f'[[peer.tokens]]\ntoken = "{hog}"\nname = "hog"\n'
            + f'[[peer.tokens]]\ntoken = "{other}"\nname = "other"\nmax_connections = 1\n',
        )
        config = parse_config(text, source="test", env={})
        as_hog = {"Authorization": f"Bearer {hog}"}
        as_other = {"Authorization": f"Bearer {other}"}
        async with (
            running_gateway(config) as (_, url),
            aiohttp.ClientSession(headers=as_hog) as http,
            aiohttp.ClientSession(headers=as_other) as first,
            aiohttp.ClientSession(headers=as_other) as second,
        ):
            statuses: list[int] = []
            codes: list[str] = []
            refused = anyio.Event()

            async def chat(n: int) -> None:
                url_n = f"{url}/api/sessions/s{n}/chat"
                async with http.post(url_n, json={"message": f"m{n}"}) as r:
                    statuses.append(r.status)
                    if r.status == 429:
                        codes.append((await r.json())["error"]["code"])
                if statuses.count(429) == 3:
                    refused.set()

            async with anyio.create_task_group() as tg:
                for n in range(6):
                    tg.start_soon(chat, n)
                with anyio.fail_after(10):
                    await fake.wait_for_requests(3)  # three wait for the model...
                    await refused.wait()  # ...and three were refused at once
                    assert (await first.get(f"{url}/v1/models")).status == 200
                    # Its own share is one connection: the first session's, idle, holds it.
                    over = await second.get(f"{url}/v1/models")
                    assert over.status == 429 and over.headers["Retry-After"] == "1"
                fake.release()
    assert sorted(statuses) == [200, 200, 200, 429, 429, 429]
    assert codes == ["too_many_connections"] * 3
