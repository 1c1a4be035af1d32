"""plan_reload, key by key: which changes apply to the next turn, which need a restart; and
the Reloader's whole-or-nothing rule (a refused or invalid file changes nothing)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.config import Config, parse_config
from gateway.errors import ConfigError
from gateway.events import ConfigReloaded, Event
from gateway.live import LiveConfig
from gateway.reload import Reloader, ReloadPlan, plan_reload

pytestmark = pytest.mark.anyio

TG_TOKEN = "123456:tg-secret-token-value"
BASE = f"""
[store]
path = "b.db"

[model]
base_url = "http://127.0.0.1:9/v1"
model = "m"
api_keys = ["sk-old-key-000000001"]

[agent]
system_prompt = "old prompt"

[peer]
listen = "127.0.0.1:8642"
tokens = [{{ token = "peer-token-old-00000001", name = "ops" }}]

[telegram]
token = "{TG_TOKEN}"
allow_users = [1]

[discord]
token = "discord-secret-token"

[slack]
bot_token = "xoxb-slack-bot-token-1"
app_token = "xapp-1-A1-slack-app-token"
"""


def cfg(text: str = BASE, **replace: tuple[str, str]) -> Config:
    for old, new in replace.values():
        assert old in text, old
        text = text.replace(old, new)
    return parse_config(text, source="botmux.toml", env={})


def plan(**replace: tuple[str, str]) -> ReloadPlan:
    return plan_reload(cfg(), cfg(**replace))


def test_the_same_file_changes_nothing() -> None:
    assert plan_reload(cfg(), cfg()) == ReloadPlan()
    # Where it was read from is no setting.
    assert plan_reload(cfg(), dataclasses.replace(cfg(), source="other.toml")) == ReloadPlan()


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('"sk-old-key-000000001"', '"sk-new-key-000000002"', "model.api_keys"),
        ('model = "m"', 'model = "m2"', "model.model"),
        ('"old prompt"', '"new prompt"', "agent.system_prompt"),
        ("[agent]\n", "[agent]\nhistory_messages = 4\n", "agent.history_messages"),
        ("[agent]\n", "[agent]\nstream = false\n", "agent.stream"),
        ("allow_users = [1]", "allow_users = [1, 2]", "telegram.allow_users"),
        ("allow_users = [1]", 'allow_users = [1]\nstreaming = "off"', "telegram.streaming"),
        ("allow_users = [1]", 'allow_users = [1]\ngroup_mode = "all"', "telegram.group_mode"),
        (
            '"discord-secret-token"',
            '"discord-secret-token"\nallow_guilds = [5]',
            "discord.allow_guilds",
        ),
        (
            '"discord-secret-token"',
            '"discord-secret-token"\nrequire_mention = false',
            "discord.require_mention",
        ),
        ('"peer-token-old-00000001"', '"peer-token-new-00000002"', "peer.tokens"),
        ('name = "ops"', 'name = "ops2"', "peer.tokens"),
        (
            '"xapp-1-A1-slack-app-token"',
            '"xapp-1-A1-slack-app-token"\nallow_users = ["U0ALICE01"]',
            "slack.allow_users",
        ),
        (
            '"xapp-1-A1-slack-app-token"',
            '"xapp-1-A1-slack-app-token"\nallow_channels = ["C0GENERAL"]',
            "slack.allow_channels",
        ),
        (
            'listen = "127.0.0.1:8642"',
            'listen = "127.0.0.1:8642"\ntoken_requests_per_min = 9',
            "peer.token_requests_per_min",
        ),
        ("[store]", "[gateway]\nmax_pending_total = 5\n\n[store]", "gateway.max_pending_total"),
        ("[store]", "[gateway]\nmax_message_chars = 50\n\n[store]", "gateway.max_message_chars"),
        (
            "[store]",
            "[gateway]\nmax_concurrent_turns = 2\n\n[store]",
            "gateway.max_concurrent_turns",
        ),
    ],
)
def test_what_applies_to_the_next_turn(old: str, new: str, key: str) -> None:
    assert plan(change=(old, new)) == ReloadPlan(live=(key,))


def test_adding_a_fallback_model_is_live() -> None:
    fallback = '\n[[model.fallbacks]]\nmodel = "f"\nbase_url = "http://127.0.0.1:9/v1"\n'
    assert plan(change=("[agent]", fallback + "\n[agent]")) == ReloadPlan(live=("model.fallbacks",))


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('listen = "127.0.0.1:8642"', 'listen = "127.0.0.1:8643"', "peer.listen"),
        ('path = "b.db"', 'path = "c.db"', "store.path"),
        (f'"{TG_TOKEN}"', '"654321:another-token"', "telegram.token"),
        (f'"{TG_TOKEN}"', f'"{TG_TOKEN}"\napi_base = "http://127.0.0.1:1"', "telegram.api_base"),
        (
            '"discord-secret-token"',
            '"discord-secret-token"\nshard_count = 2',
            "discord.shard_count",
        ),
        ('"xapp-1-A1-slack-app-token"', '"xapp-1-A1-another-app-token"', "slack.app_token"),
        ("[store]", "[cluster]\nlease_s = 9\n\n[store]", "cluster.lease_s"),
        ("[store]", "[gateway]\nidle_evict_s = 5\n\n[store]", "gateway.idle_evict_s"),
        ("[store]", '[log]\nlevel = "debug"\n\n[store]', "log.level"),
    ],
)
def test_what_needs_a_restart(old: str, new: str, key: str) -> None:
    p = plan(change=(old, new))
    assert p == ReloadPlan(restart=(key,)) and not p.applicable


def test_compaction_and_the_history_bounds_it_was_built_with_need_a_restart() -> None:
    on = BASE.replace("[agent]\n", '[agent]\ncompaction = "summary"\n')
    assert plan_reload(cfg(), cfg(on)) == ReloadPlan(restart=("agent.compaction",))
    fewer = on.replace("[agent]\n", "[agent]\nhistory_messages = 4\n")
    assert plan_reload(cfg(on), cfg(fewer)) == ReloadPlan(restart=("agent.history_messages",))


def test_a_platform_section_that_appears_or_goes_needs_a_restart() -> None:
    without = BASE[: BASE.index("[telegram]")] + BASE[BASE.index("[discord]") :]
    assert plan_reload(cfg(), cfg(without)) == ReloadPlan(restart=("telegram",))
    assert plan_reload(cfg(without), cfg()) == ReloadPlan(restart=("telegram",))


def test_one_restart_key_among_live_ones_is_named_and_the_rest_listed() -> None:
    p = plan(
        key=('"sk-old-key-000000001"', '"sk-new-key-000000002"'),
        listen=('listen = "127.0.0.1:8642"', 'listen = "0.0.0.0:8642"'),
        users=("allow_users = [1]", "allow_users = [7]"),
    )
    assert p.live == ("model.api_keys", "telegram.allow_users")
    assert p.restart == ("peer.listen",)
    assert not p.applicable


def test_a_plan_names_keys_never_values() -> None:
    p = plan(
        key=('"sk-old-key-000000001"', '"sk-new-key-000000002"'),
        tg=(f'"{TG_TOKEN}"', '"654321:another-token"'),
    )
    text = repr(p.to_json())
    for secret in ("sk-old-key", "sk-new-key", TG_TOKEN, "another-token"):
        assert secret not in text


class Harness:
    """A Reloader over a file on disk, with what it observed and applied."""

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "botmux.toml"
        self.path.write_text(BASE)
        self.live = LiveConfig(self.read())
        self.events: list[Event] = []
        self.applied: list[tuple[Config, Config]] = []

        async def apply(old: Config, new: Config) -> None:
            self.applied.append((old, new))

        self.reloader = Reloader(self.live, self.read, apply, observe=self.events.append)

    def read(self) -> Config:
        return parse_config(self.path.read_text(), source=str(self.path), env={})

    def edit(self, old: str, new: str) -> None:
        self.path.write_text(self.path.read_text().replace(old, new))

    def reloads(self) -> list[ConfigReloaded]:
        return [e for e in self.events if isinstance(e, ConfigReloaded)]


async def test_an_applied_reload_swaps_the_whole_config_and_says_who(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    before = h.live.current
    h.edit('"sk-old-key-000000001"', '"sk-new-key-000000002"')
    result = await h.reloader.reload("ops")
    assert result.outcome == "applied" and result.version == 1 == h.live.version
    assert h.live.current.model is not None
    assert h.live.current.model.api_keys == ("sk-new-key-000000002",)
    assert h.applied == [(before, h.live.current)]
    (event,) = h.reloads()
    assert (event.result, event.by, event.live, event.restart) == (
        "applied",
        "ops",
        "model.api_keys",
        "",
    )
    assert "sk-new" not in repr(event) and "sk-new" not in repr(result.to_json())


async def test_a_refused_reload_applies_nothing_of_the_file(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    before = h.live.current
    h.edit('"sk-old-key-000000001"', '"sk-new-key-000000002"')  # live, but ...
    h.edit('listen = "127.0.0.1:8642"', 'listen = "127.0.0.1:9999"')  # ... this needs a restart
    result = await h.reloader.reload("signal")
    assert result.outcome == "refused"
    assert result.reason == "needs a restart: peer.listen"
    assert h.live.current is before and h.live.version == 0 and h.applied == []
    assert [(e.result, e.by, e.restart) for e in h.reloads()] == [
        ("refused", "signal", "peer.listen")
    ]


async def test_a_bad_file_applies_nothing_and_says_why(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    before = h.live.current
    h.edit("allow_users = [1]", 'allow_users = ["one"]')
    result = await h.reloader.reload("signal")
    assert result.outcome == "invalid"
    assert result.errors and result.errors[0][0].startswith("telegram.allow_users")
    assert "telegram.allow_users" in result.reason
    h.path.write_text("this is [not toml")
    assert (await h.reloader.reload("signal")).outcome == "invalid"
    assert h.live.current is before and h.applied == []
    assert [e.result for e in h.reloads()] == ["invalid", "invalid"]


async def test_a_dry_run_says_what_would_change_and_changes_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    before = h.live.current
    sent = BASE.replace('"old prompt"', '"new prompt"').replace("8642", "8643")
    result = await h.reloader.reload("ops", dry_run=True, text=sent)
    assert result.outcome == "dry_run"
    assert result.plan == ReloadPlan(live=("agent.system_prompt",), restart=("peer.listen",))
    h.edit('"old prompt"', '"newer prompt"')
    result = await h.reloader.reload("ops", dry_run=True)  # the file itself
    assert result.plan == ReloadPlan(live=("agent.system_prompt",))
    assert h.live.current is before and h.applied == []
    assert (await h.reloader.reload("ops", dry_run=True, text="x = ")).outcome == "invalid"


async def test_reloading_an_unchanged_file_is_no_new_version(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    result = await h.reloader.reload("signal")
    assert (result.outcome, result.version, h.applied) == ("unchanged", 0, [])


def test_the_loader_error_is_a_config_error() -> None:  # what Reloader catches
    with pytest.raises(ConfigError):
        cfg(bad=("allow_users = [1]", "allow_users = 1"))


async def test_clients_of_keys_a_reload_removed_close_once_no_call_uses_them() -> None:
    from agent import ClientPool
    from agent.clients import ClientPoolStatistics
    from gateway.config import ModelEndpoint

    pool = ClientPool()
    endpoint = ModelEndpoint(model="m", base_url="http://127.0.0.1:9/v1")
    async with pool.use(endpoint, "sk-kept") as kept:
        pass
    async with pool.use(endpoint, "sk-busy") as busy:
        async with pool.use(endpoint, "sk-idle") as idle:
            pass
        await pool.retire_except({(endpoint.base_url, "sk-kept", endpoint.timeout_s)})
        assert idle.is_closed() and not busy.is_closed()  # a running turn keeps its client
    assert busy.is_closed() and not kept.is_closed()
    assert pool.statistics() == ClientPoolStatistics(clients=1, built=3, retired=0)
    await pool.aclose()
