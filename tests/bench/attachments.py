"""Peak memory of the gateway under concurrent large uploads (SPEC 9's memory figure).

Starts the fake model and the real gateway as processes, sends ``--uploads`` concurrent chat
requests through the peer API, each with one ``--mib`` MiB image inline (base64), and prints
the gateway's peak RSS (``VmHWM`` from /proc, the whole process) and how long it took. With
``--vision`` the model sees images (each image then goes to the model as a data URL); without,
the image is stored and the text answered.

    .venv/bin/python -m tests.bench.attachments --uploads 20 --mib 20 --vision
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.bench._procs import ROOT, fake_model, memory_kib, wait_http
from tests.harness import free_port


async def run(uploads: int, mib: int, vision: bool) -> dict[str, object]:
    data = base64.b64encode(os.urandom(mib << 20)).decode()
    body = json.dumps(
        {
            "message": "what is it?",
            "attachments": [{"name": "p.png", "content_type": "image/png", "data": data}],
        }
    ).encode()
    del data
    with tempfile.TemporaryDirectory() as tmp:
        async with fake_model() as model:
            port = free_port()
            config = Path(tmp) / "botmux.toml"
            config.write_text(
                f'[store]\npath = "{tmp}/botmux.db"\n'
                f'[peer]\nlisten = "127.0.0.1:{port}"\nmax_body_bytes = {len(body) + 4096}\n'
                f'[model]\nbase_url = "{model.url}"\nmodel = "bench"\napi_keys = ["sk-bench"]\n'
                f"timeout_s = 120\n"
                + ('input = ["text", "image"]\n' if vision else "")
                + f"[agent]\nmax_attachment_bytes = {(mib << 20) + 1}\n"
                '[log]\nlevel = "warning"\n'
            )
            popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child
                [sys.executable, "-m", "gateway", "run", "--config", str(config)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stderr=subprocess.DEVNULL,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                await wait_http(f"{url}/readyz")
                before = memory_kib(popen.pid)
                started = time.perf_counter()
                timeout = aiohttp.ClientTimeout(total=600)
                async with aiohttp.ClientSession(timeout=timeout) as http:

                    async def one(i: int) -> int:
                        async with http.post(
                            f"{url}/api/sessions/u{i}/chat",
                            data=body,
                            headers={"Content-Type": "application/json"},
                        ) as r:
                            await r.read()
                            return r.status

                    statuses = await asyncio.gather(*(one(i) for i in range(uploads)))
                seconds = time.perf_counter() - started
                after = memory_kib(popen.pid)
            finally:
                popen.terminate()
                popen.wait()
    return {
        "uploads": uploads,
        "mib": mib,
        "vision": vision,
        "statuses": sorted(set(statuses)),
        "seconds": round(seconds, 2),
        "rss_idle_mib": round(before["VmRSS"] / 1024, 1),
        "peak_rss_mib": round(after["VmHWM"] / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--mib", type=int, default=20)
    parser.add_argument("--vision", action="store_true")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.uploads, args.mib, args.vision))))


if __name__ == "__main__":
    main()
