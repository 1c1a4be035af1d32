"""The peer API's rules without tokens (SPEC 14): only this machine's programs are served.

A web page the operator opens could otherwise reach a loopback listener: DNS rebinding sends
a foreign ``Host``, a cross-site request a foreign ``Origin``, a form POST a non-JSON body.
"""

from __future__ import annotations

import ipaddress

from aiohttp import web
from yarl import URL

from platforms.peer.errors import json_error

_LOOPBACK_NAMES = ("localhost",)


def _loopback(host: str | None, listen_host: str) -> bool:
    """Whether a Host or Origin host names this machine's loopback."""
    if not host:
        return False
    host = host.strip("[]").rstrip(".").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost") or host == listen_host.lower():
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(value: str) -> str:
    """The host of a Host header value (``name``, ``name:port``, ``[v6]:port``)."""
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _origin_host(origin: str) -> str | None:
    try:
        return URL(origin).host if "//" in origin else None  # "null" has no host
    except ValueError:
        return None


def not_local(request: web.Request, listen_host: str) -> web.Response | None:
    """Without tokens the API is for this machine's programs only (SPEC 14): refuse what a
    web page could send (DNS rebinding: a foreign Host; CSRF: a foreign Origin, a form
    POST), else None."""
    host = request.headers.get("Host")
    if host is not None and not _loopback(_host_of(host), listen_host):
        return json_error(421, "this server answers loopback host names only", "misdirected")
    origin = request.headers.get("Origin")
    if origin is not None and not _loopback(_origin_host(origin), ""):
        return json_error(403, "requests from web pages are refused", "forbidden_origin")
    if request.method == "POST" and request.content_type != "application/json":
        return json_error(
            415, "the body must be sent as Content-Type: application/json", "unsupported_media_type"
        )
    return None
