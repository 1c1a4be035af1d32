"""A reply's Bot API calls measured alone: PTB's ``Bot.send_message`` against our
``platforms.telegram._sends`` (the same request, the answer left as JSON).

    .venv/bin/python -m tests.bench.telegram_sends [--calls 2000] [--concurrency 20] [--repeat 3]

The fake Telegram runs in a child process, so this process's CPU (``time.process_time``) is
the client's alone: PTB's bot on our aiohttp transport (``BotApiRequest``), as the adapter
builds it, sending ``--calls`` messages ``--concurrency`` at a time, HTML parse mode, to
private chats. Alternates the two ways within each repetition; prints CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from telegram import Bot
from telegram.constants import ParseMode

from platforms.telegram import _sends
from platforms.telegram._transport import BotApiRequest

CHILD = """
import asyncio, json, sys
from tests.fakes.telegram_server import open_fake_telegram
async def main():
    async with open_fake_telegram() as tg:
        print(json.dumps({"origin": tg.origin, "token": tg.token}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""
TEXT = "<b>echo</b>: hello there, this is the answer to your question"


async def measure(send: Callable[[int], Awaitable[object]], calls: int, concurrency: int) -> float:
    """CPU microseconds per call of ``send(chat_id)``, ``concurrency`` at a time."""
    queue = iter(range(calls))

    async def worker() -> None:
        for n in queue:
            await send(1000 + n % 50)

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return 1e6 * (time.process_time() - cpu) / calls


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    child = subprocess.Popen(  # noqa: ASYNC220 - the fake's process, for the whole run
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdin is not None
    fake = json.loads(child.stdout.readline())
    request = BotApiRequest(connection_pool_size=args.concurrency)
    bot = Bot(fake["token"], base_url=f"{fake['origin']}/bot", request=request)
    figures: dict[str, list[float]] = {"Bot.send_message": [], "_sends.send_message": []}
    try:
        async with bot:

            async def ptb(chat: int) -> object:
                return await bot.send_message(chat, TEXT, parse_mode=ParseMode.HTML)

            async def ours(chat: int) -> object:
                return await _sends.send_message(bot, chat, TEXT, parse_mode=ParseMode.HTML)

            for send in (ptb, ours):  # warm up: connections, imports
                await measure(send, 200, args.concurrency)
            for _ in range(args.repeat):
                for name, send in (("Bot.send_message", ptb), ("_sends.send_message", ours)):
                    figures[name].append(await measure(send, args.calls, args.concurrency))
                print({k: round(v[-1], 1) for k, v in figures.items()}, flush=True)
    finally:
        child.stdin.close()
        child.wait()
    for name, values in figures.items():
        print(
            f"{name:<22} CPU per call {statistics.median(values):7.1f} us"
            f"  [{min(values):.1f} .. {max(values):.1f}]"
        )


if __name__ == "__main__":
    asyncio.run(main())
