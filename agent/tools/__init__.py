"""The agent's tools (SPEC 15): MCP servers' tools, named, filtered and called.

- ``names``: the model's name for a tool (``<server>__<tool>``, rewritten with a hash where a
  provider would refuse it) and the profiles' globs over those names;
- ``specs``: a server's listing as the model is offered it (``allow``/``deny``, annotations,
  approval);
- ``results``: a call's result as the model is given it (text, images, structured content);
- ``mcp``: :class:`~agent.tools.mcp.McpToolBox`, the ``ToolBox`` port over the configured
  servers, one ``_link.ServerLink`` each.

Only ``mcp`` (with ``_link`` and ``errors``) imports the MCP SDK, and nothing here imports
``mcp``: the composition root imports it when ``[[tools.mcp]]`` lists a server, so a gateway
without tools never loads the SDK.
"""

from agent.tools.names import MAX_NAME, matches, model_name
from agent.tools.results import MAX_TEXT, MalformedReply, tool_outcome
from agent.tools.specs import Listing, tool_specs

__all__ = [
    "MAX_NAME",
    "MAX_TEXT",
    "Listing",
    "MalformedReply",
    "matches",
    "model_name",
    "tool_outcome",
    "tool_specs",
]
