"""What hostile PDFs cost the gateway (security review 2026-12-05, H-3; gateway/pdf.py).

Starts the fake model and the real gateway (``botmux run``, as a process), sends a PDF of
20,000 blank pages and prints its reply time, then ``--heavy`` PDFs of 1,000 pages that share
one expensive content stream (about 5 s of CPU a page), each to its own conversation, and
every 5 s for 30 s prints the gateway's RSS (``VmRSS``/``VmHWM`` from /proc), its PDF reading
children's RSS and another conversation's reply time; then how long SIGTERM takes to end it
(with ``drain_timeout_s = 5``: the heavy turns still run, and the drain's deadline kills
their readers).

    .venv/bin/python -m tests.bench.pdf_budget --heavy 4
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from tests.fakes._pdf import pdf_blank_pages, pdf_heavy_pages
from tests.fakes.openai_server import open_fake_model
from tests.harness import GatewayProcess, children, config_text, free_port


def memory_mb(pid: int) -> tuple[int, int]:
    """The process's RSS and peak RSS, in MB."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


def pdf(name: str, data: bytes) -> dict[str, str]:
    encoded = base64.b64encode(data).decode()
    return {"name": name, "content_type": "application/pdf", "data": encoded}


async def main(heavy_count: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="botmux-pdf-bench-"))
    port = free_port()
    async with open_fake_model() as fake:
        config = tmp / "botmux.toml"
        text = config_text(
            tmp / "b.db",
            fake.base_url,
            listen=f"127.0.0.1:{port}",
            extra="[gateway]\ndrain_timeout_s = 5\n",  # the readers still run: the drain ends them
        )
        config.write_text(text.replace("[peer]\n", "[peer]\nmax_body_bytes = 4194304\n"))
        proc = GatewayProcess(config, port, tmp / "botmux.log")
        await proc.start()
        assert proc.proc is not None
        pid = proc.proc.pid
        heavy = pdf("heavy.pdf", pdf_heavy_pages(1000))
        blank = pdf("blank.pdf", pdf_blank_pages(20_000))
        async with aiohttp.ClientSession() as http:

            async def chat(session: str, body: dict[str, Any]) -> tuple[float, str]:
                started = time.monotonic()
                raw = json.dumps(body).encode()
                headers = {"Content-Type": "application/json"}
                url = f"{proc.url}/api/sessions/{session}/chat"
                async with http.post(url, data=raw, headers=headers) as r:
                    reply = (await r.json())["message"]["content"]
                return time.monotonic() - started, str(reply)

            took, _ = await chat("other", {"message": "hi"})
            print(f"idle: gateway rss/peak {memory_mb(pid)} MB, another chat {took:.3f} s")
            took, reply = await chat("blank", {"message": "x", "attachments": [blank]})
            print(f"20,000 blank pages: {took:.2f} s; {reply.splitlines()[0][:90]!r}")
            async with anyio.create_task_group() as tg:
                for i in range(heavy_count):

                    async def send(session: str = f"heavy-{i}") -> None:
                        with contextlib.suppress(aiohttp.ClientError):
                            await chat(session, {"message": "x", "attachments": [heavy]})

                    tg.start_soon(send)
                for step in range(1, 7):
                    await anyio.sleep(5)
                    readers = [memory_mb(c)[0] for c in children(pid, "_pdf_child")]
                    took, _ = await chat("other", {"message": "hi"})
                    print(
                        f"t+{5 * step}s: gateway rss/peak {memory_mb(pid)} MB,"
                        f" readers {readers} MB, another chat {took:.3f} s"
                    )
                tg.cancel_scope.cancel()
        started = time.monotonic()
        proc.signal(15)
        with anyio.move_on_after(60):
            await proc.wait()
        print(f"SIGTERM: exit {proc.proc.returncode} after {time.monotonic() - started:.1f} s")
        await proc.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy", type=int, default=4, help="heavy PDFs sent at once")
    anyio.run(main, parser.parse_args().heavy)
