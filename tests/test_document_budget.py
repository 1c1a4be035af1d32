"""PDF reading within a budget, end to end (security review 2026-12-05, H-3): a real gateway
(in process, and as a real process for SIGTERM), the peer API, the fake model.

A PDF is read by a child process (gateway/pdf.py). What is asserted is what a user and an
operator see: ``/stop`` answers and the reading child is gone (``ps`` would not show it), a
SIGTERM drains and exits with no child left behind, and a PDF of 20,000 blank pages is read
up to ``max_document_pages`` with the reply saying so, while another conversation is answered.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from tests.fakes._pdf import pdf_blank_pages, pdf_heavy_pages
from tests.fakes.openai_server import FakeModel, Ok, Request, open_fake_model
from tests.harness import (
    GatewayProcess,
    children,
    config_text,
    free_port,
    is_running,
    running_gateway,
    wait_for_child,
)

pytestmark = [pytest.mark.anyio, pytest.mark.gateway, pytest.mark.process]

READER = "gateway._pdf_child"


def echo(request: Request) -> Ok:
    return Ok(f"read: {request.last_user[-80:]}")


def pdf(name: str, data: bytes) -> dict[str, str]:
    encoded = base64.b64encode(data).decode()
    return {"name": name, "content_type": "application/pdf", "data": encoded}


def text(tmp_path: Path, fake: FakeModel, agent: str, peer: str = "", listen: str = "") -> str:
    body = config_text(
        tmp_path / "b.db",
        fake.base_url,
        listen=listen or "127.0.0.1:0",
        extra=f"[agent]\n{agent}\n",
    )
    return body.replace("[peer]\n", f"[peer]\n{peer}", 1)


async def chat(http: aiohttp.ClientSession, url: str, session: str, body: dict[str, Any]) -> str:
    raw = io.BytesIO(json.dumps(body).encode())  # a large body as a stream, as aiohttp asks
    headers = {"Content-Type": "application/json"}
    async with http.post(f"{url}/api/sessions/{session}/chat", data=raw, headers=headers) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["message"]["content"])


async def test_stop_ends_the_reading_child_at_once(tmp_path: Path) -> None:
    """The review's /stop that "did nothing": the heavy PDF has most of its 30 s left."""
    heavy = pdf("heavy.pdf", pdf_heavy_pages(10))
    async with open_fake_model() as fake:
        fake.default = echo
        config = parse_config(text(tmp_path, fake, ""), source="t", env={})
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            replies: list[str] = []
            async with anyio.create_task_group() as tg:

                async def send() -> None:
                    body = {"message": "summarise", "attachments": [heavy]}
                    replies.append(await chat(http, url, "pdf", body))

                tg.start_soon(send)
                with anyio.fail_after(20):
                    reader = await wait_for_child(os.getpid(), READER)
                with anyio.fail_after(5):
                    stop = await chat(http, url, "pdf", {"message": "/stop"})
            assert stop == "Stopping the current reply."
            assert replies == ["The turn was stopped before it answered."]
            assert not is_running(reader)
            assert await chat(http, url, "pdf", {"message": "still there?"}) == (
                "read: still there?"
            )
    assert [r.last_user for r in fake.requests] == ["still there?"]


async def test_twenty_thousand_blank_pages_are_read_up_to_the_page_cap_beside_other_work(
    tmp_path: Path,
) -> None:
    blank = pdf("blank.pdf", pdf_blank_pages(20_000))  # 2 MB: the review's 3.2 s of CPU
    async with open_fake_model() as fake:
        fake.default = echo
        peer = "max_body_bytes = 4194304\n"
        config = parse_config(text(tmp_path, fake, "", peer), source="t", env={})
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            answers: dict[str, str] = {}
            took: dict[str, float] = {}
            order: list[str] = []  # the sessions, as they were answered

            async def send(session: str, body: dict[str, Any]) -> None:
                started = time.monotonic()
                answers[session] = await chat(http, url, session, body)
                took[session] = time.monotonic() - started
                order.append(session)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(send, "pdf", {"message": "pages?", "attachments": [blank]})
                    # Another conversation's message once the PDF is being read (or, on a
                    # machine that fast, read).
                    while not children(os.getpid(), READER) and "pdf" not in answers:  # noqa: ASYNC110
                        await anyio.sleep(0.01)
                    reading = "pdf" not in answers
                    tg.start_soon(send, "other", {"message": "hello"})
    assert answers["other"] == "read: hello"
    if reading:  # the other conversation did not wait for the PDF's reading
        assert order == ["other", "pdf"]
    cap = "pages 1-500 of 20,000 were read (max_document_pages = 500)"
    first, _, rest = answers["pdf"].partition("\n")
    assert first == f"blank.pdf: only {cap}."
    assert rest.endswith(f"[{cap}]")  # the model was told too
    print(f"the PDF answered in {took['pdf']:.2f} s, another conversation in {took['other']:.3f} s")
    print(f"the PDF was still being read when the other message came: {reading}")


async def test_sigterm_drains_and_leaves_no_reading_child(tmp_path: Path) -> None:
    """The review's gateway that was still running 70 s after SIGTERM."""
    port = free_port()
    async with open_fake_model() as fake:
        config = tmp_path / "botmux.toml"
        agent = "[gateway]\ndrain_timeout_s = 1"
        config.write_text(text(tmp_path, fake, agent, listen=f"127.0.0.1:{port}"))
        proc = GatewayProcess(config, port, tmp_path / "botmux.log")
        await proc.start()
        assert proc.proc is not None
        heavy = pdf("heavy.pdf", pdf_heavy_pages(10))
        try:
            async with anyio.create_task_group() as tg, aiohttp.ClientSession() as http:

                async def send() -> None:
                    body = {"message": "summarise", "attachments": [heavy]}
                    # The gateway stops under it: the log and the model say what happened.
                    with contextlib.suppress(aiohttp.ClientError):
                        await http.post(f"{proc.url}/api/sessions/pdf/chat", json=body)

                tg.start_soon(send)
                with anyio.fail_after(20):
                    reader = await wait_for_child(proc.proc.pid, READER)
                proc.signal(signal.SIGTERM)
                with anyio.fail_after(10):  # drain_timeout_s = 1, plus the stop's own steps
                    assert await proc.wait() == 0, proc.log_tail()
                tg.cancel_scope.cancel()
        finally:
            await proc.kill()
    assert not is_running(reader)
    assert "unfinished turns stay pending" in proc.log()
    assert fake.requests == []
