"""The config file's value checks (``gateway.config``'s ``rule(...)``s): each takes a value
and returns what is wrong with it, or None."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

MIN_TOKEN_CHARS = 16


def url(value: Any) -> str | None:
    if re.match(r"^https?://[^\s/]+", value):
        return None
    return "must be an http:// or https:// URL"


def ws_url(value: Any) -> str | None:
    return None if re.match(r"^wss?://[^\s/]+", value) else "must be a ws:// or wss:// URL"


def listen(value: Any) -> str | None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return "must be HOST:PORT, for example 127.0.0.1:8642"
    return None


def non_empty(value: Any) -> str | None:
    return None if len(value) > 0 else "must not be empty"


def postgres_url(value: Any) -> str | None:
    if value == "" or re.match(r"^postgres(ql)?://[^\s]*$", value):
        return None
    return "must be a postgresql:// URL (or empty for the SQLite file at store.path)"


def node_id(value: Any) -> str | None:
    if value == "" or re.match(r"^[A-Za-z0-9._-]{1,48}$", value):
        return None
    return "must be 1-48 of A-Z a-z 0-9 . _ - (or empty: hostname-pid)"


def token(value: Any) -> str | None:
    if not value.strip():
        return "must not be empty or whitespace (leave tokens = [] for no auth, loopback only)"
    if len(value.strip()) < MIN_TOKEN_CHARS:
        return f"must be at least {MIN_TOKEN_CHARS} characters"
    return None


def token_name(value: Any) -> str | None:
    if re.fullmatch(r"[A-Za-z0-9._:-]{1,64}", value):
        return None
    return "must be 1-64 of A-Z a-z 0-9 . _ : -"


def network(value: Any) -> str | None:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return "must be an IP address or a CIDR network (10.0.0.0/8)"
    return None


def has_text(value: Any) -> str | None:
    return None if "text" in value else 'must include "text"'


def webhook_secret(value: Any) -> str | None:
    if re.fullmatch(r"[A-Za-z0-9_-]{0,256}", value):
        return None
    return "must be 1-256 characters of A-Z, a-z, 0-9, _ and -"


def host_port(value: str) -> tuple[str, int | None] | None:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address as (the host
    lowercased, IPv6 without brackets; the port, or None when not named), else None."""
    value = value.strip().lower()
    port: str | None = None
    if value.startswith("["):
        host, closed, rest = value[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    elif value.count(":") > 1:  # an IPv6 address without brackets names no port
        host = value
    else:
        host, colon, named = value.partition(":")
        port = named if colon else None
        if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", host):
            return None
    if value.startswith("[") or ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        return None
    return host, int(port) if port is not None else None


def push_host(value: Any) -> str | None:
    if host_port(value) is not None:
        return None
    return "must be a host name or address with an optional :port (hooks.example.com:8443)"
