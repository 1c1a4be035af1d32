"""Attachment downloads from the chat platforms, one after another (SPEC 9's fetch).

    .venv/bin/python -m tests.bench.downloads [--files 300] [--kib 200] [--repeat 3]

Fetches ``--files`` files of ``--kib`` KiB each through the adapters' own fetch code against
the loopback fakes, in this process (uvloop, as ``botmux run``): Telegram's ``getFile`` then
the file URL, with python-telegram-bot on the gateway's ``BotApiRequest``; Discord's CDN
URL through the adapter's ``Fetching``. Figures per file: wall time (p50, p99), this
process's CPU (the fake's share included, the same before and after), and the connections
the fake saw (distinct client ports). Loopback has no TLS: in production a new connection
also costs a TLS handshake, which this does not show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable

from telegram import Bot

from gateway.messages import AttachmentRef
from platforms.discord import _attachments as discord_files
from platforms.telegram import _files as telegram_files
from platforms.telegram._transport import BotApiRequest
from tests.bench._figures import spread
from tests.fakes.discord_server import open_fake_discord
from tests.fakes.telegram_server import open_fake_telegram

LIMIT = 20 << 20


async def _timed(files: int, fetch: Callable[[], Awaitable[bytes]]) -> dict[str, float]:
    await fetch()  # warm: the first connection and the imports are not the steady state
    walls = []
    cpu0 = time.process_time()
    for _ in range(files):
        started = time.perf_counter()
        await fetch()
        walls.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu0
    walls.sort()
    return {
        "wall_p50_ms": 1e3 * walls[len(walls) // 2],
        "wall_p99_ms": 1e3 * walls[int(len(walls) * 0.99)],
        "cpu_ms": 1e3 * cpu / files,
    }


def _connections(downloads: list[object]) -> float:
    clients = {getattr(d, "client", None) for d in downloads}
    return float("nan") if None in clients else float(len(clients))


async def telegram(files: int, size: int) -> dict[str, float]:
    async with open_fake_telegram() as tg:
        photo = tg.files.photo(os.urandom(100), os.urandom(size))
        item = photo["photo"]
        assert isinstance(item, list) and isinstance(item[-1], dict)
        ref = AttachmentRef("image", "p.jpg", "image/jpeg", None, str(item[-1]["file_id"]))
        request = BotApiRequest(connection_pool_size=32)
        bot = Bot(tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url, request=request)
        async with bot:
            figures = await _timed(
                files, lambda: telegram_files.fetch(bot, ref, limit=LIMIT, timeout_s=30.0)
            )
        return {**figures, "connections": _connections(list(tg.files.server.downloads))}


async def discord(files: int, size: int) -> dict[str, float]:
    async with open_fake_discord(token="discord-token", bot_user_id=42) as dc:
        attachment = dc.cdn.attachment(os.urandom(size), filename="cat.png")
        ref = AttachmentRef("image", "cat.png", "image/png", size, str(attachment["url"]))
        fetching = discord_files.Fetching()
        try:
            figures = await _timed(files, lambda: fetching.fetch(ref, limit=LIMIT))
        finally:
            close = getattr(fetching, "close_downloads", None)  # absent before the pool
            if close is not None:
                await close()
        return {**figures, "connections": _connections(list(dc.cdn.downloads))}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--kib", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size = args.kib << 10
    for name, bench in (("telegram", telegram), ("discord", discord)):
        runs = []
        for _ in range(args.repeat):
            runs.append(await bench(args.files, size))
            print(f"  {name} {runs[-1]}", flush=True)
        for key in runs[0]:
            print(f"{name:<9} {key:<12} {spread([r[key] for r in runs], width=9)}")


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is in the run extras
        asyncio.run(main())
    else:
        uvloop.run(main())
