"""The one table that turns discord.py's and aiohttp's exceptions into ``PlatformError``.

Called only where the adapter calls discord.py (``raise translate(exc) from exc``). It
states facts, not decisions: the status, Discord's ``retry_after``, whether the request may
have been carried out (``ambiguous``) and whether repeating it cannot duplicate it
(``idempotent``: a message send carries a nonce with ``enforce_nonce``, so Discord returns
the message it already made). ``policy.classify_send`` decides what to retry.
"""

from __future__ import annotations

import asyncio

import aiohttp
import discord

from gateway.errors import PlatformError


def translate(exc: BaseException, *, idempotent: bool = False) -> PlatformError:
    """``idempotent``: the failed call was a nonce-carrying send (safe to repeat)."""
    name = type(exc).__name__
    if isinstance(exc, discord.LoginFailure):  # never quote what was refused
        return PlatformError("discord refused the bot token (401)", status=401)
    if isinstance(exc, discord.RateLimited):
        # discord.py waits out 429s itself up to ``rate_limit_wait_s``; longer ones reach us.
        return PlatformError(
            f"discord rate limited for {exc.retry_after:.1f}s",
            status=429,
            retry_after=exc.retry_after,
            idempotent=idempotent,
        )
    if isinstance(exc, discord.DiscordServerError):
        # A 5xx (after discord.py's own retries): the message may exist.
        return PlatformError(
            f"discord server error {exc.status}: {exc.text[:200]}",
            status=exc.status,
            ambiguous=True,
            idempotent=idempotent,
        )
    if isinstance(exc, discord.HTTPException):
        # 4xx: Discord refused and created nothing (a 429 here is the Cloudflare shape,
        # without the headers discord.py waits on).
        return PlatformError(
            f"discord refused ({exc.status}, code {exc.code}): {exc.text[:200]}",
            status=exc.status,
            idempotent=idempotent,
        )
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        # The request may or may not have reached Discord.
        return PlatformError(
            f"discord unreachable: {name}: {exc}"[:300],
            status=0,
            ambiguous=True,
            idempotent=idempotent,
        )
    if isinstance(exc, discord.ClientException):
        return PlatformError(f"discord client not usable: {name}: {exc}"[:300], status=0)
    return PlatformError(f"discord call failed: {name}: {exc}"[:300], status=0, ambiguous=True)


TRANSLATED: tuple[type[BaseException], ...] = (
    discord.DiscordException,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
)
"""What ``translate`` knows: catch exactly these where discord.py is called."""
