"""The configuration: one TOML file, validated whole at start (SPEC section 6).

The schema is the dataclasses below; the loader walks them, so a key that no field names is
refused with its full path, and so is a value of the wrong type or out of range. ``${VAR}`` in
any string is replaced from the environment (an unset variable is an error, never an empty
secret). With no file at all, the embedded defaults apply and the model comes from
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``BOTMUX_MODEL``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError

_Check = Callable[[Any], str | None]


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be greater than 0"


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be 0 or more"


def _one_of(*choices: str) -> _Check:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(map(repr, choices))}"

    return check


def _url(value: Any) -> str | None:
    if re.match(r"^https?://[^\s/]+", value):
        return None
    return "must be an http:// or https:// URL"


def _ws_url(value: Any) -> str | None:
    return None if re.match(r"^wss?://[^\s/]+", value) else "must be a ws:// or wss:// URL"


def _listen(value: Any) -> str | None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return "must be HOST:PORT, for example 127.0.0.1:8642"
    return None


def _non_empty(value: Any) -> str | None:
    return None if len(value) > 0 else "must not be empty"


def _opt(default: Any = dataclasses.MISSING, check: _Check | None = None, **kw: Any) -> Any:
    metadata = {"check": check} if check else {}
    if default is dataclasses.MISSING:
        return field(metadata=metadata, **kw)
    return field(default=default, metadata=metadata, **kw)


def _postgres_url(value: Any) -> str | None:
    if value == "" or re.match(r"^postgres(ql)?://[^\s]*$", value):
        return None
    return "must be a postgresql:// URL (or empty for the SQLite file at store.path)"


def _node_id(value: Any) -> str | None:
    if value == "" or re.match(r"^[A-Za-z0-9._-]{1,48}$", value):
        return None
    return "must be 1-48 of A-Z a-z 0-9 . _ - (or empty: hostname-pid)"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """SQLite at ``path`` (one node), or PostgreSQL at ``url`` (one or several nodes)."""

    path: str = _opt("botmux.db", _non_empty)
    url: str = _opt("", _postgres_url)
    pool_size: int = _opt(10, _positive)

    @property
    def shared(self) -> bool:
        return bool(self.url)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Several nodes on one PostgreSQL store (ignored with SQLite)."""

    node_id: str = _opt("", _node_id)
    lease_s: float = _opt(5.0, _positive)
    heartbeat_s: float = _opt(1.0, _positive)
    claim_batch: int = _opt(64, _positive)


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """One model of the chain: where it is, what it is called, the keys of its pool."""

    model: str = _opt(check=_non_empty)
    base_url: str = _opt("https://api.openai.com/v1", _url)
    api_keys: tuple[str, ...] = _opt(("unused",), _non_empty)
    timeout_s: float = _opt(60.0, _positive)
    max_retries: int = _opt(3, _positive)


@dataclass(frozen=True, slots=True)
class ModelConfig(ModelEndpoint):
    """The primary model and its fallbacks, tried in order."""

    fallbacks: tuple[ModelEndpoint, ...] = ()
    retry_after_cap_s: float = _opt(60.0, _non_negative)
    backoff_base_s: float = _opt(0.5, _non_negative)
    backoff_cap_s: float = _opt(8.0, _non_negative)

    @property
    def chain(self) -> tuple[ModelEndpoint, ...]:
        primary = ModelEndpoint(
            model=self.model,
            base_url=self.base_url,
            api_keys=self.api_keys,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
        )
        return (primary, *self.fallbacks)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    system_prompt: str = "You are a helpful assistant."
    history_messages: int = _opt(40, _non_negative)


@dataclass(frozen=True, slots=True)
class PeerConfig:
    listen: str = _opt("127.0.0.1:8642", _listen)
    tokens: tuple[str, ...] = ()
    max_body_bytes: int = _opt(1024 * 1024, _positive)
    # Failed bearer-token attempts per client address in a sliding window; past the limit that
    # address gets 429 until the window frees it. No legitimate client fails this often. 0: off.
    auth_fail_limit: int = _opt(10, _non_negative)
    auth_fail_window_s: float = _opt(60.0, _positive)
    # Requests per minute per peer token (a token bucket of token_burst). Off by default: the
    # gateway's own bounds (max_concurrent_turns, mailboxes) already protect it, and what is
    # fair between peers depends on the deployment. 0: off.
    token_requests_per_min: int = _opt(0, _non_negative)
    token_burst: int = _opt(60, _positive)

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """The Telegram bot (docs/TELEGRAM.md explains every key)."""

    token: str = _opt(check=_non_empty)
    api_base: str = _opt("https://api.telegram.org", _url)  # an origin: /bot<token>/ is added
    mode: str = _opt("polling", _one_of("polling", "webhook"))
    allow_users: tuple[int, ...] = ()  # always allowed; others need DM pairing
    allow_chats: tuple[int, ...] = ()  # groups where every member may talk to the bot
    # In groups: answer when mentioned, replied to or commanded; every message; or never.
    group_mode: str = _opt("mention", _one_of("mention", "all", "off"))
    webhook_listen: str = _opt("127.0.0.1:8443", _listen)  # where our webhook server listens
    # The public https URL Telegram posts updates to, and the secret it sends with them.
    webhook_url: str = _opt("", lambda v: _url(v) if v else None)
    webhook_secret: str = _opt(
        "",
        lambda v: (
            None
            if re.fullmatch(r"[A-Za-z0-9_-]{0,256}", v)
            else "must be 1-256 characters of A-Z, a-z, 0-9, _ and -"
        ),
    )
    poll_timeout_s: int = _opt(30, _positive)  # long-poll duration of one getUpdates
    request_timeout_s: float = _opt(15.0, _positive)  # one Bot API call (sends, typing)
    typing_interval_s: float = _opt(4.0, _positive)
    typing_deadline_s: float = _opt(300.0, _positive)

    def __post_init__(self) -> None:
        if self.mode == "webhook":
            for key in ("webhook_url", "webhook_secret"):
                if not getattr(self, key):
                    raise ConfigError(f"telegram.{key}", 'is required when mode = "webhook"')


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """The Discord bot (docs/DISCORD.md explains every key)."""

    token: str = _opt(check=_non_empty)
    api_base: str = _opt("https://discord.com/api/v10", _url)
    gateway_url: str = _opt("wss://gateway.discord.gg", _ws_url)
    allow_users: tuple[int, ...] = ()  # always allowed; others need DM pairing
    allow_guilds: tuple[int, ...] = ()  # empty: every guild the bot is in
    # Who may talk to the bot in an allowed guild: only allowed/paired users, or every member
    # (an explicit choice: with allow_guilds empty that is anyone who adds the bot).
    guild_access: str = _opt("allowed", _one_of("everyone", "allowed"))
    require_mention: bool = True  # in guilds: answer only when mentioned or replied to
    answer_all_guilds: tuple[int, ...] = ()  # ... except in these guilds
    answer_all_channels: tuple[int, ...] = ()  # ... and these channels (and their threads)
    reply_to: str = _opt("first", _one_of("first", "all", "none"))  # which chunks reply
    chunk_chars: int = _opt(
        2000, lambda v: None if 100 <= v <= 2000 else "must be between 100 and 2000"
    )
    max_lines: int = _opt(
        0, lambda v: None if v == 0 or v >= 8 else "must be 0 (no cap) or at least 8"
    )
    slash_commands: bool = True  # register /new /status /stop /help as application commands
    backfill_messages: int = _opt(
        50, lambda v: None if 0 <= v <= 100 else "must be between 0 and 100"
    )
    backfill_channels: int = _opt(50, _non_negative)
    guild_ready_timeout_s: float = _opt(2.0, _non_negative)
    identify_delay_s: float = _opt(5.0, _non_negative)  # before every IDENTIFY but the first
    rate_limit_wait_s: float = _opt(
        30.0, lambda v: None if v >= 30 else "must be at least 30 (discord.py's minimum)"
    )
    typing_deadline_s: float = _opt(300.0, _positive)
    connect_timeout_s: float = _opt(60.0, _positive)
    shard_count: int = _opt(1, _positive)  # gateway shards; several nodes share them (leases)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Runtime limits: how many turns run at once, how long idle actors live, drain time."""

    max_concurrent_turns: int = _opt(64, _positive)
    idle_evict_s: float = _opt(600.0, _positive)
    drain_timeout_s: float = _opt(30.0, _non_negative)
    outbox_max_age_s: float = _opt(3600.0, _positive)
    mailbox_size: int = _opt(256, _positive)
    # A chunk a platform may have taken just before a crash (sent, not yet recorded):
    # "resend" it after restart (never lost, at most one duplicate) or "drop" it (never
    # twice, possibly lost). Platforms that deduplicate sends (Discord) never duplicate.
    unrecorded_sends: str = _opt("resend", _one_of("resend", "drop"))


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = _opt("info", _one_of("debug", "info", "warning", "error"))
    format: str = _opt("console", _one_of("console", "json"))


@dataclass(frozen=True, slots=True)
class Config:
    store: StoreConfig = StoreConfig()
    model: ModelConfig | None = None
    agent: AgentConfig = AgentConfig()
    peer: PeerConfig = PeerConfig()
    gateway: GatewayConfig = GatewayConfig()
    log: LogConfig = LogConfig()
    telegram: TelegramConfig | None = None
    discord: DiscordConfig | None = None
    cluster: ClusterConfig = ClusterConfig()
    source: str = field(default="(embedded defaults)", metadata={"internal": True})

    def secrets(self) -> tuple[str, ...]:
        """Every secret value in this config, for redaction."""
        found: list[str] = list(self.peer.tokens)
        password = re.match(r"^[a-z]+://[^:/@]+:([^@]+)@", self.store.url)
        if password:
            found.append(password.group(1))
        if self.model is not None:
            for endpoint in self.model.chain:
                found.extend(endpoint.api_keys)
        for platform in (self.telegram, self.discord):
            if platform is not None:
                found.append(platform.token)
        if self.telegram is not None:
            found.append(self.telegram.webhook_secret)
        return tuple(s for s in found if s and s != "unused")


# -- loading ------------------------------------------------------------------------------

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: str, path: str, env: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigError(path, f"environment variable {name} is not set")
        return env[name]

    return _VAR.sub(replace, value)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        tp, str(tp)
    )


def _convert(tp: Any, value: Any, path: str, env: Mapping[str, str]) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner, value, path, env)
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(path, f"must be {_type_name(tp)}")
        (item,) = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return tuple(_convert(item, v, f"{path}[{i}]", env) for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(path, "must be a table")
        return _build(typing.cast(type, tp), value, path, env)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, str):
        return _expand(value, path, env)
    if tp is int and isinstance(value, str) and _VAR.search(value):
        expanded = _expand(value, path, env)
        if not expanded.lstrip("-").isdigit():
            raise ConfigError(path, f"must be an integer, got {expanded!r}")
        return int(expanded)
    if isinstance(value, bool) != (tp is bool) or not isinstance(value, tp):
        raise ConfigError(path, f"must be {_type_name(tp)}, got {value!r}")
    return value


def _build(cls: type, data: Mapping[str, Any], path: str, env: Mapping[str, str]) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else key
            known = ", ".join(sorted(fields))
            raise ConfigError(where, f"unknown key (known here: {known})")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(where, "is required")
            continue
        value = _convert(hints[name], data[name], where, env)
        check = f.metadata.get("check")
        if check is not None:
            problem = check(value)
            if problem:
                raise ConfigError(where, problem)
        kwargs[name] = value
    return cls(**kwargs)


def _model_from_env(env: Mapping[str, str]) -> ModelConfig | None:
    base_url, key = env.get("OPENAI_BASE_URL"), env.get("OPENAI_API_KEY")
    if not base_url and not key:
        return None
    data = {
        "model": env.get("BOTMUX_MODEL") or "gpt-4o-mini",
        "base_url": base_url or "https://api.openai.com/v1",
        "api_keys": [key or "unused"],
    }
    return typing.cast(ModelConfig, _build(ModelConfig, data, "model (from environment)", env))


def parse_config(text: str, *, source: str, env: Mapping[str, str]) -> Config:
    """Parse and validate TOML text; raise :class:`ConfigError` naming the bad key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{source} is not valid TOML: {exc}") from exc
    config = typing.cast(Config, _build(Config, data, "", env))
    if config.model is None:
        config = dataclasses.replace(config, model=_model_from_env(env))
    _check_peer_exposure(config.peer)
    if config.cluster.heartbeat_s * 3 > config.cluster.lease_s:
        raise ConfigError(
            "cluster.heartbeat_s",
            f"{config.cluster.heartbeat_s} is more than a third of cluster.lease_s"
            f" ({config.cluster.lease_s}): a node would lose leases between two heartbeats",
        )
    return dataclasses.replace(config, source=source)


def _check_peer_exposure(peer: PeerConfig) -> None:
    if peer.tokens:
        return
    host = peer.host
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            "peer.listen",
            f"{peer.listen} is not a loopback address and peer.tokens is empty: set tokens"
            " before exposing the peer API",
        )


def config_path(explicit: str | None, env: Mapping[str, str]) -> tuple[Path, bool]:
    """Where the config comes from, and whether that file must exist."""
    if explicit:
        return Path(explicit), True
    if env.get("BOTMUX_CONFIG"):
        return Path(env["BOTMUX_CONFIG"]), True
    return Path("botmux.toml"), False


def load_config(explicit: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load the config from ``--config``, ``$BOTMUX_CONFIG``, ``./botmux.toml`` or defaults."""
    env = os.environ if env is None else env
    path, required = config_path(explicit, env)
    if not path.exists():
        if required:
            raise ConfigError("", f"config file {path} does not exist")
        return parse_config("", source="(embedded defaults)", env=env)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read {path}: {exc}") from exc
    return parse_config(text, source=str(path), env=env)
