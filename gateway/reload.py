"""Live reconfiguration (SPEC section 13): what a new config file would change, and applying it.

:func:`plan_reload` is pure: it compares two configs key by key and sorts every changed key
into those that apply to the next turn (``live``) and those only a restart can change
(``restart``). A key is live only when it is in :data:`LIVE_KEYS`; anything else, including a
key added later and not listed here, needs a restart (fail closed: the part that reads it may
read it only at start). A section that appears or goes (``telegram``) is a restart key.

:class:`Reloader` acts on a plan: it re-reads the file the gateway was started with, refuses
the whole file when one restart key changed (nothing of it applies) or when it does not
validate (the loader's message, with the key path), and otherwise swaps the
:class:`~gateway.live.LiveConfig` and runs the composition root's ``apply`` (the agent's new
model chain). Every attempt is reported as a :class:`~gateway.events.ConfigReloaded`. Keys
are named, values never (several are secrets).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from gateway.config import Config, parse_config
from gateway.errors import ConfigError
from gateway.events import ConfigReloaded, Observe
from gateway.live import LiveConfig

#: The keys a running gateway reads at use time (globs over dotted key paths). One line per
#: key: a part that starts reading a key through the LiveConfig adds it here.
LIVE_KEYS: tuple[str, ...] = (
    "model",  # the whole chain: endpoints, keys, fallbacks, backoff (the agent rebuilds it)
    "model.*",
    "agent.system_prompt",
    "agent.history_messages",  # (not with compaction on: see _AT_START)
    "agent.history_chars",
    "agent.stream",
    "agent.max_attachments",  # attachments (SPEC 9): read by the turn's step at each turn
    "agent.max_attachment_bytes_in_flight",  # read at each take of the budget
    "agent.history_images",
    "agent.max_document_chars",
    "agent.max_document_pages",
    "agent.document_cpu_s",
    "agent.document_memory_mb",
    "peer.tokens",
    "peer.auth_fail_limit",
    "peer.auth_fail_window_s",
    "peer.token_requests_per_min",
    "peer.token_burst",
    "peer.trusted_proxies",
    "gateway.max_concurrent_turns",
    "gateway.max_pending_per_conversation",
    "gateway.max_pending_total",
    "gateway.max_message_chars",
    "gateway.drain_timeout_s",
    "gateway.queue_mode",  # SPEC 10: the session actors read them at each use
    "gateway.debounce_s",
    "gateway.debounce_max_s",
    "peer.queue_mode",
    "telegram.queue_mode",
    "discord.queue_mode",
    "slack.queue_mode",
    "telegram.allow_users",
    "telegram.allow_chats",
    "telegram.group_mode",
    "telegram.typing_interval_s",
    "telegram.typing_deadline_s",
    "telegram.streaming",
    "telegram.stream_interval_s",
    "telegram.stream_min_chars",
    "discord.allow_users",
    "discord.allow_guilds",
    "discord.guild_access",
    "discord.require_mention",
    "discord.answer_all_guilds",
    "discord.answer_all_channels",
    "discord.reply_to",
    "discord.chunk_chars",
    "discord.max_lines",
    "discord.typing_deadline_s",
    "discord.streaming",
    "discord.stream_interval_s",
    "slack.allow_users",  # SPEC 17: read at each message (the adapter's live section)
    "slack.allow_channels",
    "slack.require_mention",
    "slack.reply_in_thread",
    "slack.streaming",
    "slack.stream_interval_s",
    # Tools (SPEC 15): the toolbox reconfigures its servers; profiles, the offer, the approvers
    # and the loop's bounds are read at each turn (the agent's generation, the live config).
    "tools.mcp",
    "tools.approvers",
    "tools.approval_timeout_s",
    "profiles",
    "models",
    "agent.tools",
    "agent.max_parallel_tools",
    "agent.max_tool_steps",
    "agent.max_turn_s",
    "agent.max_tool_result_chars",
    "scheduler.*",  # SPEC 16: the scheduler, the book and the tools read it at each use
    "schedules",  # the config's schedules: stored again by the scheduler (app.py's apply)
)


#: Live keys that a part reads only at start in some configurations: there they need a restart.
#: (The compacting runner is built once, with the history bounds of the start.)
_AT_START: dict[str, Callable[[Config], bool]] = {
    "agent.history_messages": lambda c: c.agent.compaction != "off",
    "agent.history_chars": lambda c: c.agent.compaction != "off",
    # Without servers at start there is no toolbox (the SDK is not even imported): the first
    # server needs a restart.
    "tools.mcp": lambda c: not c.tools.mcp,
}


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """The changed keys of a new config, by whether they apply live or need a restart."""

    live: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.live or self.restart)

    @property
    def applicable(self) -> bool:
        return not self.restart

    def to_json(self) -> dict[str, list[str]]:
        return {"live": list(self.live), "restart": list(self.restart)}


def is_live(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, glob) for glob in LIVE_KEYS)


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted paths where two configs differ: leaves, whole lists (``peer.tokens``), or a
    whole section when it is present in one and absent in the other."""
    if not (dataclasses.is_dataclass(old) and type(old) is type(new)):
        return [] if old == new else [prefix]
    keys: list[str] = []
    for f in dataclasses.fields(old):
        if f.metadata.get("internal"):
            continue  # where it was read from (source) is no setting
        path = f"{prefix}.{f.name}" if prefix else f.name
        keys += changed_keys(getattr(old, f.name), getattr(new, f.name), path)
    return keys


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """What replacing ``old`` by ``new`` in a running gateway would change, key by key."""
    keys = changed_keys(old, new)
    live = [k for k in keys if is_live(k) and not (k in _AT_START and _AT_START[k](old))]
    return ReloadPlan(live=tuple(live), restart=tuple(k for k in keys if k not in live))


Outcome = Literal["applied", "unchanged", "refused", "invalid", "dry_run"]


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What one reload did. ``errors``: the loader's (key path, message) pairs when invalid."""

    outcome: Outcome
    plan: ReloadPlan = ReloadPlan()
    errors: tuple[tuple[str, str], ...] = ()
    version: int = 0
    source: str = ""

    @property
    def reason(self) -> str:
        if self.outcome == "invalid":
            return "; ".join(f"{p}: {m}" if p else m for p, m in self.errors)
        if self.outcome == "refused":
            return "needs a restart: " + ", ".join(self.plan.restart)
        return ""

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "version": self.version,
            "source": self.source,
            **self.plan.to_json(),
            "errors": [{"key": p, "message": m} for p, m in self.errors],
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ReloaderStatistics:
    """Reloads by outcome (``Reloader.statistics()``)."""

    applied: int
    unchanged: int  # valid, and nothing changed
    refused: int  # a change needs a restart: nothing applied
    invalid: int  # the config did not load
    dry_run: int


class Reloader:
    """Re-reads the config (``read``: the file and environment the gateway started with) and
    applies it whole or not at all; one reload at a time."""

    def __init__(
        self,
        live: LiveConfig,
        read: Callable[[], Config],
        apply: Callable[[Config, Config], Awaitable[None]],
        *,
        observe: Observe = lambda event: None,
    ) -> None:
        self._live = live
        self._read = read
        self._apply = apply
        self._observe = observe
        self._lock = anyio.Lock()
        self._outcomes: Counter[Outcome] = Counter()

    def __repr__(self) -> str:
        return f"<Reloader version={self._live.version} {self.statistics()}>"

    def statistics(self) -> ReloaderStatistics:
        o = self._outcomes
        return ReloaderStatistics(
            applied=o["applied"],
            unchanged=o["unchanged"],
            refused=o["refused"],
            invalid=o["invalid"],
            dry_run=o["dry_run"],
        )

    async def reload(
        self, by: str, *, dry_run: bool = False, text: str | None = None
    ) -> ReloadResult:
        """Reload on behalf of ``by`` (``signal``, a peer token's name); ``dry_run``: only
        say what would change, of the file or of ``text`` (TOML; never applied)."""
        async with self._lock:
            result = await self._reload(dry_run, text if dry_run else None)
        self._outcomes[result.outcome] += 1
        self._observe(
            ConfigReloaded(
                result=result.outcome,
                by=by,
                live=",".join(result.plan.live),
                restart=",".join(result.plan.restart),
                version=result.version,
                reason=result.reason,
                dry_run=dry_run,
            )
        )
        return result

    async def _reload(self, dry_run: bool, text: str | None) -> ReloadResult:
        old = self._live.current
        try:
            if text is None:
                new = await anyio.to_thread.run_sync(self._read)
            else:
                new = parse_config(text, source="(sent for a dry run)", env=os.environ)
        except ConfigError as exc:
            return ReloadResult("invalid", errors=exc.errors, version=self._live.version)
        plan = plan_reload(old, new)
        version = self._live.version
        if dry_run:
            return ReloadResult("dry_run", plan, version=version, source=new.source)
        if not plan.applicable:
            return ReloadResult("refused", plan, version=version, source=new.source)
        if not plan.changed:
            return ReloadResult("unchanged", plan, version=version, source=new.source)
        version = self._live.replace(new)
        await self._apply(old, new)
        return ReloadResult("applied", plan, version=version, source=new.source)
