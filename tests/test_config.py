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
