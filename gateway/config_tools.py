"""The config of the agent's tools (SPEC 15): ``[tools]`` with its ``[[tools.mcp]]`` servers,
the named model chains ``[[models]]``, and the ``[[profiles]]`` that choose, per conversation,
the system prompt, the tools, the queue mode and the model chain.

Tools are opted into, never on by accident: ``[agent] tools`` is empty by default, so a
conversation no profile matches (a public Discord guild, say) is offered none.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

from annotated_types import Gt

from gateway import _config_checks as checks
from gateway._schema import SECRET, TABLE, Problem, rule
from gateway.queue import QueueMode

if TYPE_CHECKING:
    from gateway.config import ModelConfig, NamedModels

#: Which calls wait for a person's yes (SPEC 15): none, every tool not annotated
#: ``readOnlyHint`` (whatever its ``destructiveHint`` says), or every call.
Approval = Literal["never", "destructive", "always"]
#: A server's name is the first part of its tools' names as the model sees them
#: (``<server>__<tool>``), which providers restrict to these characters.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def _server_name(value: str) -> str | None:
    if not _NAME.match(value):
        return "must be 1-32 letters, digits, '_' or '-' (it starts the tools' names)"
    if "__" in value:
        return "must not contain '__' (it separates the server from the tool's name)"
    return None


def _glob(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _approver(value: str) -> str | None:
    platform, _, user = value.partition(":")
    if not platform or not user:
        return 'must be "<platform>:<user id>", for example "telegram:123456789"'
    return None


@dataclass(frozen=True, slots=True)
class McpServer:
    """One MCP server: a child process over stdio (``command``) or an HTTP endpoint
    (``url``, streamable HTTP). The child gets the variables ``env`` lists (and the SDK's
    minimal defaults such as ``PATH`` and ``HOME``), never the gateway's own environment."""

    __pydantic_config__ = TABLE

    name: Annotated[str, rule(_server_name)]
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, metadata=SECRET)
    cwd: str = ""
    url: Annotated[str, rule(lambda v: checks.url(v) if v else None)] = ""
    headers: dict[str, str] = field(default_factory=dict, metadata=SECRET)
    timeout_s: Annotated[float, Gt(0)] = 60.0
    allow: tuple[Annotated[str, rule(_glob)], ...] = ("*",)  # globs over its own tool names
    deny: tuple[Annotated[str, rule(_glob)], ...] = ()
    approval: Approval = "destructive"

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` (the server's own name for it) passes ``allow`` and ``deny``."""
        allowed = any(fnmatch.fnmatchcase(tool, g) for g in self.allow)
        return allowed and not any(fnmatch.fnmatchcase(tool, g) for g in self.deny)


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    """``[tools]``: the MCP servers, who besides the turn's own user may answer an approval
    (``"<platform>:<user id>"``), and how long an approval waits before it is a denial."""

    __pydantic_config__ = TABLE

    mcp: tuple[McpServer, ...] = ()
    approvers: tuple[Annotated[str, rule(_approver)], ...] = ()
    approval_timeout_s: Annotated[float, Gt(0)] = 600.0

    def server(self, name: str) -> McpServer | None:
        return next((s for s in self.mcp if s.name == name), None)


@dataclass(frozen=True, slots=True)
class Profile:
    """Which agent a conversation gets: the first profile one of whose ``conversations``
    globs matches the conversation key. A key left out inherits ``[agent]``'s (and ``model``
    absent: ``[model]``)."""

    __pydantic_config__ = TABLE

    name: Annotated[str, rule(checks.non_empty)]
    conversations: Annotated[tuple[Annotated[str, rule(_glob)], ...], rule(checks.non_empty)]
    system_prompt: str | None = None
    tools: tuple[Annotated[str, rule(_glob)], ...] | None = None  # over <server>__<tool>
    queue_mode: QueueMode | None = None
    model: str | None = None  # the name of a [[models]] chain

    def matches(self, conversation: str) -> bool:
        return any(fnmatch.fnmatchcase(conversation, g) for g in self.conversations)


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """What a conversation gets once its profile is found (``Config.profile``): ``name`` ""
    is ``[agent]`` itself; ``model`` None: no model is configured."""

    name: str
    system_prompt: str
    tools: tuple[str, ...]  # globs over <server>__<tool> and the built-in tools
    queue_mode: QueueMode | None
    model: ModelConfig | None


def tool_problems(
    tools: ToolsConfig, models: tuple[NamedModels, ...], profiles: tuple[Profile, ...]
) -> list[Problem]:
    """What no single key of ``[tools]``, ``[[models]]`` or ``[[profiles]]`` can say."""
    problems: list[Problem] = []
    for table, names in (
        ("tools.mcp", [s.name for s in tools.mcp]),
        ("models", [m.name for m in models]),
        ("profiles", [p.name for p in profiles]),
    ):
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                problems.append((f"{table}[{i}].name", f"the same name as {table}[{seen[name]}]"))
            seen.setdefault(name, i)
    for i, server in enumerate(tools.mcp):
        key = f"tools.mcp[{i}]"
        if bool(server.command) == bool(server.url):
            problems.append((key, "needs exactly one of command (stdio) and url (HTTP)"))
        elif server.url:
            problems += [
                (f"{key}.{k}", "is for a stdio server (command)")
                for k in _STDIO_ONLY
                if getattr(server, k)
            ]
        elif server.headers:
            problems.append((f"{key}.headers", "is for an HTTP server (url)"))
    named = {m.name for m in models}
    for i, profile in enumerate(profiles):
        if profile.model is not None and profile.model not in named:
            known = ", ".join(sorted(named)) or "none"
            problems.append((f"profiles[{i}].model", f"names no [[models]] chain (known: {known})"))
    return problems


_STDIO_ONLY = ("args", "env", "cwd")


def reaches(glob: str, platform: str) -> bool:
    """Whether a conversation-key glob can match a conversation of ``platform`` (its literal
    part before the first wildcard is compatible with ``<platform>:``)."""
    literal = re.split(r"[*?\[]", glob, maxsplit=1)[0]
    prefix = f"{platform}:"
    return literal.startswith(prefix) or prefix.startswith(literal)


def profile_lines(
    profiles: tuple[Profile, ...], default_tools: tuple[str, ...], platform: str
) -> list[str]:
    """What ``botmux check`` says of one platform's conversations: which profiles reach them
    (first match wins) and with which tools, then what the others get (``[agent]``)."""
    lines = []
    for profile in profiles:
        globs = [g for g in profile.conversations if reaches(g, platform)]
        if globs:
            tools = profile.tools if profile.tools is not None else default_tools
            lines.append(
                f"{', '.join(globs)}: profile {profile.name}, tools: {', '.join(tools) or 'none'}"
            )
    lines.append(f"others: [agent], tools: {', '.join(default_tools) or 'none'}")
    return lines
