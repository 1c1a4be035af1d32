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
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Le
from pydantic import TypeAdapter

from gateway import _config_checks as checks
from gateway._schema import SECRET, TABLE, Problem, rule, validate
from gateway.config_peer import PeerConfig, peer_problems
from gateway.config_schedules import ScheduleEntry, SchedulerConfig, schedule_problems
from gateway.config_slack import SlackConfig, slack_problems
from gateway.config_tools import (
    Profile,
    ResolvedProfile,
    ToolsConfig,
    tool_problems,
)
from gateway.errors import ConfigError
from gateway.queue import QUEUE_MODES, QueueMode, QueuePolicy

MIN_TOKEN_CHARS = checks.MIN_TOKEN_CHARS


def _secret(default: Any = dataclasses.MISSING) -> Any:
    """A secret field: hidden from ``repr``, and an empty ``${VAR}`` in it is refused."""
    return field(default=default, repr=False, metadata=SECRET)


# Enumerations are Literal types: pydantic refuses another value (``_schema`` says which
# values it may take) and mypy refuses a misspelled one in code (``mode == "pollling"``).
InputKind = Literal["text", "image"]
Compaction = Literal["off", "summary"]
TelegramMode = Literal["polling", "webhook"]
GroupMode = Literal["mention", "all", "off"]
TelegramStreaming = Literal["auto", "draft", "edit", "off"]
GuildAccess = Literal["everyone", "allowed"]
ReplyTo = Literal["first", "all", "none"]
DiscordStreaming = Literal["edit", "off"]
UnrecordedSends = Literal["resend", "drop"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["console", "json"]


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """SQLite at ``path`` (one node), or PostgreSQL at ``url`` (one or several nodes)."""

    __pydantic_config__ = TABLE

    path: Annotated[str, rule(checks.non_empty)] = "botmux.db"
    url: Annotated[str, rule(checks.postgres_url)] = _secret("")  # it holds a password
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

    node_id: Annotated[str, rule(checks.node_id)] = ""
    lease_s: Annotated[float, Gt(0)] = 5.0
    heartbeat_s: Annotated[float, Gt(0)] = 1.0
    claim_batch: Annotated[int, Gt(0)] = 64


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """One model of the chain: where it is, what it is called, the keys of its pool."""

    __pydantic_config__ = TABLE

    model: Annotated[str, rule(checks.non_empty)]
    base_url: Annotated[str, rule(checks.url)] = "https://api.openai.com/v1"
    api_keys: Annotated[tuple[str, ...], rule(checks.non_empty)] = _secret(("unused",))
    timeout_s: Annotated[float, Gt(0)] = 60.0
    max_retries: Annotated[int, Gt(0)] = 3
    max_output_tokens: Annotated[int, Gt(0)] = 4096  # sent as the request's max_tokens
    # context: the model's window in tokens (prompt + max_output_tokens); 0: no token bound.
    context_tokens: Annotated[int, Ge(0)] = 0
    # What the model takes in (SPEC 9): a turn with images skips models without "image".
    input: Annotated[tuple[InputKind, ...], rule(checks.has_text)] = ("text",)

    @property
    def sees_images(self) -> bool:
        return "image" in self.input


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
            input=self.input,
        )
        return (primary, *self.fallbacks)


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedModels(ModelConfig):
    """A model chain of its own (``[[models]]``), for the profiles that name it."""

    name: Annotated[str, rule(checks.non_empty)]


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
    compaction: Compaction = "off"
    # Attachments (SPEC 9): the largest file fetched, how many per message, how many recent
    # turns' images are sent again with the history, and a document's inlined text.
    max_attachment_bytes: Annotated[int, Gt(0)] = 20 * 1024 * 1024
    # Bytes of attachments all turns hold at once (images until their model call is over);
    # past it a file waits for room (at most a minute), then is left out with a notice.
    max_attachment_bytes_in_flight: Annotated[int, Gt(0)] = 256 * 1024 * 1024
    max_attachments: Annotated[int, Ge(0)] = 10
    history_images: Annotated[int, Ge(0)] = 2
    max_document_chars: Annotated[int, Gt(0)] = 100_000
    # A PDF is read in a child process (gateway.pdf): at most this many pages, within this
    # much CPU (and twice it in wall time) and memory; past the budget, what was read is used.
    max_document_pages: Annotated[int, Gt(0)] = 500
    document_cpu_s: Annotated[float, Gt(0)] = 30.0
    document_memory_mb: Annotated[int, Ge(256)] = 1024
    # Tools (SPEC 15): globs over <server>__<tool> and the built-in tools; none by default, so
    # a conversation no [[profiles]] entry matches is offered none. Then the tool loop's bounds.
    tools: tuple[Annotated[str, rule(checks.non_empty)], ...] = ()
    max_parallel_tools: Annotated[int, Gt(0)] = 4
    max_tool_steps: Annotated[int, Gt(0)] = 25  # model calls per turn
    max_turn_s: Annotated[float, Gt(0)] = 600.0
    max_tool_result_chars: Annotated[int, Ge(100)] = 20_000


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """The Telegram bot (docs/TELEGRAM.md explains every key)."""

    __pydantic_config__ = TABLE

    token: Annotated[str, rule(checks.non_empty)] = field(repr=False, metadata=SECRET)
    api_base: Annotated[str, rule(checks.url)] = "https://api.telegram.org"  # /bot<token>/ is added
    mode: TelegramMode = "polling"
    allow_users: tuple[int, ...] = ()  # always allowed; others need DM pairing
    allow_chats: tuple[int, ...] = ()  # groups where every member may talk to the bot
    # In groups: answer when mentioned, replied to or commanded; every message; or never.
    group_mode: GroupMode = "mention"
    webhook_listen: Annotated[str, rule(checks.listen)] = "127.0.0.1:8443"  # our webhook server
    # The public https URL Telegram posts updates to, and the secret it sends with them.
    webhook_url: Annotated[str, rule(lambda v: checks.url(v) if v else None)] = ""
    webhook_secret: Annotated[str, rule(checks.webhook_secret)] = _secret("")
    poll_timeout_s: Annotated[int, Gt(0)] = 30  # long-poll duration of one getUpdates
    request_timeout_s: Annotated[float, Gt(0)] = 15.0  # one Bot API call (sends, typing)
    typing_interval_s: Annotated[float, Gt(0)] = 4.0
    typing_deadline_s: Annotated[float, Gt(0)] = 300.0
    # Previews while the model writes (SPEC 8): drafts in private chats, an edited message
    # elsewhere ("auto"); or always the edited message; or none.
    streaming: TelegramStreaming = "auto"
    stream_interval_s: Annotated[float | None, Gt(0)] = None  # None: 0.5 (draft), 1.0 (edit)
    stream_min_chars: Annotated[int, Ge(0)] = 40  # before a preview message is sent
    # Queue mode for this platform's conversations (SPEC 10); None: [gateway] queue_mode.
    queue_mode: QueueMode | None = None


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """The Discord bot (docs/DISCORD.md explains every key)."""

    __pydantic_config__ = TABLE

    token: Annotated[str, rule(checks.non_empty)] = field(repr=False, metadata=SECRET)
    api_base: Annotated[str, rule(checks.url)] = "https://discord.com/api/v10"
    gateway_url: Annotated[str, rule(checks.ws_url)] = "wss://gateway.discord.gg"
    allow_users: tuple[int, ...] = ()  # always allowed; others need DM pairing
    allow_guilds: tuple[int, ...] = ()  # empty: every guild the bot is in
    # Who may talk to the bot in an allowed guild: only allowed/paired users, or every member
    # (an explicit choice: with allow_guilds empty that is anyone who adds the bot).
    guild_access: GuildAccess = "allowed"
    require_mention: bool = True  # in guilds: answer only when mentioned or replied to
    answer_all_guilds: tuple[int, ...] = ()  # ... except in these guilds
    answer_all_channels: tuple[int, ...] = ()  # ... and these channels (and their threads)
    reply_to: ReplyTo = "first"  # which chunks reply
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
    streaming: DiscordStreaming = "edit"
    stream_interval_s: Annotated[float, Gt(0)] = 1.0
    connect_timeout_s: Annotated[float, Gt(0)] = 60.0
    shard_count: Annotated[int, Gt(0)] = 1  # gateway shards; several nodes share them (leases)
    # Queue mode for this platform's conversations (SPEC 10); None: [gateway] queue_mode.
    queue_mode: QueueMode | None = None


# -- [a2a] (SPEC 12): the A2A server on the peer listener ------------------------------


def push_host(entry: str) -> tuple[str, int | None]:
    """An ``[a2a] push_hosts`` entry (checked at load) as (host, port): the host lowercased,
    IPv6 without brackets; the port None when the entry names none (then only the URL
    scheme's default port is allowed)."""
    parsed = checks.host_port(entry)
    if parsed is None:
        raise ValueError(f"not a push_hosts entry: {entry!r}")
    return parsed


@dataclass(frozen=True, slots=True)
class A2aSkill:
    """One skill of the agent card."""

    __pydantic_config__ = TABLE

    id: Annotated[str, rule(checks.non_empty)]
    name: Annotated[str, rule(checks.non_empty)]
    description: str = ""


@dataclass(frozen=True, slots=True)
class A2aConfig:
    """A2A 1.0 at ``POST /a2a`` and the agent card (docs/A2A.md); on when the section is
    present. ``push_hosts``: the only ``host[:port]``s push notifications go to (empty:
    refused; no port: the scheme's default one)."""

    __pydantic_config__ = TABLE

    name: Annotated[str, rule(checks.non_empty)] = "botmux"
    description: str = "An AI assistant behind botmux"
    skills: tuple[A2aSkill, ...] = ()
    public_url: Annotated[str, rule(lambda v: checks.url(v) if v else None)] = ""
    push_hosts: tuple[Annotated[str, rule(checks.push_host)], ...] = ()


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
    unrecorded_sends: UnrecordedSends = "resend"
    # Messages waiting for a turn, per conversation and in all: past either a new one is
    # refused before it is stored (Overloaded). And the longest message accepted.
    max_pending_per_conversation: Annotated[int, Gt(0)] = 32
    max_pending_total: Annotated[int, Gt(0)] = 10_000
    max_message_chars: Annotated[int, Gt(0)] = 32_000
    # Queue modes (SPEC 10): "followup" (a turn per message), "collect" (a burst is one turn:
    # messages within debounce_s of each other, at most debounce_max_s after the first, or
    # sent while a turn runs) or "interrupt" (a new message stops the running turn and both
    # are answered together). Each platform section may set its own queue_mode.
    queue_mode: QueueMode = "followup"
    debounce_s: Annotated[float, Ge(0)] = 1.5
    debounce_max_s: Annotated[float, Ge(0)] = 5.0
    # Where the run file for botmux reload / check goes (gateway.control; "": the default).
    run_dir: str = ""


@dataclass(frozen=True, slots=True)
class LogConfig:
    __pydantic_config__ = TABLE

    level: LogLevel = "info"
    format: LogFormat = "console"


@dataclass(frozen=True, slots=True)
class Config:
    __pydantic_config__ = TABLE

    store: StoreConfig = StoreConfig()
    model: ModelConfig | None = None
    agent: AgentConfig = AgentConfig()
    peer: PeerConfig = field(default_factory=PeerConfig)
    gateway: GatewayConfig = GatewayConfig()
    log: LogConfig = LogConfig()
    telegram: TelegramConfig | None = None
    discord: DiscordConfig | None = None
    slack: SlackConfig | None = None  # SPEC 17 (gateway/config_slack.py)
    a2a: A2aConfig | None = None  # SPEC 12: on when the section is present
    cluster: ClusterConfig = ClusterConfig()
    # Voice and audio (SPEC 9): an OpenAI-compatible /v1/audio/transcriptions endpoint, with
    # [model]'s shape (api_keys pool, fallbacks, retries); absent: voice is not configured.
    transcription: ModelConfig | None = None
    # Tools (SPEC 15): the MCP servers and approvals; named model chains; the profiles.
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    models: tuple[NamedModels, ...] = ()
    profiles: tuple[Profile, ...] = ()
    # Scheduled messages (SPEC 16): the settings, and the config's own schedules.
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    schedules: tuple[ScheduleEntry, ...] = ()
    source: str = field(default="(embedded defaults)", metadata={"internal": True})

    def profile(self, conversation: str) -> ResolvedProfile:
        """The agent ``conversation`` gets: the first profile that matches it, else
        ``[agent]`` and ``[model]`` (SPEC 15)."""
        found = next((p for p in self.profiles if p.matches(conversation)), None)
        agent = self.agent
        if found is None:
            return ResolvedProfile("", agent.system_prompt, agent.tools, None, self.model)
        chain = self.model
        if found.model is not None:
            chain = next(m for m in self.models if m.name == found.model)  # cross-checked
        return ResolvedProfile(
            found.name,
            agent.system_prompt if found.system_prompt is None else found.system_prompt,
            agent.tools if found.tools is None else found.tools,
            found.queue_mode,
            chain,
        )

    @property
    def platforms_on(self) -> set[str]:
        """The platforms a conversation (and a schedule) can be on: the peer API always."""
        chats = ("telegram", "discord", "slack")
        return {"peer"} | {p for p in chats if getattr(self, p) is not None}

    def queue_policy(self, platform: str, conversation: str = "") -> QueuePolicy:
        """The queue mode of a conversation of ``platform``: its profile's, else its platform
        section's, else the gateway's."""
        section = getattr(self, platform, None)
        chosen_by_profile = self.profile(conversation).queue_mode if conversation else None
        mode = chosen_by_profile or getattr(section, "queue_mode", None) or self.gateway.queue_mode
        if platform == "a2a":  # an A2A task is one turn (SPEC 12): never merged with another
            mode = "followup"
        assert mode in QUEUE_MODES  # validated
        chosen: QueueMode = mode
        return QueuePolicy(chosen, self.gateway.debounce_s, self.gateway.debounce_max_s)

    def secrets(self) -> tuple[str, ...]:
        """Every secret value in this config, for redaction."""
        found: list[str] = list(self.peer.token_values)
        password = re.match(r"^[a-z]+://[^:/@]+:([^@]+)@", self.store.url)
        if password:
            found.append(password.group(1))
        for chain in (self.model, self.transcription):
            for endpoint in chain.chain if chain is not None else ():
                found.extend(endpoint.api_keys)
        for platform in (self.telegram, self.discord):
            if platform is not None:
                found.append(platform.token)
        if self.telegram is not None:
            found.append(self.telegram.webhook_secret)
        if self.slack is not None:
            found.extend(self.slack.secrets())
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
    problems = peer_problems(config.peer)
    if config.cluster.heartbeat_s * 3 > config.cluster.lease_s:
        problems.append(
            (
                "cluster.heartbeat_s",
                f"{config.cluster.heartbeat_s} is more than a third of cluster.lease_s"
                f" ({config.cluster.lease_s}): a node would lose leases between two heartbeats",
            )
        )
    if config.gateway.debounce_max_s < config.gateway.debounce_s:
        problems.append(
            (
                "gateway.debounce_max_s",
                f"{config.gateway.debounce_max_s} is less than gateway.debounce_s"
                f" ({config.gateway.debounce_s})",
            )
        )
    if config.telegram is not None and config.telegram.mode == "webhook":
        for key in ("webhook_url", "webhook_secret"):
            if not getattr(config.telegram, key):
                problems.append((f"telegram.{key}", 'is required when mode = "webhook"'))
    problems += slack_problems(config.slack)
    problems += schedule_problems(config.schedules, config.scheduler, config.platforms_on)
    return problems + tool_problems(config.tools, config.models, config.profiles)


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
