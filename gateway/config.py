"""The configuration: one TOML file, validated whole at start (SPEC section 6).

The schema is the dataclasses below, validated by pydantic (``TypeAdapter``, strict JSON
mode: TOML's types, no "5" for a number): every key that no field names, every value of the
wrong type or out of range is reported at once, each with its full path, in one
:class:`ConfigError`. ``${VAR}`` in any string is replaced from the environment (an unset
variable is an error; so is an empty one in a secret). With no file at all, the embedded
defaults apply and the model comes from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` /
``BOTMUX_MODEL``.

Secrets are the fields with ``SECRET`` metadata (``_secret()``): no ``repr`` shows them, an
empty ``${VAR}`` in them is refused, and no error message ever echoes a value (it names the
key, the expected type and the variable).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le
from pydantic import AfterValidator, BeforeValidator, TypeAdapter

from gateway._schema import SECRET, TABLE, Problem, problem_error, rule, validate
from gateway.errors import ConfigError

MIN_TOKEN_CHARS = 16


def _secret(default: Any = dataclasses.MISSING) -> Any:
    """A secret field: hidden from ``repr``, and an empty ``${VAR}`` in it is refused."""
    return field(default=default, repr=False, metadata=SECRET)


def _one_of(*choices: str) -> AfterValidator:
    return rule(
        lambda v: None if v in choices else f"must be one of {', '.join(map(repr, choices))}"
    )


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


def _postgres_url(value: Any) -> str | None:
    if value == "" or re.match(r"^postgres(ql)?://[^\s]*$", value):
        return None
    return "must be a postgresql:// URL (or empty for the SQLite file at store.path)"


def _node_id(value: Any) -> str | None:
    if value == "" or re.match(r"^[A-Za-z0-9._-]{1,48}$", value):
        return None
    return "must be 1-48 of A-Z a-z 0-9 . _ - (or empty: hostname-pid)"


def _token(value: Any) -> str | None:
    if not value.strip():
        return "must not be empty or whitespace (leave tokens = [] for no auth, loopback only)"
    if len(value.strip()) < MIN_TOKEN_CHARS:
        return f"must be at least {MIN_TOKEN_CHARS} characters"
    return None


def _token_name(value: Any) -> str | None:
    if re.fullmatch(r"[A-Za-z0-9._:-]{1,64}", value):
        return None
    return "must be 1-64 of A-Z a-z 0-9 . _ : -"


def _network(value: Any) -> str | None:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return "must be an IP address or a CIDR network (10.0.0.0/8)"
    return None


def _webhook_secret(value: Any) -> str | None:
    if re.fullmatch(r"[A-Za-z0-9_-]{0,256}", value):
        return None
    return "must be 1-256 characters of A-Z, a-z, 0-9, _ and -"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """SQLite at ``path`` (one node), or PostgreSQL at ``url`` (one or several nodes)."""

    __pydantic_config__ = TABLE

    path: Annotated[str, rule(_non_empty)] = "botmux.db"
    url: Annotated[str, rule(_postgres_url)] = _secret("")  # it holds a password
    pool_size: Annotated[int, Gt(0)] = 10
    command_timeout_s: Annotated[float, Gt(0)] = 10.0  # one store statement
    retention_days: Annotated[float, Ge(0)] = 0.0  # conversations idle this long go (0: keep)
    anonymous_retention_days: Annotated[float, Ge(0)] = 7.0  # peer anon- ones (0: keep)

    @property
    def shared(self) -> bool:
        return bool(self.url)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Several nodes on one PostgreSQL store (ignored with SQLite)."""

    __pydantic_config__ = TABLE

    node_id: Annotated[str, rule(_node_id)] = ""
    lease_s: Annotated[float, Gt(0)] = 5.0
    heartbeat_s: Annotated[float, Gt(0)] = 1.0
    claim_batch: Annotated[int, Gt(0)] = 64


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """One model of the chain: where it is, what it is called, the keys of its pool."""

    __pydantic_config__ = TABLE

    model: Annotated[str, rule(_non_empty)]
    base_url: Annotated[str, rule(_url)] = "https://api.openai.com/v1"
    api_keys: Annotated[tuple[str, ...], rule(_non_empty)] = _secret(("unused",))
    timeout_s: Annotated[float, Gt(0)] = 60.0
    max_retries: Annotated[int, Gt(0)] = 3
    max_output_tokens: Annotated[int, Gt(0)] = 4096  # sent as the request's max_tokens
    # context: the model's window in tokens (prompt + max_output_tokens); 0: no token bound.
    context_tokens: Annotated[int, Ge(0)] = 0


@dataclass(frozen=True, slots=True)
class ModelConfig(ModelEndpoint):
    """The primary model and its fallbacks, tried in order."""

    fallbacks: tuple[ModelEndpoint, ...] = ()
    retry_after_cap_s: Annotated[float, Ge(0)] = 60.0
    backoff_base_s: Annotated[float, Ge(0)] = 0.5
    backoff_cap_s: Annotated[float, Ge(0)] = 8.0

    @property
    def chain(self) -> tuple[ModelEndpoint, ...]:
        primary = ModelEndpoint(
            model=self.model,
            base_url=self.base_url,
            api_keys=self.api_keys,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            max_output_tokens=self.max_output_tokens,
            context_tokens=self.context_tokens,
        )
        return (primary, *self.fallbacks)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    __pydantic_config__ = TABLE

    system_prompt: str = "You are a helpful assistant."
    history_messages: Annotated[int, Ge(0)] = 40
    # The history's budget in characters of content; the oldest rows are left out first.
    history_chars: Annotated[int, Gt(0)] = 200_000
    # Stream from the model when the turn has somewhere to show the growing text (SPEC 8).
    stream: bool = True
    # context: rows leaving the window are folded by the model into one stored summary.
    compaction: Annotated[str, _one_of("off", "summary")] = "off"


@dataclass(frozen=True, slots=True)
class PeerToken:
    """One peer bearer token, a principal: named in logs and metrics (never shown itself),
    limited to the sessions its globs match, with its own request rate (0: the default)."""

    __pydantic_config__ = TABLE

    token: Annotated[str, rule(_token)] = field(repr=False, metadata=SECRET)
    name: Annotated[str, rule(_token_name)]
    sessions: Annotated[tuple[Annotated[str, rule(_non_empty)], ...], rule(_non_empty)] = ("*",)
    requests_per_min: Annotated[int, Ge(0)] = 0

    @staticmethod
    def default_name(token: str) -> str:
        """The name of a token given as a plain string: ``token-`` and 8 hex of its SHA-256."""
        return "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]

    @classmethod
    def plain(cls, token: str) -> PeerToken:
        """What ``tokens = ["..."]`` makes of a string: every session, the default rate."""
        return cls(token=token, name=cls.default_name(token))


def _peer_token_entry(value: Any) -> Any:
    """A plain string is a token named after its hash; a table may leave its name out too.
    Configured tokens are stripped (a CRLF ``.env`` leaves a ``\\r`` that could never match)."""
    if isinstance(value, str):
        token = value.strip()
        problem = _token(token)
        if problem:
            raise problem_error(problem)
        return {"token": token, "name": PeerToken.default_name(token)}
    if isinstance(value, dict) and isinstance(value.get("token"), str):
        token = value["token"].strip()
        # What this returns is validated as Python, where strict mode wants a tuple.
        table = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
        return {"name": PeerToken.default_name(token), **table, "token": token}
    return value


@dataclass(frozen=True, slots=True)
class PeerConfig:
    __pydantic_config__ = TABLE

    listen: Annotated[str, rule(_listen)] = "127.0.0.1:8642"
    # Strings or [[peer.tokens]] tables; empty: no auth, loopback only.
    # (A secret, though shown in repr: PeerToken's repr shows its name, never the token.)
    tokens: tuple[Annotated[PeerToken, BeforeValidator(_peer_token_entry)], ...] = field(
        default=(), metadata=SECRET
    )
    max_body_bytes: Annotated[int, Gt(0)] = 1024 * 1024
    # Failed bearer-token attempts per client address in a sliding window; past the limit that
    # address gets 429 until the window frees it. No legitimate client fails this often. 0: off.
    auth_fail_limit: Annotated[int, Ge(0)] = 10
    auth_fail_window_s: Annotated[float, Gt(0)] = 60.0
    # Requests per minute per peer token (a token bucket of token_burst). Off by default: the
    # gateway's own bounds (max_concurrent_turns, mailboxes) already protect it, and what is
    # fair between peers depends on the deployment. 0: off.
    token_requests_per_min: Annotated[int, Ge(0)] = 0
    token_burst: Annotated[int, Gt(0)] = 60
    header_timeout_s: Annotated[float, Gt(0)] = 10.0  # a connection's request headers
    idle_timeout_s: Annotated[float, Gt(0)] = 75.0  # an idle keep-alive connection
    max_connections: Annotated[int, Gt(0)] = 1000
    # Direct peers whose X-Forwarded-For is believed (IPs or CIDRs): your reverse proxies.
    trusted_proxies: tuple[Annotated[str, rule(_network)], ...] = ()

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def token_values(self) -> tuple[str, ...]:
        return tuple(t.token for t in self.tokens)


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """The Telegram bot (docs/TELEGRAM.md explains every key)."""

    __pydantic_config__ = TABLE

    token: Annotated[str, rule(_non_empty)] = field(repr=False, metadata=SECRET)
    api_base: Annotated[str, rule(_url)] = "https://api.telegram.org"  # /bot<token>/ is added
    mode: Annotated[str, _one_of("polling", "webhook")] = "polling"
    allow_users: tuple[int, ...] = ()  # always allowed; others need DM pairing
    allow_chats: tuple[int, ...] = ()  # groups where every member may talk to the bot
    # In groups: answer when mentioned, replied to or commanded; every message; or never.
    group_mode: Annotated[str, _one_of("mention", "all", "off")] = "mention"
    webhook_listen: Annotated[str, rule(_listen)] = "127.0.0.1:8443"  # our webhook server
    # The public https URL Telegram posts updates to, and the secret it sends with them.
    webhook_url: Annotated[str, rule(lambda v: _url(v) if v else None)] = ""
    webhook_secret: Annotated[str, rule(_webhook_secret)] = _secret("")
    poll_timeout_s: Annotated[int, Gt(0)] = 30  # long-poll duration of one getUpdates
    request_timeout_s: Annotated[float, Gt(0)] = 15.0  # one Bot API call (sends, typing)
    typing_interval_s: Annotated[float, Gt(0)] = 4.0
    typing_deadline_s: Annotated[float, Gt(0)] = 300.0
    # Previews while the model writes (SPEC 8): drafts in private chats, an edited message
    # elsewhere ("auto"); or always the edited message; or none.
    streaming: Annotated[str, _one_of("auto", "draft", "edit", "off")] = "auto"
    stream_interval_s: Annotated[float | None, Gt(0)] = None  # None: 0.5 (draft), 1.0 (edit)
    stream_min_chars: Annotated[int, Ge(0)] = 40  # before a preview message is sent


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """The Discord bot (docs/DISCORD.md explains every key)."""

    __pydantic_config__ = TABLE

    token: Annotated[str, rule(_non_empty)] = field(repr=False, metadata=SECRET)
    api_base: Annotated[str, rule(_url)] = "https://discord.com/api/v10"
    gateway_url: Annotated[str, rule(_ws_url)] = "wss://gateway.discord.gg"
    allow_users: tuple[int, ...] = ()  # always allowed; others need DM pairing
    allow_guilds: tuple[int, ...] = ()  # empty: every guild the bot is in
    # Who may talk to the bot in an allowed guild: only allowed/paired users, or every member
    # (an explicit choice: with allow_guilds empty that is anyone who adds the bot).
    guild_access: Annotated[str, _one_of("everyone", "allowed")] = "allowed"
    require_mention: bool = True  # in guilds: answer only when mentioned or replied to
    answer_all_guilds: tuple[int, ...] = ()  # ... except in these guilds
    answer_all_channels: tuple[int, ...] = ()  # ... and these channels (and their threads)
    reply_to: Annotated[str, _one_of("first", "all", "none")] = "first"  # which chunks reply
    chunk_chars: Annotated[int, Ge(100), Le(2000)] = 2000
    max_lines: Annotated[
        int, rule(lambda v: None if v == 0 or v >= 8 else "must be 0 (no cap) or at least 8")
    ] = 0
    slash_commands: bool = True  # register /new /status /stop /help as application commands
    backfill_messages: Annotated[int, Ge(0), Le(100)] = 50
    backfill_channels: Annotated[int, Ge(0)] = 50
    guild_ready_timeout_s: Annotated[float, Ge(0)] = 2.0
    identify_delay_s: Annotated[float, Ge(0)] = 5.0  # before every IDENTIFY but the first
    rate_limit_wait_s: Annotated[float, Ge(30)] = 30.0  # discord.py's minimum
    typing_deadline_s: Annotated[float, Gt(0)] = 300.0
    # Previews while the model writes (SPEC 8): one message, edited at most every interval.
    streaming: Annotated[str, _one_of("edit", "off")] = "edit"
    stream_interval_s: Annotated[float, Gt(0)] = 1.0
    connect_timeout_s: Annotated[float, Gt(0)] = 60.0
    shard_count: Annotated[int, Gt(0)] = 1  # gateway shards; several nodes share them (leases)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Runtime limits: how many turns run at once, how long idle actors live, drain time."""

    __pydantic_config__ = TABLE

    max_concurrent_turns: Annotated[int, Gt(0)] = 64
    idle_evict_s: Annotated[float, Gt(0)] = 600.0
    drain_timeout_s: Annotated[float, Ge(0)] = 30.0
    outbox_max_age_s: Annotated[float, Gt(0)] = 3600.0
    mailbox_size: Annotated[int, Gt(0)] = 256
    # A chunk a platform may have taken just before a crash (sent, not yet recorded):
    # "resend" it after restart (never lost, at most one duplicate) or "drop" it (never
    # twice, possibly lost). Platforms that deduplicate sends (Discord) never duplicate.
    unrecorded_sends: Annotated[str, _one_of("resend", "drop")] = "resend"
    # Messages waiting for a turn, per conversation and in all: past either a new one is
    # refused before it is stored (Overloaded). And the longest message accepted.
    max_pending_per_conversation: Annotated[int, Gt(0)] = 32
    max_pending_total: Annotated[int, Gt(0)] = 10_000
    max_message_chars: Annotated[int, Gt(0)] = 32_000


@dataclass(frozen=True, slots=True)
class LogConfig:
    __pydantic_config__ = TABLE

    level: Annotated[str, _one_of("debug", "info", "warning", "error")] = "info"
    format: Annotated[str, _one_of("console", "json")] = "console"


@dataclass(frozen=True, slots=True)
class Config:
    __pydantic_config__ = TABLE

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
        found: list[str] = list(self.peer.token_values)
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


_CONFIG = TypeAdapter(Config)
_MODEL = TypeAdapter(ModelConfig)


def _model_from_env(env: Mapping[str, str]) -> tuple[ModelConfig | None, list[Problem]]:
    base_url, key = env.get("OPENAI_BASE_URL"), env.get("OPENAI_API_KEY")
    if not base_url and not key:
        return None, []
    data = {
        "model": env.get("BOTMUX_MODEL") or "gpt-4o-mini",
        "base_url": base_url or "https://api.openai.com/v1",
        "api_keys": [key or "unused"],
    }
    return validate(_MODEL, ModelConfig, data, None, "model (from environment)")


def parse_config(text: str, *, source: str, env: Mapping[str, str]) -> Config:
    """Parse and validate TOML text; raise :class:`ConfigError` naming every bad key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{source} is not valid TOML: {exc}") from exc
    problems: list[Problem] = []
    for f in dataclasses.fields(Config):
        if f.metadata.get("internal") and data.pop(f.name, None) is not None:
            problems.append((f.name, "unknown key (it is not read from the file)"))
    outcome = validate(_CONFIG, Config, data, env)
    config, errors = outcome
    problems += errors
    if config is not None and config.model is None:
        model, errors = _model_from_env(env)
        problems += errors
        config = dataclasses.replace(config, model=model)
    if config is not None:
        problems += _cross_checks(config)
    if problems or config is None:
        raise ConfigError.of(tuple(problems))
    return dataclasses.replace(config, source=source)


def _cross_checks(config: Config) -> list[Problem]:
    """What no single key can say: combinations of valid values that do not work together."""
    problems = _peer_problems(config.peer)
    if config.cluster.heartbeat_s * 3 > config.cluster.lease_s:
        problems.append(
            (
                "cluster.heartbeat_s",
                f"{config.cluster.heartbeat_s} is more than a third of cluster.lease_s"
                f" ({config.cluster.lease_s}): a node would lose leases between two heartbeats",
            )
        )
    if config.telegram is not None and config.telegram.mode == "webhook":
        for key in ("webhook_url", "webhook_secret"):
            if not getattr(config.telegram, key):
                problems.append((f"telegram.{key}", 'is required when mode = "webhook"'))
    return problems


def _peer_problems(peer: PeerConfig) -> list[Problem]:
    problems: list[Problem] = []
    tokens: dict[str, int] = {}
    names: dict[str, int] = {}
    for i, t in enumerate(peer.tokens):
        if t.token in tokens:
            problems.append(
                (f"peer.tokens[{i}]", f"the same token as peer.tokens[{tokens[t.token]}]")
            )
            continue
        tokens[t.token] = i
        if t.name in names:
            problems.append(
                (f"peer.tokens[{i}].name", f"the same name as peer.tokens[{names[t.name]}]")
            )
        names.setdefault(t.name, i)
    if not peer.tokens:
        host = peer.host
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            problems.append(
                (
                    "peer.listen",
                    "is not a loopback address and peer.tokens is empty: set tokens before"
                    " exposing the peer API",
                )
            )
    return problems


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
