"""The model's names for MCP tools and a listing read into ToolSpecs (agent/tools/names.py,
agent/tools/specs.py): pure functions, no server."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent.tools import matches, model_name, tool_specs
from gateway.config_tools import McpServer

PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def listed(name: str, schema: Any = None, **annotations: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "inputSchema": OBJECT if schema is None else schema}
    if annotations:
        entry["annotations"] = annotations
    return entry


def test_a_name_providers_accept_is_kept_as_it_is() -> None:
    assert model_name("git", "status") == "git__status"
    assert model_name("git", "log-all_2") == "git__log-all_2"


def test_names_providers_refuse_are_rewritten_the_same_way_every_time() -> None:
    # Pinned: a name the model saw yesterday, or on another node, is the same name today.
    assert model_name("fake", "with spaces") == "fake__with_spaces_02003c4b"
    long = model_name("fake", "t" * 70)
    assert len(long) == 64 and long.startswith("fake__ttt") and PROVIDER_NAME.match(long)
    assert model_name("srv", "a.b") != model_name("srv", "a b")  # alike once rewritten
    assert model_name("one", "x y") != model_name("two", "x y").replace("two", "one")


def test_a_server_name_ending_in_underscore_never_spells_another_servers_name() -> None:
    # "a_" + "__" + "x" would read as server "a", tool "_x".
    assert model_name("a_", "x") != model_name("a", "_x")
    assert model_name("a_", "x").startswith("a___x_")


@given(
    server=st.from_regex(r"[A-Za-z0-9-][A-Za-z0-9_-]{0,31}", fullmatch=True).filter(
        lambda s: "__" not in s
    ),
    tool=st.text(min_size=1, max_size=128),
)
def test_every_name_is_one_providers_accept(server: str, tool: str) -> None:
    name = model_name(server, tool)
    assert PROVIDER_NAME.match(name) and name.startswith(f"{server}__")
    assert model_name(server, tool) == name


def test_profile_globs_match_the_models_names() -> None:
    assert matches(["git__*"], "git__status")
    assert not matches(["git__*"], "gitx__status") and not matches([], "git__status")
    assert matches(["a__x", "*__read*"], "b__read_file")


def test_allow_and_deny_filter_the_servers_own_names() -> None:
    server = McpServer(name="fs", command="x", allow=("read_*", "list"), deny=("read_secret",))
    tools = [listed(n) for n in ("read_file", "read_secret", "list", "write_file")]
    assert [s.tool for s in tool_specs(server, tools).specs] == ["read_file", "list"]


def test_annotations_and_the_approval_mode_make_the_spec() -> None:
    tools = [
        listed("look", readOnlyHint=True),
        listed("retry", idempotentHint=True),
        listed("soft", destructiveHint=False),
        listed("plain"),
        listed("odd", readOnlyHint=True, destructiveHint=True),
    ]

    def approvals(mode: str) -> dict[str, bool]:
        server = McpServer(name="s", command="x", approval=mode)  # type: ignore[arg-type]
        return {s.tool: s.approval for s in tool_specs(server, tools).specs}

    assert approvals("destructive") == {
        "look": False,
        "retry": True,
        "soft": True,  # not destructive, yet not read-only: it acts
        "plain": True,
        "odd": False,
    }
    assert set(approvals("never").values()) == {False}
    assert set(approvals("always").values()) == {True}
    specs = {s.tool: s for s in tool_specs(McpServer(name="s", command="x"), tools).specs}
    assert (specs["look"].read_only, specs["look"].idempotent) == (True, False)
    assert (specs["retry"].read_only, specs["retry"].idempotent) == (False, True)
    assert specs["retry"].replayable and not specs["plain"].replayable


def test_a_tool_without_an_object_schema_is_skipped_alone() -> None:
    tools = [
        listed("good"),
        listed("stringly", {"type": "string"}),
        listed("shapeless", "anything"),
        listed("props", {"type": "object", "properties": []}),
        {"description": "no name"},
        listed("bare", {"type": "object"}),
    ]
    listing = tool_specs(McpServer(name="s", command="x"), tools)
    assert [s.tool for s in listing.specs] == ["good", "bare"]
    assert listing.specs[1].parameters == {"type": "object", "properties": {}}
    assert [tool for tool, _ in listing.skipped] == ["stringly", "shapeless", "props", "?"]


def test_two_tools_whose_names_clash_keep_the_first_and_a_longer_hash() -> None:
    # A tool built to spell another's rewritten name.
    spelled = model_name("s", "a b")[len("s__") :]
    listing = tool_specs(McpServer(name="s", command="x"), [listed("a b"), listed(spelled)])
    names = [s.name for s in listing.specs]
    assert len(set(names)) == 2 and names[0] == model_name("s", "a b")
