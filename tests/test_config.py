"""The config loader: defaults, environment, and refusals that name the key."""

from __future__ import annotations

import pytest

from gateway.config import load_config, parse_config
from gateway.errors import ConfigError


def parse(text: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse_config(text, source="t.toml", env=env or {})


def test_no_file_means_embedded_defaults(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    config = load_config(None, env={})
    assert config.store.path == "botmux.db"
    assert config.peer.listen == "127.0.0.1:8642"
    assert config.model is None
    assert config.telegram is None and config.discord is None


def test_model_from_the_environment() -> None:
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "OPENAI_API_KEY": "sk-x",
        "BOTMUX_MODEL": "m1",
    }
    config = parse("", env)
    assert config.model is not None
    assert (config.model.base_url, config.model.api_keys, config.model.model) == (
        "http://127.0.0.1:1/v1",
        ("sk-x",),
        "m1",
    )


def test_variables_are_expanded_and_a_missing_one_is_refused() -> None:
    text = '[model]\nmodel = "m"\napi_keys = ["${K1}", "${K2}"]\n'
    config = parse(text, {"K1": "a", "K2": "b"})
    assert config.model is not None and config.model.api_keys == ("a", "b")
    with pytest.raises(ConfigError) as err:
        parse(text, {"K1": "a"})
    assert err.value.path == "model.api_keys[1]" and "K2" in str(err.value)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("surprise = 1", "surprise"),
        ("[store]\npaht = 'x'", "store.paht"),
        (
            "[model]\nmodel = 'm'\n[[model.fallbacks]]\nmodel = 'f'\nbogus = 2",
            "model.fallbacks[0].bogus",
        ),
        ("[model]\nmodel = 'm'\ntimeout_s = 'slow'", "model.timeout_s"),
        ("[model]\nmodel = 'm'\ntimeout_s = -1", "model.timeout_s"),
        ("[model]\nmodel = 'm'\nmax_retries = 0", "model.max_retries"),
        ("[model]\nmodel = 'm'\napi_keys = 'one'", "model.api_keys"),
        ("[model]\nbase_url = 'http://x/v1'", "model.model"),
        ("[model]\nmodel = 'm'\nbase_url = 'ftp://x'", "model.base_url"),
        ("[peer]\nlisten = 'nowhere'", "peer.listen"),
        ("[peer]\nlisten = '0.0.0.0:8642'", "peer.listen"),
        ("[telegram]\ntoken = 't'\nmode = 'carrier-pigeon'", "telegram.mode"),
        ("[telegram]\ntoken = 't'\nallow_users = ['me']", "telegram.allow_users[0]"),
        ("[gateway]\nmax_concurrent_turns = true", "gateway.max_concurrent_turns"),
        ("[log]\nformat = 'xml'", "log.format"),
        ("store = 3", "store"),
        ("[store]\nurl = 'mysql://x/db'", "store.url"),
        ("[store]\npool_size = 0", "store.pool_size"),
        ("[cluster]\nnode_id = 'has space'", "cluster.node_id"),
        ("[cluster]\nlease_s = 3\nheartbeat_s = 2", "cluster.heartbeat_s"),
        ("[cluster]\nlease_s = 0", "cluster.lease_s"),
        ("[discord]\ntoken = 't'\nshard_count = 0", "discord.shard_count"),
    ],
)
def test_bad_values_are_refused_naming_the_key(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert err.value.path == path, str(err.value)


def test_non_loopback_listen_is_allowed_with_tokens() -> None:
    config = parse("[peer]\nlisten = '0.0.0.0:8642'\ntokens = ['t0k3n-long-enough']")
    assert config.peer.host == "0.0.0.0" and config.peer.port == 8642
    assert "t0k3n-long-enough" in config.secrets()


def test_invalid_toml_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse("[store\n")


def test_a_postgresql_store_and_its_password_kept_secret() -> None:
    config = parse(
        '[store]\nurl = "postgresql://botmux:${PGPASS}@db:5432/botmux"\n'
        '[cluster]\nnode_id = "n1"\nlease_s = 6\nheartbeat_s = 2\n',
        {"PGPASS": "s3cret-password"},
    )
    assert config.store.shared and config.cluster.node_id == "n1"
    assert "s3cret-password" in config.secrets()  # redacted from every log line
    assert not parse("").store.shared  # SQLite stays the default


def test_every_problem_is_reported_at_once_each_with_its_key() -> None:
    text = (
        "surprise = 1\n"
        "[model]\nmodel = 'm'\ntimeout_s = -1\nmax_retries = 'three'\n"
        "[[model.fallbacks]]\nmodel = 'f'\nbogus = 2\n"
        "[peer]\nlisten = 'nowhere'\n"
    )
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert dict(err.value.errors) == {
        "model.timeout_s": "must be greater than 0",
        "model.max_retries": "must be an integer, got a string",
        "model.fallbacks[0].bogus": (
            "unknown key (known here: api_keys, base_url, context_tokens, input,"
            " max_output_tokens, max_retries, model, timeout_s)"
        ),
        "peer.listen": "must be HOST:PORT, for example 127.0.0.1:8642",
        "surprise": (
            "unknown key (known here: a2a, agent, cluster, discord, gateway, log, model,"
            " models, peer, profiles, scheduler, schedules, slack, store, telegram, tools,"
            " transcription)"
        ),
    }
    assert (err.value.path, err.value.message) == err.value.errors[0]
    assert str(err.value).splitlines() == [f"{p}: {m}" for p, m in err.value.errors]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_concurrent_turns = '5'", "must be an integer, got a string"),
        ("max_concurrent_turns = 5.0", "must be an integer, got a number"),
        ("max_concurrent_turns = true", "must be an integer, got true or false"),
        ("idle_evict_s = '600'", "must be a number, got a string"),
        ("unrecorded_sends = 1", "must be a string, got an integer"),
        ("unrecorded_sends = 1979-05-27", "must be a string, got a date or time"),
    ],
)
def test_types_are_strict_as_toml_writes_them(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(f"[gateway]\n{line}\n")
    assert err.value.errors == ((f"gateway.{line.split()[0]}", message),)


def test_an_integer_may_come_from_a_variable_and_a_number_takes_an_integer() -> None:
    config = parse(
        '[telegram]\ntoken = "t"\nallow_users = ["${ADMIN}", 7]\n[gateway]\nidle_evict_s = 5\n',
        {"ADMIN": " 4242 "},
    )
    assert config.telegram is not None and config.telegram.allow_users == (4242, 7)
    assert config.gateway.idle_evict_s == 5.0 and isinstance(config.gateway.idle_evict_s, float)
    with pytest.raises(ConfigError) as err:
        parse('[telegram]\ntoken = "t"\nallow_users = ["${ADMIN}"]\n', {"ADMIN": "root"})
    assert err.value.errors == (
        ("telegram.allow_users[0]", "must be an integer, got a string (from ${ADMIN})"),
    )


def test_the_attributes_stay_frozen_dataclasses() -> None:
    import dataclasses

    config = parse("[model]\nmodel = 'm'\n[[model.fallbacks]]\nmodel = 'f'\n")
    assert config.model is not None
    assert [e.model for e in config.model.chain] == ["m", "f"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.peer.listen = "0.0.0.0:1"  # type: ignore[misc]
    moved = dataclasses.replace(config, peer=dataclasses.replace(config.peer, listen="[::1]:9"))
    assert (moved.peer.host, moved.peer.port) == ("::1", 9)


@pytest.mark.process
def test_check_names_three_problems_and_exits_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    config = tmp_path / "bad.toml"
    config.write_text(
        '[model]\nmodel = "m"\ntimeout_s = 0\n'
        '[peer]\nlisten = "127.0.0.1:8642"\nbogus = true\n'
        '[log]\nformat = "xml"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "botmux: config error: model.timeout_s: must be greater than 0",
        "botmux: config error: peer.bogus: unknown key (known here: auth_fail_limit,"
        " auth_fail_window_s, header_timeout_s, idle_timeout_s, listen, max_body_bytes,"
        " max_connections, queue_mode, token_burst, token_requests_per_min, tokens,"
        " trusted_proxies)",
        "botmux: config error: log.format: must be one of 'console', 'json'",
    ]


def test_the_limits_of_spec_sections_11_and_14_and_their_defaults() -> None:
    config = parse(
        "[model]\nmodel = 'm'\n[[model.fallbacks]]\nmodel = 'f'\nmax_output_tokens = 512\n"
    )
    peer, gateway, store = config.peer, config.gateway, config.store
    assert (peer.header_timeout_s, peer.idle_timeout_s, peer.max_connections) == (10.0, 75.0, 1000)
    assert peer.trusted_proxies == ()
    assert (
        gateway.max_pending_per_conversation,
        gateway.max_pending_total,
        gateway.max_message_chars,
    ) == (32, 10_000, 32_000)
    assert config.agent.history_chars == 200_000
    assert config.model is not None
    assert [e.max_output_tokens for e in config.model.chain] == [4096, 512]
    assert (store.retention_days, store.anonymous_retention_days) == (0, 7)
    assert store.command_timeout_s == 10.0
    proxies = parse("[peer]\ntrusted_proxies = ['10.0.0.0/8', '192.168.1.7', '::1', 'fd00::/8']")
    assert proxies.peer.trusted_proxies == ("10.0.0.0/8", "192.168.1.7", "::1", "fd00::/8")


def test_push_hosts_entries_may_name_a_port() -> None:
    from gateway.config import push_host

    good = ["hooks.example.com", "Hooks.Example.com:8443", "127.0.0.1:8080", "[::1]:8080", "::1"]
    config = parse(f"[a2a]\npush_hosts = {good!r}")
    assert config.a2a is not None
    assert [push_host(h) for h in config.a2a.push_hosts] == [
        ("hooks.example.com", None),
        ("hooks.example.com", 8443),
        ("127.0.0.1", 8080),
        ("::1", 8080),
        ("::1", None),
    ]
    bad = ["host:0", "host:65536", "https://host", "a b", "[::1", "host:port", "-x", "[nope]:1"]
    with pytest.raises(ConfigError) as err:
        parse(f"[a2a]\npush_hosts = {bad!r}")
    assert [p for p, _ in err.value.errors] == [f"a2a.push_hosts[{n}]" for n in range(len(bad))]


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("[peer]\nheader_timeout_s = 0", "peer.header_timeout_s"),
        ("[peer]\nidle_timeout_s = -1", "peer.idle_timeout_s"),
        ("[peer]\nmax_connections = 0", "peer.max_connections"),
        ("[peer]\ntrusted_proxies = ['10.0.0.0/8', 'proxy.internal']", "peer.trusted_proxies[1]"),
        ("[peer]\ntrusted_proxies = '10.0.0.1'", "peer.trusted_proxies"),
        ("[gateway]\nmax_pending_per_conversation = 0", "gateway.max_pending_per_conversation"),
        ("[gateway]\nmax_pending_total = -5", "gateway.max_pending_total"),
        ("[gateway]\nmax_message_chars = 0", "gateway.max_message_chars"),
        ("[agent]\nhistory_chars = 0", "agent.history_chars"),
        ("[model]\nmodel = 'm'\nmax_output_tokens = 0", "model.max_output_tokens"),
        (
            "[model]\nmodel = 'm'\n[[model.fallbacks]]\nmodel = 'f'\nmax_output_tokens = -1",
            "model.fallbacks[0].max_output_tokens",
        ),
        ("[store]\nretention_days = -1", "store.retention_days"),
        ("[store]\nanonymous_retention_days = -0.5", "store.anonymous_retention_days"),
        ("[store]\ncommand_timeout_s = 0", "store.command_timeout_s"),
    ],
)
def test_bad_limits_are_refused_naming_the_key(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert [p for p, _ in err.value.errors] == [path]


def test_the_example_config_names_every_key() -> None:
    import dataclasses
    import re
    from pathlib import Path

    from gateway import config as schema
    from gateway import config_peer, config_schedules, config_tools

    example = (Path(__file__).parent.parent / "deploy" / "botmux.example.toml").read_text()
    written = set(re.findall(r"^(?:# )?([a-z_]+) = ", example, re.MULTILINE))
    tables = [schema.StoreConfig, schema.ModelConfig, schema.AgentConfig, config_peer.PeerConfig]
    tables += [config_peer.PeerToken, schema.GatewayConfig, schema.ClusterConfig, schema.LogConfig]
    tables += [schema.TelegramConfig, schema.DiscordConfig]
    tables += [schema.A2aConfig, schema.A2aSkill]
    tables += [config_tools.ToolsConfig, config_tools.McpServer, config_tools.Profile]
    tables += [config_schedules.SchedulerConfig, config_schedules.ScheduleEntry]
    missing = {
        f"{cls.__name__}.{f.name}"
        for cls in tables
        for f in dataclasses.fields(cls)
        if f.name not in written and f.name not in ("fallbacks", "mcp")
    }
    assert not missing


def test_what_the_file_may_not_say_and_where_the_environment_model_goes_wrong() -> None:
    with pytest.raises(ConfigError) as err:
        parse('source = "elsewhere"\nbogus = "${UNSET}"\n')
    assert [p for p, _ in err.value.errors] == ["source", "bogus"]
    assert all(m.startswith("unknown key") for _, m in err.value.errors), err.value.errors
    with pytest.raises(ConfigError) as err:
        parse("", {"OPENAI_BASE_URL": "ftp://x", "OPENAI_API_KEY": "sk-${NOT-EXPANDED}"})
    assert err.value.errors == (
        ("model (from environment).base_url", "must be an http:// or https:// URL"),
    )


SLACK = '[slack]\nbot_token = "xoxb-1234-5678-abcdef"\n'


def test_the_slack_section_and_its_one_way_in() -> None:
    """SPEC 17: a bot token (xoxb-), and exactly one of an app-level token (xapp-, Socket
    Mode) or a signing secret (the Events API); Slack's ids where ids are listed."""
    socket = parse_config(SLACK + 'app_token = "xapp-1-A1-123456"\n', source="t", env={})
    assert socket.slack is not None and socket.slack.socket_mode
    assert socket.slack.require_mention and socket.slack.reply_in_thread
    assert socket.slack.api_base == "https://slack.com/api"
    http = parse_config(
        SLACK + 'signing_secret = "0123456789abcdef0123"\nlisten = "0.0.0.0:3000"\n',
        source="t",
        env={},
    )
    assert http.slack is not None and not http.slack.socket_mode and http.slack.port == 3000
    assert "slack" in http.platforms_on and "0123456789abcdef0123" in http.secrets()
    bad = {
        '[slack]\nbot_token = "xoxp-user-token-1234"\napp_token = "xapp-1-A1-123456"\n': (
            "slack.bot_token: must be a Slack bot token (it starts with xoxb-)"
        ),
        SLACK: "slack.app_token: is required (Socket Mode), unless signing_secret is set",
        SLACK + 'app_token = "xoxb-1234-5678-abcdef"\n': (
            "slack.app_token: must be a Slack app-level token (it starts with xapp-)"
        ),
        SLACK + 'app_token = "xapp-1-A1-123456"\nsigning_secret = "0123456789abcdef0123"\n': (
            "slack.signing_secret: set either app_token (Socket Mode) or signing_secret"
        ),
        SLACK + 'app_token = "xapp-1-A1-123456"\nallow_users = ["bob"]\n': (
            "slack.allow_users[0]: must be a Slack user id (U0123ABCD)"
        ),
        SLACK + 'app_token = "xapp-1-A1-123456"\nallow_channels = ["#general"]\n': (
            "slack.allow_channels[0]: must be a Slack channel id (C0123ABCD)"
        ),
    }
    for text, message in bad.items():
        with pytest.raises(ConfigError) as refused:
            parse_config(text, source="t", env={})
        assert str(refused.value).startswith(message), str(refused.value)
