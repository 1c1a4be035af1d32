"""Streamed replies on the chat platforms (SPEC 8): previews under the limits, the final's delay.

``--streams`` conversations (private chats on Telegram, DMs on Discord) each send one message
at once; the fake model (its own process, program mode) streams ``--chunks`` words
``--interval`` s apart to each. The Telegram and Discord fakes run in this process with their
per-chat / per-channel rate limits on (Telegram 3 per 3 s in a chat, Discord 5 per 5 s per
channel and route), the bot-wide ones (Telegram ~30 a second, Discord 50) only with
``--overall``: 200 answers ending within a second cannot all pass 30 a second, whatever the
gateway does. The gateway is the real ``botmux run`` with python-telegram-bot / discord.py.

Prints per platform (Telegram with drafts, the default in private chats, and with
``streaming = "edit"``; Discord): the streams answered, the previews per stream (drafts or
preview sends/edits, the final left out), the most calls one chat/channel saw in any window
of its limit against the limit, the most bot-wide in any second, the fakes' 429s, the longest
preview against the platform's length limit, and the final answer's added latency: the
platform receiving the final answer minus the model writing its last chunk (both
``time.monotonic``, one clock for the machine), p50/p95/p99.

    .venv/bin/python -m tests.bench.platform_streams --streams 200
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.bench._procs import cpu_seconds, gateway
from tests.bench.streaming import streaming_model
from tests.fakes._rate_limits import Limit
from tests.fakes.discord_server import DiscordLimits, open_fake_discord
from tests.fakes.telegram_server import TelegramLimits, open_fake_telegram

USER0 = 10_000
DM0 = 500_000


@dataclass(frozen=True, slots=True)
class Sent:
    """One call of the bot that counts toward a chat's limits (a preview or the final)."""

    chat: int
    at: float
    text: str
    ok: bool


@dataclass(frozen=True, slots=True)
class Figures:
    name: str
    streams: int
    answered: int
    previews: list[int]
    window_max: int
    limit: Limit | None
    overall_max: int
    limited: int
    longest: int
    length_limit: int
    added: list[float]
    late: int  # streams with a preview call after the model's last chunk
    cpu_s: float


def most_in_window(times: Iterable[float], seconds: float) -> int:
    ordered = sorted(times)
    best, start = 0, 0
    for end, at in enumerate(ordered):
        while ordered[start] <= at - seconds:
            start += 1
        best = max(best, end - start + 1)
    return best


def per_chat(sent: Sequence[Sent]) -> dict[int, list[Sent]]:
    chats: dict[int, list[Sent]] = {}
    for call in sent:
        chats.setdefault(call.chat, []).append(call)
    return chats


async def model_streams(http: aiohttp.ClientSession, model_url: str) -> dict[str, float]:
    """The model's last chunk, by the stream's tag (``s<conversation>``)."""
    async with http.get(f"{model_url}/fake/streams") as r:
        streams = await r.json()
    last: dict[str, float] = {}
    for stream in streams:
        for word in str(stream["last_user"]).split():
            if word.startswith("tag-"):
                last[word] = float(stream["last_at"])
    return last


def expected_text(chunks: int) -> str:
    return "".join(f"w{i} " for i in range(chunks)).strip()


async def hold(args: argparse.Namespace, pid: int) -> None:
    """``--hold S``: time to attach a profiler to the gateway (its pid printed) before the load."""
    if args.hold > 0:
        print(f"gateway pid {pid}: the streams start in {args.hold:g} s", flush=True)
        await asyncio.sleep(args.hold)


async def wait_answered(done: Callable[[], int], streams: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    # Polled: the fakes' wait_until re-checks on every request, 200 chats each time.
    while done() < streams and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def figures(
    name: str,
    args: argparse.Namespace,
    sent: Sequence[Sent],
    previews: list[int],
    last_chunk: dict[str, float],
    limit: Limit | None,
    limited: int,
    length_limit: int,
    cpu_s: float,
    drafts: Sequence[Sent] = (),
) -> Figures:
    """``sent``: the calls counted in the chats' limits (previews and finals, in order);
    ``drafts``: Telegram drafts (no limit)."""
    full = expected_text(args.chunks)
    chats = per_chat([s for s in sent if s.ok])
    shown = per_chat(drafts)
    added: list[float] = []
    late = 0
    for chat, calls in chats.items():
        if f"tag-{chat}" not in last_chunk or chat in (USER0 - 1, DM0 + USER0 - 1):
            continue  # the warm-up's
        finals = [c for c in calls if c.text.strip() == full]
        model_at = last_chunk.get(f"tag-{chat}")
        if finals and model_at is not None:
            added.append(finals[-1].at - model_at)
            before = [*calls[:-1], *shown.get(chat, [])]
            late += any(c.at > model_at for c in before)
    counted = [s for s in sent if s.ok]
    window = (
        max(
            (most_in_window([c.at for c in calls], limit.per_s) for calls in chats.values()),
            default=0,
        )
        if limit
        else 0
    )
    longest = max((len(s.text) for s in counted if s.text.strip() != full), default=0)
    return Figures(
        name,
        args.streams,
        len(added),
        previews,
        window,
        limit,
        most_in_window([s.at for s in counted], 1.0),
        limited,
        longest,
        length_limit,
        added,
        late,
        cpu_s,
    )


async def telegram(args: argparse.Namespace, model_url: str, mode: str) -> Figures:
    limits = TelegramLimits(overall=TelegramLimits().overall if args.overall else None)
    users = [USER0 + i for i in range(args.streams)]
    async with (
        open_fake_telegram(limits=limits) as tg,
        aiohttp.ClientSession() as http,
    ):
        streaming = "" if mode == "draft" else 'streaming = "edit"\n'
        section = (
            f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}"\n'
            f"allow_users = {[*users, USER0 - 1]}\npoll_timeout_s = 5\n{streaming}"
        )
        with tempfile.TemporaryDirectory() as tmp:
            async with gateway(Path(tmp), model_url, sections=section) as gw:
                full = expected_text(args.chunks)
                tg.inject_message(USER0 - 1, f"warm up tag-{USER0 - 1}", user_id=USER0 - 1)
                await wait_answered(
                    lambda: int(any(t.strip() == full for t in tg.visible_messages(USER0 - 1))),
                    1,
                    30,
                )
                await hold(args, gw.pid)
                calls0 = len(tg.calls)
                cpu0 = cpu_seconds(gw.pid)
                for user in users:
                    tg.inject_message(user, f"stream tag-{user}", user_id=user)

                def done() -> int:
                    return sum(
                        1 for u in users if any(t.strip() == full for t in tg.visible_messages(u))
                    )

                await wait_answered(done, args.streams, args.timeout)
                cpu = cpu_seconds(gw.pid) - cpu0
                last_chunk = await model_streams(http, model_url)
        calls = [c for c in tg.calls[calls0:] if c.params.get("chat_id") is not None]
        limited = sum(1 for c in calls if c.retry_after is not None)
        counted = {"sendmessage", "editmessagetext"}
        sent = [
            Sent(
                int(c.params["chat_id"]), c.at, str(c.params.get("text", "")), c.retry_after is None
            )
            for c in calls
            if c.method.lower() in counted
        ]
        if mode == "draft":  # drafts have no documented limit: the windows count messages
            drafts = [c for c in calls if c.method.lower() == "sendmessagedraft"]
            previews = [sum(1 for c in drafts if int(c.params["chat_id"]) == u) for u in users]
            longest = max((len(str(c.params.get("text", ""))) for c in drafts), default=0)
            shown = [Sent(int(c.params["chat_id"]), c.at, "", True) for c in drafts]
        else:
            chats = per_chat([s for s in sent if s.ok])
            previews = [max(len(chats.get(u, [])) - 1, 0) for u in users]
            longest, shown = None, []
        result = figures(
            f"telegram ({mode})",
            args,
            sent,
            previews,
            last_chunk,
            limits.per_chat,
            limited,
            4096,
            cpu,
            shown,
        )
        return result if longest is None else dataclasses.replace(result, longest=longest)


async def discord(args: argparse.Namespace, model_url: str) -> Figures:
    token, bot_id = "bench.discord.token", 900_000
    limits = DiscordLimits(overall=DiscordLimits().overall if args.overall else None)
    users = [USER0 + i for i in range(args.streams)]
    async with (
        open_fake_discord(token=token, bot_user_id=bot_id, rate_limits=limits) as dc,
        aiohttp.ClientSession() as http,
    ):
        for user in [USER0 - 1, *users]:
            dc.add_user(user, f"user{user}")
            dc.add_dm_channel(DM0 + user, user)
        section = (
            f'[discord]\ntoken = "{token}"\napi_base = "{dc.api_base}"\n'
            f'gateway_url = "{dc.gateway_url}"\nallow_users = {[*users, USER0 - 1]}\n'
            "guild_ready_timeout_s = 0.05\nslash_commands = false\n"
        )
        full = expected_text(args.chunks)
        with tempfile.TemporaryDirectory() as tmp:
            async with gateway(Path(tmp), model_url, sections=section) as gw:
                warm = DM0 + USER0 - 1
                await dc.inject_message(warm, f"warm up tag-{warm}", author_id=USER0 - 1)
                await wait_answered(
                    lambda: int(any(t.strip() == full for t in dc.visible_contents(warm))), 1, 30
                )
                await hold(args, gw.pid)
                calls0 = len(dc.rest_calls)
                cpu0 = cpu_seconds(gw.pid)
                for user in users:
                    await dc.inject_message(DM0 + user, f"stream tag-{DM0 + user}", author_id=user)

                def done() -> int:
                    return sum(
                        1
                        for u in users
                        if any(t.strip() == full for t in dc.visible_contents(DM0 + u))
                    )

                await wait_answered(done, args.streams, args.timeout)
                cpu = cpu_seconds(gw.pid) - cpu0
                last_chunk = await model_streams(http, model_url)
        calls = dc.rest_calls[calls0:]
        limited = sum(1 for c in calls if c.retry_after is not None)
        sent = []
        for c in calls:
            if c.method not in ("POST", "PATCH") or not c.path.startswith("/channels/"):
                continue
            if "/messages" not in c.path or "/typing" in c.path:
                continue
            chat = int(c.path.split("/")[2])
            text = str((c.json or {}).get("content", "")) if isinstance(c.json, dict) else ""
            sent.append(Sent(chat, c.arrived, text, c.retry_after is None and c.status < 300))
        chats = per_chat([s for s in sent if s.ok])
        previews = [max(len(chats.get(DM0 + u, [])) - 1, 0) for u in users]
        return figures(
            "discord", args, sent, previews, last_chunk, limits.per_channel, limited, 2000, cpu
        )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def show(f: Figures, overall: bool) -> None:
    per = f.previews
    limit = f"{f.limit.calls} per {f.limit.per_s:g} s" if f.limit else "none"
    print(f"{f.name}: {f.answered}/{f.streams} streams answered")
    print(
        f"  previews per stream: mean {statistics.mean(per):.2f}, max {max(per)}, "
        f"none {sum(1 for p in per if p == 0)}"
    )
    print(
        f"  most calls in one chat in any window: {f.window_max} (the fake's limit {limit});"
        f" bot-wide in any second: {f.overall_max}"
        f" (the fake's overall limit {'on' if overall else 'off'}); 429s: {f.limited}"
    )
    print(f"  longest preview: {f.longest} characters (limit {f.length_limit})")
    ms = [a * 1000 for a in f.added]
    print(
        f"  final added latency: p50 {pct(ms, 0.5):.1f} ms, p95 {pct(ms, 0.95):.1f} ms,"
        f" p99 {pct(ms, 0.99):.1f} ms, max {max(ms, default=float('nan')):.1f} ms;"
        f" {f.late} streams had a preview call after the model's last chunk"
    )
    print(f"  gateway CPU: {f.cpu_s:.2f} s ({1000 * f.cpu_s / max(f.streams, 1):.2f} ms a stream)")


async def main(args: argparse.Namespace) -> None:
    async with streaming_model(args.first, args.chunks, args.interval) as model:
        print(
            f"model: {args.chunks} chunks {args.interval * 1000:.0f} ms apart, first after"
            f" {args.first * 1000:.0f} ms; {args.streams} streams at once"
        )
        for platform in args.platforms.split(","):
            if platform == "telegram-draft":
                f = await telegram(args, model.url, "draft")
            elif platform == "telegram-edit":
                f = await telegram(args, model.url, "edit")
            else:
                f = await discord(args, model.url)
            show(f, args.overall)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--first", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to attach a profiler")
    parser.add_argument("--overall", action="store_true", help="the bot-wide limits too")
    parser.add_argument("--platforms", default="telegram-draft,telegram-edit,discord")
    asyncio.run(main(parser.parse_args()))
