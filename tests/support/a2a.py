"""A peer agent's side of A2A (SPEC 12), for the A2A tests: the ``[a2a]`` section, the
official a2a-sdk client on a running gateway, its messages and answers, and a client's push
webhook (:func:`receiver`) that refuses its first notifications."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import a2a_pb2 as pb
from aiohttp import web

A2A = '[a2a]\nname = "helper"\ndescription = "answers"\n'
A2A += '[[a2a.skills]]\nid = "chat"\nname = "Chat"\ndescription = "talks"\n'


@asynccontextmanager
async def a2a_client(
    url: str, *, streaming: bool = False, legacy: bool = False, token: str = ""
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        if legacy:  # only the 0.3 interface: the SDK's 0.3 transport (message/send, ...)
            keep = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(keep)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        try:
            yield client
        finally:
            await client.close()


def message(text: str, message_id: str, context: str = "", task: str = "") -> pb.SendMessageRequest:
    """A user's text message for SendMessage; ``task``: the task it continues (an answer)."""
    msg = pb.Message(message_id=message_id, role=pb.ROLE_USER, context_id=context, task_id=task)
    msg.parts.add(text=text)
    return pb.SendMessageRequest(message=msg)


async def send(client: Client, request: pb.SendMessageRequest) -> pb.Task:
    events = [event async for event in client.send_message(request)]
    assert len(events) == 1 and events[0].HasField("task")
    return events[0].task


def answer(task: pb.Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


# -- push notifications ---------------------------------------------------------------------


@dataclass
class Receiver:
    """A client's webhook that answers 503 to its first ``failures`` notifications."""

    failures: int
    url: str = ""
    attempts: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    delivered: anyio.Event = field(default_factory=anyio.Event)
    tried: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.attempts.append((dict(request.headers), json.loads(await request.read())))
        self.tried.set()
        if len(self.attempts) <= self.failures:
            return web.Response(status=503)
        self.delivered.set()
        return web.Response(status=200)


@asynccontextmanager
async def receiver(failures: int, port: int = 0) -> AsyncIterator[Receiver]:
    hook = Receiver(failures)
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = runner.addresses[0][1]
    hook.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield hook
    finally:
        await runner.cleanup()


def push_request(text: str, message_id: str, url: str) -> pb.SendMessageRequest:
    """A message asking for push notifications to ``url``, with the client's token."""
    request = message(text, message_id, "ctx-push")
    config = request.configuration.task_push_notification_config
    config.url = url
    config.token = "client-token-1"
    return request


def push_to(port: int) -> str:
    """``[a2a]`` with push allowed to the receiver's address (host and port)."""
    return A2A.replace("[[a2a.skills]]", f'push_hosts = ["127.0.0.1:{port}"]\n[[a2a.skills]]')
