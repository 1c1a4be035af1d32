"""The fake model's overlap record, which the cluster tests rely on: two calls of one session
overlap when both clients were waiting at once, not when the first had hung up before the
second was sent (however late this server reads the hang-up)."""

from __future__ import annotations

import socket

import aiohttp
import anyio
import pytest

from tests.fakes.openai_server import Hold, open_fake_model

pytestmark = pytest.mark.anyio


def body(text: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


async def test_two_waiting_clients_of_one_session_overlap() -> None:
    async with open_fake_model() as fake, aiohttp.ClientSession() as http:
        fake.script(Hold(), Hold())
        url = f"{fake.base_url}/chat/completions"

        async def call(text: str) -> None:
            async with http.post(url, json=body(text)) as r:
                assert r.status == 200

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "s#1")
            await fake.wait_for_requests(1)
            tg.start_soon(call, "s#2")
            await fake.wait_for_requests(2)
            fake.release()
    assert [
        (late.last_user, [r.last_user for r in running]) for late, running in fake.overlaps
    ] == [("s#2", ["s#1"])]


async def test_a_call_whose_client_hung_up_first_is_no_overlap() -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(), Hold())
        host, port = fake.base_url.removeprefix("http://").split("/")[0].split(":")
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 58\r\n\r\n{"model":"m","messages":[{"role":"user","content":"s#1"}]}'
        )
        with (
            socket.create_connection((host, int(port))) as first,
            socket.create_connection((host, int(port))) as second,
        ):
            first.sendall(request)
            await fake.wait_for_requests(1)
            # The first client hangs up, and the second call arrives before this server has
            # read the hang-up (a busy loop: here, reading is paused on the first connection).
            ((_, held),) = fake.in_flight["all"]
            assert held.transport is not None
            held.transport.pause_reading()
            first.shutdown(socket.SHUT_RDWR)
            second.sendall(request.replace(b"s#1", b"s#2"))
            with anyio.fail_after(5):
                await fake.wait_for_requests(2)
            assert len(fake.in_flight["all"]) == 2  # the first is still running here
            fake.release()
    assert fake.overlaps == []
