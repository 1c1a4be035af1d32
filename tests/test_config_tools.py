"""The tools' config (``gateway.config_tools``, SPEC 15): MCP servers, named model chains,
profiles; which profile a conversation gets; what ``botmux check`` says of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import NamedModels, parse_config
from gateway.config_tools import profile_lines, reaches
from gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

TOOLS = """
[agent]
system_prompt = "plain"
[[tools.mcp]]
name = "files"
command = "uvx"
args = ["mcp-server-filesystem", "/srv"]
env = { LOG_LEVEL = "info" }
approval = "always"
[[tools.mcp]]
name = "web"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${MCP_TOKEN}" }
deny = ["delete_*"]
[[models]]
name = "smart"
model = "gpt-smart"
[[profiles]]
name = "ops"
conversations = ["telegram:42", "peer:ops-*"]
system_prompt = "You are the ops assistant."
tools = ["files__*"]
queue_mode = "collect"
model = "smart"
[[profiles]]
name = "readers"
conversations = ["peer:*"]
tools = ["web__*"]
"""


def parse(text: str, env: dict[str, str] | None = None) -> object:
    return parse_config(text, source="test", env=env or {"MCP_TOKEN": "t0k3n-abcdefgh"})


def test_the_first_matching_profile_wins_and_others_get_agent_with_no_tools() -> None:
    config = parse_config(TOOLS, source="test", env={"MCP_TOKEN": "x"})
    ops = config.profile("peer:ops-1")
    assert (ops.name, ops.system_prompt, ops.tools, ops.queue_mode) == (
        "ops",
        "You are the ops assistant.",
        ("files__*",),
        "collect",
    )
    assert isinstance(ops.model, NamedModels) and ops.model.model == "gpt-smart"
    readers = config.profile("peer:alice")
    assert (readers.name, readers.system_prompt, readers.tools) == ("readers", "plain", ("web__*",))
    assert readers.model is config.model  # no model named: [model]
    public = config.profile("discord:99")
    assert (public.name, public.tools) == ("", ())  # tools are opted into, never by accident
    assert config.queue_policy("telegram", "telegram:42").mode == "collect"
    assert config.queue_policy("telegram", "telegram:7").mode == "followup"
    web = config.tools.server("web")
    assert web is not None and web.headers == {"Authorization": "Bearer x"}
    assert web.offers("read_page") and not web.offers("delete_page")
    assert web.transport == "http"


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        (
            '[[tools.mcp]]\nname = "both"\ncommand = "x"\nurl = "http://127.0.0.1:1/mcp"\n',
            [("tools.mcp[0]", "needs exactly one of command (stdio) and url (HTTP)")],
        ),
        (
            '[[tools.mcp]]\nname = "h"\nurl = "http://127.0.0.1:1/mcp"\ncwd = "/srv"\n',
            [("tools.mcp[0].cwd", "is for a stdio server (command)")],
        ),
        (
            '[[tools.mcp]]\nname = "a"\ncommand = "x"\n[[tools.mcp]]\nname = "a"\ncommand = "y"\n',
            [("tools.mcp[1].name", "the same name as tools.mcp[0]")],
        ),
        (
            '[[profiles]]\nname = "p"\nconversations = ["peer:*"]\nmodel = "nope"\n',
            [("profiles[0].model", "names no [[models]] chain (known: none)")],
        ),
        (
            '[[tools.mcp]]\nname = "a__b"\ncommand = "x"\n',
            [
                (
                    "tools.mcp[0].name",
                    "must not contain '__' (it separates the server from the tool's name)",
                )
            ],
        ),
        (
            '[tools]\napprovers = ["42"]\n',
            [
                (
                    "tools.approvers[0]",
                    'must be "<platform>:<user id>", for example "telegram:123456789"',
                )
            ],
        ),
        (
            '[[tools.mcp]]\nname = "x"\ncommand = "y"\napproval = "sometimes"\n',
            [("tools.mcp[0].approval", "must be one of 'never', 'destructive', 'always'")],
        ),
    ],
)
def test_bad_tool_config_is_refused_with_the_key_named(
    text: str, errors: list[tuple[str, str]]
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="test", env={})
    assert list(err.value.errors) == errors


def test_which_globs_reach_a_platform() -> None:
    assert reaches("telegram:42", "telegram") and reaches("*", "telegram")
    assert reaches("tele*", "telegram") and not reaches("peer:*", "telegram")
    assert not reaches("telegramx:*", "telegram")


def test_check_says_which_profile_each_platform_gets() -> None:
    config = parse_config(TOOLS, source="test", env={"MCP_TOKEN": "x"})
    assert profile_lines(config.profiles, config.agent.tools, "peer") == [
        "peer:ops-*: profile ops, tools: files__*",
        "peer:*: profile readers, tools: web__*",
        "others: [agent], tools: none",
    ]
    assert profile_lines(config.profiles, config.agent.tools, "discord") == [
        "others: [agent], tools: none"
    ]


@pytest.mark.process
def test_botmux_check_prints_servers_and_profiles(tmp_path: Path) -> None:
    path = tmp_path / "botmux.toml"
    path.write_text(TOOLS.replace("${MCP_TOKEN}", "literal-token"))
    path.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "tool server files (stdio: uvx), approval: always" in out
    assert "tool server web (http: https://mcp.example.com/mcp), approval: destructive" in out
    assert "peer conversations: peer:ops-*: profile ops, tools: files__*" in out
    assert "peer conversations: others: [agent], tools: none" in out
    assert "literal-token" not in done.stdout
