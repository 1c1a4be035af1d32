"""What an operator should hear about a configuration before it serves (SPEC section 14).

The loader refuses what cannot be safe (no tokens on a public address). What is merely risky
is said here, once, by ``botmux check`` (printed) and ``botmux run`` (logged), and refused by
neither: a platform open to anyone who finds the bot, a secret sent in cleartext to another
host, a config file or store that others can read.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from gateway.config import Config

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """A name or address of this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cleartext(url: str) -> bool:
    """``http://`` or ``ws://`` to a host that is not this machine."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "ws") and not is_loopback(parts.hostname or "")


def access_warnings(config: Config) -> list[str]:
    """Open platforms and cleartext transports, from the config alone."""
    found: list[str] = []
    dc = config.discord
    if dc is not None and dc.guild_access == "everyone" and not dc.allow_guilds:
        found.append(
            'discord is open: guild_access = "everyone" with allow_guilds empty lets every'
            " member of every guild the bot is added to use it (and spend the model budget);"
            ' list allow_guilds, or set guild_access = "allowed"'
        )
    if config.model is not None:
        for i, endpoint in enumerate(config.model.chain):
            if _cleartext(endpoint.base_url):
                key = "model.base_url" if i == 0 else f"model.fallbacks[{i - 1}].base_url"
                found.append(
                    f"{key} is cleartext http:// to another host ({endpoint.base_url}): API"
                    " keys and conversations travel unencrypted (use https://)"
                )
    platforms = [
        ("telegram", config.telegram),
        ("discord", config.discord),
        ("slack", config.slack),
    ]
    for name, platform in platforms:
        if platform is not None and _cleartext(platform.api_base):
            found.append(
                f"{name}.api_base is cleartext http:// to another host ({platform.api_base}):"
                " the bot token travels unencrypted (use https://)"
            )
    if dc is not None and _cleartext(dc.gateway_url):
        found.append(
            f"discord.gateway_url is cleartext ws:// to another host ({dc.gateway_url}):"
            " the bot token travels unencrypted (use wss://)"
        )
    return found


def _readable_by_others(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & 0o077)
    except FileNotFoundError:
        return False


def permission_warnings(config: Config) -> list[str]:
    """A config file holding secrets, or an existing SQLite store, readable by others."""
    found: list[str] = []
    embedded = config.source == "(embedded defaults)"
    if not embedded and config.secrets() and _readable_by_others(config.source):
        found.append(f"{config.source} holds secrets and is readable by others (chmod 600)")
    if not config.store.shared:
        for suffix in ("", "-wal", "-shm"):
            path = config.store.path + suffix
            if _readable_by_others(path):
                found.append(
                    f"the store {path} is open to group or others (chmod 600): it holds every"
                    " conversation"
                )
    return found


def warnings(config: Config) -> list[str]:
    return access_warnings(config) + permission_warnings(config)
