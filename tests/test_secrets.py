"""No secret leaves botmux: after a run with known secrets, grep everything a person can see.

The config side first: peer tokens too weak to be one are refused at load, an empty
``${VAR}`` in a secret is an error naming key and variable, no repr shows a secret and no
config error echoes a value. Then a real botmux process with every platform on, debug-level JSON logs, a model provider that
echoes the API key in its error body, and a client with a wrong token. Then the log, the
store (with its WAL), every HTTP body and every message the platforms received are searched
for the model key, the peer token, the Telegram and Discord bot tokens and the webhook secret.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config import parse_config
from gateway.config_peer import PeerToken
from gateway.errors import ConfigError
from tests.fakes.openai_server import error, open_fake_model
from tests.fakes.telegram_server import open_fake_telegram
from tests.harness import GatewayProcess, free_port
from tests.support.discord_world import BOB, CHANNEL_ID, mention, open_world

MODEL_KEY = "sk-live-4f1c9e2b7a6d5830"
PEER_TOKEN = "peer-token-b7e1c04d9a2f"
TELEGRAM_TOKEN = "777000111:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
WEBHOOK_SECRET = "tg_webhook_secret_91c2"
ALICE = 42


@pytest.mark.process
@pytest.mark.anyio
async def test_no_secret_in_logs_store_replies_or_error_bodies(tmp_path: Path) -> None:
    seen: list[str] = []
    async with open_fake_model() as model, open_fake_telegram(token=TELEGRAM_TOKEN) as tg:
        async with open_world() as dc:
            discord_token = dc.token  # the world's
            port = free_port()
            config = tmp_path / "botmux.toml"
            config.write_text(
                f'[store]\npath = "{tmp_path / "botmux.db"}"\n'
                f'[peer]\nlisten = "127.0.0.1:{port}"\ntokens = ["{PEER_TOKEN}"]\n'
                f'[model]\nbase_url = "{model.base_url}"\nmodel = "gpt-test"\n'
                f'api_keys = ["{MODEL_KEY}"]\ntimeout_s = 5\n'
                f'[telegram]\ntoken = "{TELEGRAM_TOKEN}"\napi_base = "{tg.origin}"\n'
                f"allow_users = [{ALICE}]\npoll_timeout_s = 1\n"
                f'webhook_secret = "{WEBHOOK_SECRET}"\n'
                f'[discord]\ntoken = "{discord_token}"\napi_base = "{dc.api_base}"\n'
                f'gateway_url = "{dc.gateway_url}"\nguild_ready_timeout_s = 0.05\n'
                'guild_access = "everyone"\n'
                f'[log]\nlevel = "debug"\nformat = "json"\n'
            )
            gateway = GatewayProcess(config, port, tmp_path / "botmux.log")
            try:
                await gateway.start()
                auth = {"Authorization": f"Bearer {PEER_TOKEN}"}
                async with aiohttp.ClientSession() as http:
                    r = await http.post(
                        f"{gateway.url}/api/sessions/s/chat", json={"message": "hi"}, headers=auth
                    )
                    seen.append(await r.text())
                    # The provider echoes the key back in its error body, as some do.
                    model.script(error(401, f"Incorrect API key provided: {MODEL_KEY}"))
                    r = await http.post(
                        f"{gateway.url}/api/sessions/s/chat",
                        json={"message": "again"},
                        headers=auth,
                    )
                    seen.append(await r.text())
                    assert (await r.json())["failure"]["reason"] == "auth"
                    for headers in ({}, {"Authorization": "Bearer wrong"}):
                        r = await http.get(f"{gateway.url}/metrics", headers=headers)
                        assert r.status == 401
                        seen.append(await r.text())
                    r = await http.get(f"{gateway.url}/metrics", headers=auth)
                    seen.append(await r.text())
                    r = await http.get(f"{gateway.url}/api/sessions/s/messages", headers=auth)
                    seen.append(await r.text())
                tg.inject_message(ALICE, "hello from telegram")
                await dc.inject_message(CHANNEL_ID, mention("hello from discord"), author_id=BOB)
                with anyio.fail_after(20):
                    await tg.wait_for_sent(1, ALICE)
                    await dc.wait_for_messages(CHANNEL_ID, 1)
                gateway.signal(signal.SIGTERM)
                assert await gateway.wait() == 0
            finally:
                await gateway.kill()
            seen.extend(tg.sent_messages(ALICE))
            seen.extend(m["content"] for m in dc.sent_messages(CHANNEL_ID))

    secrets = {
        "model key": MODEL_KEY,
        "peer token": PEER_TOKEN,
        "telegram token": TELEGRAM_TOKEN,
        "webhook secret": WEBHOOK_SECRET,
        "discord token": discord_token,
    }
    log = gateway.log()
    assert '"event": "decision"' in log and "telegram" in log  # the log really was written
    store = b"".join([await p.read_bytes() async for p in anyio.Path(tmp_path).glob("botmux.db*")])
    for name, secret in secrets.items():
        assert secret not in log, f"{name} in the log"
        assert secret.encode() not in store, f"{name} in the store"
        for body in seen:
            assert secret not in body, f"{name} in a reply or an HTTP body"
    assert "[REDACTED]" in log  # they were there to redact, and were


# -- the config ----------------------------------------------------------------------------


def parse(text: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse_config(text, source="t.toml", env=env or {})


def check(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )


@pytest.mark.process
def test_an_empty_peer_token_variable_is_refused_not_read_as_no_auth(tmp_path: Path) -> None:
    config = tmp_path / "botmux.toml"
    config.write_text('[peer]\nlisten = "0.0.0.0:8642"\ntokens = ["${BOTMUX_PEER_TOKEN}"]\n')
    result = check(config, BOTMUX_PEER_TOKEN="")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "botmux: config error: peer.tokens[0]: environment variable BOTMUX_PEER_TOKEN is"
        " empty, and this is a secret\n"
    )
    result = check(config, BOTMUX_PEER_TOKEN=PEER_TOKEN)
    assert result.returncode == 0, result.stderr
    assert f"1 bearer token(s): token-{hashlib.sha256(PEER_TOKEN.encode()).hexdigest()[:8]}" in (
        result.stdout
    )
    assert PEER_TOKEN not in result.stdout


@pytest.mark.parametrize(
    ("tokens", "path", "message"),
    [
        ('[""]', "peer.tokens[0]", "must not be empty or whitespace"),
        ('["   \\t "]', "peer.tokens[0]", "must not be empty or whitespace"),
        ('["ok-token-0123456789", "short-token"]', "peer.tokens[1]", "at least 16 characters"),
        ('[{token = "short", name = "ci"}]', "peer.tokens[0].token", "at least 16 characters"),
        ('[{name = "ci"}]', "peer.tokens[0].token", "is required"),
        ('[{token = "ok-token-0123456789", name = "has space"}]', "peer.tokens[0].name", "1-64"),
        ('[{token = "ok-token-0123456789", sessions = []}]', "peer.tokens[0].sessions", "empty"),
        (
            '[{token = "ok-token-0123456789", requests_per_min = -1}]',
            "peer.tokens[0].requests_per_min",
            "0 or more",
        ),
        ('[{token = "ok-token-0123456789", scope = "all"}]', "peer.tokens[0].scope", "unknown key"),
        (
            '["ok-token-0123456789", " ok-token-0123456789\\r\\n"]',
            "peer.tokens[1]",
            "the same token as peer.tokens[0]",
        ),
        (
            '[{token = "ok-token-0123456789", name = "a"}, {token = "other-token-0123456", name = "a"}]',
            "peer.tokens[1].name",
            "the same name as peer.tokens[0]",
        ),
    ],
)
def test_weak_or_ambiguous_peer_tokens_are_refused_naming_the_key(
    tokens: str, path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(f"[peer]\ntokens = {tokens}\n")
    assert err.value.path == path and message in err.value.message, str(err.value)
    assert "ok-token-0123456789" not in str(err.value)


def test_tokens_are_principals_from_strings_or_tables_and_are_stripped() -> None:
    text = (
        '[peer]\nlisten = "0.0.0.0:8642"\n'
        '[[peer.tokens]]\ntoken = "${CI_TOKEN}"\nname = "ci"\nsessions = ["ci-*", "build"]\n'
        "requests_per_min = 30\n"
        '[[peer.tokens]]\ntoken = "  plain-token-0123456789  "\n'
    )
    peer = parse(text, {"CI_TOKEN": "ci-token-0123456789abcdef\r"}).peer
    plain = "plain-token-0123456789"
    assert peer.tokens == (
        PeerToken(
            token="ci-token-0123456789abcdef",
            name="ci",
            sessions=("ci-*", "build"),
            requests_per_min=30,
        ),
        PeerToken(token=plain, name="token-" + hashlib.sha256(plain.encode()).hexdigest()[:8]),
    )
    assert peer.token_values == ("ci-token-0123456789abcdef", plain)
    assert parse(f'[peer]\ntokens = ["{plain}"]').peer.tokens == (PeerToken.plain(plain),)
    assert parse("[peer]\ntokens = []").peer.tokens == ()  # the one spelling of "no auth"


SECRET_FIELDS = [
    ('[model]\nmodel = "m"\napi_keys = ["sk-one", "${S}"]\n', "model.api_keys[1]"),
    (
        '[model]\nmodel = "m"\n[[model.fallbacks]]\nmodel = "f"\napi_keys = ["${S}"]\n',
        "model.fallbacks[0].api_keys[0]",
    ),
    ('[peer]\ntokens = ["${S}"]\n', "peer.tokens[0]"),
    ('[[peer.tokens]]\ntoken = "${S}"\nname = "ci"\n', "peer.tokens[0].token"),
    ('[telegram]\ntoken = "${S}"\n', "telegram.token"),
    ('[telegram]\ntoken = "t"\nwebhook_secret = "${S}"\n', "telegram.webhook_secret"),
    ('[discord]\ntoken = "${S}"\n', "discord.token"),
    ('[store]\nurl = "postgresql://botmux:${S}@db/botmux"\n', "store.url"),
]


@pytest.mark.parametrize(("text", "path"), SECRET_FIELDS)
def test_an_empty_variable_in_a_secret_is_an_error_naming_key_and_variable(
    text: str, path: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text, {"S": ""})
    assert err.value.errors == ((path, "environment variable S is empty, and this is a secret"),)


def test_an_empty_variable_elsewhere_is_an_empty_string() -> None:
    config = parse('[agent]\nsystem_prompt = "${PROMPT}"\n', {"PROMPT": ""})
    assert config.agent.system_prompt == ""


def test_no_repr_shows_a_secret() -> None:
    secrets = {
        "K": "sk-live-key-repr-0001",
        "F": "sk-live-key-repr-0002",
        "P": "peer-token-repr-000001",
        "Q": "peer-token-repr-000002",
        "T": "777:telegram-repr-secret",
        "W": "webhook_repr_secret_0001",
        "D": "discord.repr.secret",
        "G": "pg-repr-password",
    }
    config = parse(
        '[store]\nurl = "postgresql://botmux:${G}@db/botmux"\n'
        '[model]\nmodel = "m"\napi_keys = ["${K}"]\n[[model.fallbacks]]\nmodel = "f"\napi_keys = ["${F}"]\n'
        '[peer]\ntokens = ["${P}", {token = "${Q}", name = "ci"}]\n'
        '[telegram]\ntoken = "${T}"\nwebhook_secret = "${W}"\n[discord]\ntoken = "${D}"\n',
        secrets,
    )
    assert set(config.secrets()) == set(secrets.values())  # all of them are there...
    shown = repr(config) + str(config) + repr(config.model.chain if config.model else None)
    for name, secret in secrets.items():
        assert secret not in shown, name  # ...and none is shown
    assert "name='ci'" in repr(config.peer)  # a token is named, never shown


@pytest.mark.process
def test_no_config_error_echoes_a_value_from_the_environment(tmp_path: Path) -> None:
    secret = "123456:SECRET-from-the-environment"
    text = (
        '[store]\nurl = "${S}"\n'
        '[model]\nmodel = "m"\nbase_url = "${S}"\ntimeout_s = "${S}"\n'
        '[peer]\nlisten = "${S}"\n'
        '[telegram]\ntoken = "t"\nallow_users = ["${S}"]\nmode = "${S}"\n'
        '[log]\nformat = "${S}"\n[cluster]\nnode_id = "${S}"\n'
    )
    with pytest.raises(ConfigError) as err:
        parse(text, {"S": secret})
    assert {path for path, _ in err.value.errors} == {
        "store.url",
        "model.base_url",
        "model.timeout_s",
        "peer.listen",
        "telegram.mode",
        "telegram.allow_users[0]",
        "log.format",
        "cluster.node_id",
    }
    assert all(message.endswith("(from ${S})") for _, message in err.value.errors)
    assert "SECRET" not in str(err.value)
    config = tmp_path / "botmux.toml"
    config.write_text(text)
    result = check(config, S=secret)
    assert result.returncode == 2 and "telegram.allow_users[0]" in result.stderr
    assert "SECRET" not in result.stderr + result.stdout


def every_string_or_list_key() -> list[tuple[str, str, bool]]:
    """(section, key, is a list) for every key of every table: the schema walked, not listed."""
    import dataclasses
    import typing

    from gateway.config import Config

    keys = []
    for section in dataclasses.fields(Config):
        if section.metadata.get("internal"):
            continue
        hints = typing.get_type_hints(Config)
        table = [a for a in typing.get_args(hints[section.name]) if a is not type(None)]
        cls = table[0] if table else hints[section.name]
        for f in dataclasses.fields(cls):
            kind = typing.get_type_hints(cls)[f.name]
            keys.append((section.name, f.name, typing.get_origin(kind) is tuple))
    return keys


@pytest.mark.parametrize(
    "shape",
    ["123456:SECRET-ab12", "https://SECRET.example/v1", "postgresql://u:SECRET@h/db", "SECRET:99"],
)
def test_no_key_echoes_a_value_from_the_environment(shape: str) -> None:
    required = {"model": 'model = "m"\n', "telegram": 'token = "t"\n', "discord": 'token = "t"\n'}
    for section, key, is_list in every_string_or_list_key():
        value = '["${S}"]' if is_list else '"${S}"'
        head = "" if key in ("model", "token") else required.get(section, "")
        text = f"[{section}]\n{head}{key} = {value}\n"
        try:
            parse(text, {"S": shape})
        except ConfigError as err:
            assert "SECRET" not in str(err), (section, key, str(err))
