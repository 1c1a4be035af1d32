"""``POST /api/admin/reload``: the running gateway re-reads its config file (SPEC section 13).

``botmux reload`` calls it (and the console may); ``?dry_run=1`` only says what a reload would
change, of the gateway's file or of the TOML sent as ``{"config": ...}`` (``botmux check`` on
a new file: parsed with the gateway's environment, never applied). The answer is the plan,
keys named, values never: 200 applied, unchanged or dry run; 409 refused (a key that needs a
restart changed, nothing applied); 422 the file does not load (the loader's messages, nothing
applied). Behind the peer auth like every admin route; who asked (the token's name, never the
token) goes to the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.reload import ReloadResult
from platforms.peer import convert

#: The composition root's reload: (who asked, dry run, TOML to preview or None) -> what it did.
Reload = Callable[[str, bool, str | None], Awaitable[ReloadResult]]

_STATUS = {"applied": 200, "unchanged": 200, "dry_run": 200, "refused": 409, "invalid": 422}


def add_reload_route(
    app: web.Application, reload: Reload, *, who: Callable[[web.Request], str]
) -> None:
    async def handle(request: web.Request) -> web.Response:
        dry_run = request.query.get("dry_run", "") in ("1", "true", "yes")
        raw = await request.read()
        body = convert.parse_json(raw) if raw.strip() else {}
        text = body.get("config") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(text, str | None):
            raise convert.BadRequest('the body must be {} or {"config": "<TOML>"}')
        if text is not None and not dry_run:
            # Only the file the gateway started with is ever applied, never a sent text.
            raise convert.BadRequest("a config in the body needs ?dry_run=1", param="config")
        result = await reload(who(request), dry_run, text)
        return web.json_response(result.to_json(), status=_STATUS[result.outcome])

    app.router.add_post("/api/admin/reload", handle)
