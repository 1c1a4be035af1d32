"""Memory under chat attachments (issue 15): N Telegram users each send a large file at once.

The loopback Bot API runs in this (the load) process and serves the files; the real gateway
process fetches them through its Telegram adapter (getFile, then the file URL, streamed
within ``[agent] max_attachment_bytes``), stores them and asks the fake model (in this
process too, answering "done"). The figure is the gateway's peak RSS (VmHWM from /proc) and its RSS before the
files were sent, so the growth is what the attachments cost.

    .venv/bin/python -m tests.bench.attachments_chat [users] [MiB] [document|image]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench import _procs
from tests.fakes.openai_server import ok, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import free_port


async def telegram_peak_rss(users: int, mib: int, kind: str) -> dict[str, float]:
    size = mib * 1024 * 1024
    async with open_fake_telegram() as tg, open_fake_model() as model:
        model.default = lambda r: ok("done")
        ids = list(range(1000, 1000 + users))
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            port = free_port()
            config = workdir / "botmux.toml"
            config.write_text(
                f'[store]\npath = "{workdir}/botmux.db"\n'
                f'[peer]\nlisten = "127.0.0.1:{port}"\n'
                f'[model]\nbase_url = "{model.base_url}"\nmodel = "bench"\napi_keys = ["sk-bench"]\n'
                'timeout_s = 60\ninput = ["text", "image"]\n'
                "[gateway]\nmax_concurrent_turns = 1024\n"
                f"[agent]\nmax_attachment_bytes = {size}\n"
                '[log]\nlevel = "warning"\n'
                f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\n'
                f"allow_users = {ids}\npoll_timeout_s = 5\n"
            )
            popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child
                [sys.executable, "-m", "gateway", "run", "--config", str(config)],
                cwd=_procs.ROOT,
                env={**os.environ, "PYTHONPATH": str(_procs.ROOT)},
                stderr=subprocess.DEVNULL,
            )
            try:
                await _procs.wait_http(f"http://127.0.0.1:{port}/readyz")
                for user in ids:  # warm up: one text turn per chat
                    tg.inject_message(user, "warm up", user_id=user)
                await tg.wait_until(lambda: len(tg.sent_messages()) == users)
                before = _procs.memory_kib(popen.pid)["VmRSS"]
                data = os.urandom(size)
                started = time.perf_counter()
                for user in ids:
                    if kind == "image":
                        extra = tg.files.photo(data, caption="what is this?")
                    else:
                        extra = tg.files.document(data, file_name="big.txt", caption="summarise")
                    tg.inject_message(user, user_id=user, extra=extra)
                await tg.wait_until(
                    lambda: sum(m.endswith("done") for m in tg.sent_messages()) == 2 * users
                )
                seconds = time.perf_counter() - started
                peak = _procs.memory_kib(popen.pid)["VmHWM"]
            finally:
                popen.terminate()
                popen.wait()
    return {
        "users": users,
        "file_mib": mib,
        "rss_before_mib": before / 1024,
        "peak_rss_mib": peak / 1024,
        "seconds": seconds,
        "downloads": len(tg.files.downloads),
        "replies": sorted({text[:60] for text in tg.sent_messages()}),
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    users = int(args[0]) if args else 20
    mib = int(args[1]) if len(args) > 1 else 20
    kind = args[2] if len(args) > 2 else "document"
    print(asyncio.run(telegram_peak_rss(users, mib, kind)))
