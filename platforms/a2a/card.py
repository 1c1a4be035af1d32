"""The agent card (``GET /.well-known/agent-card.json``): who this agent is and how to call
it, from ``[a2a]``. Both interfaces (1.0 and 0.3) are the same ``/a2a`` URL; the legacy
top-level ``url`` and ``protocolVersion`` let 0.3 clients find it too."""

from __future__ import annotations

from typing import Any

from gateway.config import A2aConfig

CARD_VERSION = "1.0.0"


def agent_card(config: A2aConfig, url: str, *, bearer: bool) -> dict[str, Any]:
    card: dict[str, Any] = {
        "name": config.name,
        "description": config.description,
        "version": CARD_VERSION,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "capabilities": {"streaming": True, "pushNotifications": bool(config.push_hosts)},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": s.id, "name": s.name, "description": s.description, "tags": []}
            for s in config.skills
        ],
        # 0.3 clients read these.
        "url": url,
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
    }
    if bearer:
        card["securitySchemes"] = {
            "bearer": {"httpAuthSecurityScheme": {"scheme": "bearer"}},
        }
        card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
    return card
