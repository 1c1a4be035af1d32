"""Push notifications (SPEC 12): a task's configs, and the send that the outbox retries.

A notification is the task's reply chunk in the outbox: the ``a2a`` courier calls
:meth:`Pusher.send` for it, which POSTs the task to every config of the task, and records
the chunk delivered only when all of them took it. A failed POST is a
:class:`~gateway.errors.PlatformError` the courier retries with backoff; after a restart the
undelivered chunk is handed back and sent again. So a notification is never lost, and may
repeat (every config is notified again on a retry), as the spec allows.

Where a notification may go is checked when a config is set and again at each send: only a
``host[:port]`` of ``[a2a] push_hosts`` (no port named: the scheme's default one), over
``https`` unless the host is loopback, and never a redirect (a receiver on an allowed host
could send the task and its token anywhere): a 3xx is a failed delivery, retried as any. A
config's token and credentials are checked when it is set (visible ASCII, ``convert``); one
stored before that check, that the HTTP client refuses, is :class:`Unsendable`: the courier
parks its chunk instead of the error ending the gateway. A task takes at most ``MAX_CONFIGS``
configs, which the config methods (:func:`config_call`) store through the ``PushConfigs``
port.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
from yarl import URL

from gateway.config import push_host
from gateway.errors import PlatformError, Unsendable
from gateway.messages import OutboxChunk
from gateway.ports import PushConfigs
from platforms.a2a import convert
from platforms.a2a.convert import Dialect, Envelope, Op, PushTarget
from platforms.a2a.errors import INVALID_PARAMS, PUSH_NOT_SUPPORTED, TASK_NOT_FOUND, RpcError
from policy.backoff import Backoff

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 10.0
TOKEN_HEADER = "X-A2A-Notification-Token"
#: What the chunk's platform message id says when a task had no push config.
NO_PUSH = "a2a:no-push"
#: Push configs one task may hold (each is a POST per notification, all repeated on a retry).
MAX_CONFIGS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}

TaskBody = Callable[[int, Dialect], Awaitable[dict[str, Any]]]


class Pusher:
    def __init__(self, hosts: tuple[str, ...], configs: PushConfigs, body: TaskBody) -> None:
        self._hosts = frozenset(push_host(h) for h in hosts)  # (host, port or None)
        self._configs = configs
        self._body = body
        self._http: aiohttp.ClientSession | None = None
        self._backoff = Backoff(0.5, 10.0)
        self.stats = {"sent": 0, "failed": 0}

    def __repr__(self) -> str:
        return f"<Pusher hosts={sorted(self._hosts)} {self.stats}>"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            self._http = http
            try:
                yield
            finally:
                self._http = None

    @property
    def on(self) -> bool:
        """Whether push notifications go anywhere at all (``[a2a] push_hosts`` is set)."""
        return bool(self._hosts)

    def refusal(self, url: str) -> str | None:
        """Why a notification may not go to ``url``, or None."""
        try:
            parsed = URL(url)
            host, port = parsed.host, parsed.port  # yarl: the scheme's default if none
        except (ValueError, TypeError):
            return "url is not a valid URL"
        if host is None or port is None or parsed.scheme not in _DEFAULT_PORTS:
            return "url must be an http:// or https:// URL with a host"
        host = host.lower().strip("[]")
        named = (host, port) in self._hosts
        default = (host, None) in self._hosts and port == _DEFAULT_PORTS[parsed.scheme]
        if not (named or default):
            return "push notifications go only to [a2a] push_hosts (host and port)"
        if parsed.scheme != "https" and not _loopback(host):
            return "push notifications go over https:// unless the host is loopback"
        return None

    def check(self, target: PushTarget) -> None:
        """Refuse a config that could never be sent to (nothing is stored then)."""
        if not self._hosts:
            raise RpcError(PUSH_NOT_SUPPORTED, "push notifications are off ([a2a] push_hosts)")
        if (refused := self.refusal(target.url)) is not None:
            raise RpcError(INVALID_PARAMS, refused)

    async def save(self, row_id: int, target: PushTarget) -> PushTarget:
        if not target.id:  # as a2a-sdk's stores do: one default config per task, replaced
            target = dataclasses.replace(target, id=str(row_id))
        held = {t.id for t in await self.configs(row_id)}
        if target.id not in held and len(held) >= MAX_CONFIGS:
            raise RpcError(
                INVALID_PARAMS,
                f"a task takes at most {MAX_CONFIGS} push notification configs;"
                " delete one or replace one by its id",
            )
        await self._configs.save(row_id, target.id, _encode(target))
        return target

    async def configs(self, row_id: int) -> list[PushTarget]:
        return [_decode(text) for text in await self._configs.configs(row_id)]

    async def delete(self, row_id: int, config_id: str) -> None:
        await self._configs.delete(row_id, config_id)

    async def send(self, chunk: OutboxChunk) -> str:
        """Notify every config of the chunk's task (the courier's send)."""
        if not self._hosts:  # push is off: nothing could be sent, no need to look
            return NO_PUSH
        targets = await self.configs(chunk.user_row_id)
        if not targets:
            return NO_PUSH
        bodies: dict[Dialect, bytes] = {}
        for target in targets:
            if (refused := self.refusal(target.url)) is not None:
                log.warning(
                    "a2a push: a config no longer allowed; skipped",
                    extra={"task": chunk.user_row_id, "reason": refused},
                )
                continue
            if target.dialect not in bodies:
                try:
                    body = await self._body(chunk.user_row_id, target.dialect)
                except RpcError as exc:  # deleted since the configs were read
                    if exc.code != TASK_NOT_FOUND:
                        raise
                    raise PlatformError("the task was deleted", status=404) from exc
                bodies[target.dialect] = json.dumps(body).encode()
            await self._post(target, bodies[target.dialect])
        return f"a2a:push:{len(targets)}"

    async def notify(self, row_id: int, *, attempts: int = 4) -> None:
        """A notification with no outbox chunk behind it (a cancelled task's: its turn sent
        no reply): tried ``attempts`` times with backoff, then logged and dropped."""
        for attempt in range(attempts):
            try:
                await self.send(OutboxChunk(0, "", "a2a", 0, row_id, 0, "", 0.0))
                return
            except Unsendable as exc:
                log.warning(
                    "a2a push: a cancelled task's notification cannot be sent",
                    extra={"task": row_id, "error": str(exc)},
                )
                return
            except PlatformError as exc:
                if attempt + 1 == attempts:
                    log.warning(
                        "a2a push: a cancelled task's notification was not taken",
                        extra={"task": row_id, "error": str(exc)},
                    )
                    return
                await anyio.sleep(self._backoff.delay(attempt))

    async def _post(self, target: PushTarget, body: bytes) -> None:
        assert self._http is not None, "the pusher runs inside open()"
        headers = {"Content-Type": "application/json"}
        if target.token:
            headers[TOKEN_HEADER] = target.token
        if target.scheme and target.credentials:
            headers["Authorization"] = f"{target.scheme} {target.credentials}"
        try:
            async with self._http.post(
                target.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                if response.status >= 300:  # a redirect too: never followed
                    self.stats["failed"] += 1
                    raise PlatformError(
                        f"push receiver answered {response.status}",
                        status=response.status,
                        ambiguous=True,
                        idempotent=True,  # the spec lets a notification repeat
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.stats["failed"] += 1
            raise PlatformError(
                f"push receiver unreachable: {type(exc).__name__}",
                ambiguous=True,
                idempotent=True,
            ) from exc
        except (ValueError, UnicodeError) as exc:  # a stored value aiohttp will not send
            self.stats["failed"] += 1
            # Its text is not passed on: it may quote the header, and so the secret.
            raise Unsendable(
                f"the push config cannot be sent ({type(exc).__name__}: a header or the URL"
                " holds characters HTTP does not allow)"
            ) from None
        self.stats["sent"] += 1


def _loopback(host: str) -> bool:
    """A loopback address, or a name that means one (``localhost``): plain http is fine."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _encode(target: PushTarget) -> str:
    return json.dumps(dataclasses.asdict(target))


def _decode(text: str) -> PushTarget:
    fields = json.loads(text)
    fields["dialect"] = Dialect(fields.get("dialect", Dialect.V1))
    return PushTarget(**fields)


async def config_call(pusher: Pusher, row_id: int, env: Envelope) -> Any:
    """A push-notification-config method (set, get, list, delete) on the task of ``row_id``
    (the caller found it in the token's scope): its JSON-RPC result."""
    dialect, params = env.dialect, env.params
    v1 = dialect is Dialect.V1
    match env.op:
        case Op.PUSH_SET:
            body = params if v1 else convert.object_param(params, "pushNotificationConfig")
            target = convert.push_target(body, dialect)
            pusher.check(target)
            saved = await pusher.save(row_id, target)
            return convert.push_json(str(row_id), saved, dialect)
        case Op.PUSH_GET:
            wanted = convert.optional_id(params, "id" if v1 else "pushNotificationConfigId")
            for target in await pusher.configs(row_id):
                if wanted is None or target.id == wanted:
                    return convert.push_json(str(row_id), target, dialect)
            raise RpcError(TASK_NOT_FOUND, "no such push notification config")
        case Op.PUSH_LIST:
            configs = [
                convert.push_json(str(row_id), target, dialect)
                for target in await pusher.configs(row_id)
            ]
            return {"configs": configs, "nextPageToken": ""} if v1 else configs
        case _:
            wanted = convert.optional_id(params, "id" if v1 else "pushNotificationConfigId")
            await pusher.delete(row_id, wanted or "")
            return None
