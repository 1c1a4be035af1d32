"""A server's tool listing, as the model is offered it (SPEC 15): filtered, named, annotated.

Works on the listing as the server sent it (``tools/list``'s ``tools``, JSON objects), not on
the SDK's models: the SDK validates a listing whole, so one tool with a broken schema would
cost every tool of its server. Here a tool the model could not be given (no name, an input
schema that is not a JSON object schema) is skipped alone, and said once by the caller.

Annotations are hints from the server (``readOnlyHint``, ``idempotentHint``): whether a call
cut off by a crash may run again, and, with ``approval = "destructive"``, whether a call
waits for a person's yes. A tool not annotated read-only waits, whatever its
``destructiveHint`` says: a server that says "not destructive" is still acting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.tools.names import model_name
from gateway.config_tools import McpServer
from gateway.messages import ToolSpec

_DESCRIPTION = 4096  # characters of a tool's description kept for the model


@dataclass(frozen=True, slots=True)
class Listing:
    """What a server's listing gives: the tools offered (in the server's order) and, for the
    log, the ones skipped with why (``(tool name, reason)``)."""

    specs: tuple[ToolSpec, ...]
    skipped: tuple[tuple[str, str], ...] = ()


def _hint(annotations: object, key: str) -> bool:
    return isinstance(annotations, Mapping) and annotations.get(key) is True


def _needs_approval(server: McpServer, read_only: bool) -> bool:
    match server.approval:
        case "never":
            return False
        case "always":
            return True
        case "destructive":
            return not read_only


def _schema_problem(schema: object) -> str | None:
    if not isinstance(schema, Mapping):
        return "its inputSchema is not a JSON object"
    if schema.get("type") != "object":
        return 'its inputSchema is not an object schema ("type": "object")'
    if not isinstance(schema.get("properties", {}), Mapping):
        return "its inputSchema's properties is not an object"
    return None


def tool_specs(server: McpServer, tools: Sequence[object]) -> Listing:
    """``tools`` (a listing's entries, every page) as the model is offered them: those
    ``allow`` and ``deny`` let through, each named ``<server>__<tool>`` (rewritten where a
    provider would refuse it; of two that come out alike the later gets a longer hash)."""
    specs: list[ToolSpec] = []
    skipped: list[tuple[str, str]] = []
    taken: set[str] = set()
    for entry in tools:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            skipped.append(("?", "an entry without a name"))
            continue
        tool: str = entry["name"]
        if not server.offers(tool):
            continue
        schema = entry.get("inputSchema")
        problem = _schema_problem(schema)
        if problem is not None:
            skipped.append((tool, problem))
            continue
        name = model_name(server.name, tool)
        if name in taken:  # a name built to spell another's, or a hash clash
            name = model_name(server.name, tool, clash=True)
            if name in taken:
                skipped.append((tool, "its name clashes with another tool's"))
                continue
        taken.add(name)
        annotations = entry.get("annotations")
        read_only = _hint(annotations, "readOnlyHint")
        description = entry.get("description")
        specs.append(
            ToolSpec(
                name=name,
                description=description[:_DESCRIPTION] if isinstance(description, str) else "",
                parameters=_parameters(schema),
                server=server.name,
                tool=tool,
                read_only=read_only,
                idempotent=_hint(annotations, "idempotentHint"),
                approval=_needs_approval(server, read_only),
            )
        )
    return Listing(tuple(specs), tuple(skipped))


def _parameters(schema: Any) -> Mapping[str, Any]:
    """The schema as the model gets it: ``properties`` present (some providers insist)."""
    if "properties" in schema:
        return dict(schema)
    return {**schema, "properties": {}}
