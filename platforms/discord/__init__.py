"""Discord, through discord.py: DMs, guild channels and threads as conversations."""

import warnings

# discord.py imports audioop, deprecated since Python 3.11; import it once here, quietly,
# so that nothing else has to care.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord  # noqa: F401

from platforms.discord.adapter import DiscordAdapter

__all__ = ["DiscordAdapter"]
