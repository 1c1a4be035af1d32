"""``POST /api/admin/reload``: the running gateway re-reads its config file (SPEC section 13).

``botmux reload`` calls it (and the console may); ``?dry_run=1`` only says what a reload would
change, of the gateway's file or of the TOML sent as ``{"config": ...}`` (``botmux check`` on
a new file: parsed with the gateway's environment, always a dry run). The answer is the plan,
keys named, values never: 200 applied, unchanged or dry run; 409 refused (a key that needs a
restart changed, nothing applied); 422 the file does not load (the loader's messages, nothing
applied). Behind the peer auth like every admin route; who asked (the token's name, never the
token) goes to the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from platforms.peer import convert


class ReloadResult(Protocol):
    """What a reload did (``gateway.reload.ReloadResult``; platforms do not import it)."""

    @property
    def outcome(self) -> str: ...

    @property
    def reason(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


#: The composition root's reload: (who asked, dry run, TOML to preview or None) -> what it did.
Reload = Callable[[str, bool, str | None], Awaitable[ReloadResult]]

_FLAGS = {"0": False, "1": True, "true": True, "false": False, "yes": True, "no": False}
_STATUS = {"applied": 200, "unchanged": 200, "dry_run": 200, "refused": 409, "invalid": 422}


def add_reload_route(
    app: web.Application, reload: Reload, *, who: Callable[[web.Request], str]
) -> None:
    async def handle(request: web.Request) -> web.Response:
        flags = request.query.getall("dry_run", [])
        if len(flags) > 1 or any(flag not in _FLAGS for flag in flags):
            raise convert.BadRequest("dry_run must be one of " + ", ".join(_FLAGS), param="dry_run")
        dry_run = _FLAGS.get(flags[0] if flags else "0", False)
        raw = await request.read()
        body = convert.parse_json(raw) if raw.strip() else {}
        text = body.get("config") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or set(body) - {"config"}
            or ("config" in body) != (isinstance(text, str))
        ):
            raise convert.BadRequest('the body must be {} or {"config": "<TOML>"}')
        # Only the file the gateway started with is ever applied: a sent config is a preview.
        result = await reload(who(request), dry_run or text is not None, text)
        status = _STATUS[result.outcome]
        body = result.to_json()
        if status >= 400:  # an error like every route's, with the plan beside it
            code = "reload_refused" if result.outcome == "refused" else "config_invalid"
            body["error"] = convert.error_json(result.reason, code, status)["error"]
        return web.json_response(body, status=status)

    app.router.add_post("/api/admin/reload", handle)
