"""What an operator sees: metrics that move, logs without secrets, probes."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config_peer import PeerToken
from gateway.logs import configure_logging
from tests.fakes.openai_server import error, open_fake_model, rate_limited
from tests.harness import make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        metric, _, value = line.rpartition(" ")
        if metric.split("{")[0] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', metric))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return 0.0


async def test_metrics_count_a_fallback_and_show_the_benched_key(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = (
            "backoff_base_s = 0.01\n"
            f'\n[[model.fallbacks]]\nbase_url = "{fake.base_url}"\nmodel = "gpt-fallback"\n'
        )
        config = make_config(
            tmp_path / "b.db",
            fake.base_url,
            model="gpt-primary",
            keys=("sk-primary-abcd1234",),
            model_extra=extra,
        )
        fake.script(rate_limited(retry_after=120), model="gpt-primary")
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            r = await http.post(f"{url}/api/sessions/m/chat", json={"message": "hi"})
            assert (await r.json())["message"]["content"] == "echo: hi"
            r = await http.get(f"{url}/metrics")
            assert r.status == 200
            text = await r.text()
    assert (
        sample(text, "botmux_policy_decisions_total", decision="fallback", reason="rate_limit") == 1
    )
    assert sample(text, "botmux_policy_decisions_total", decision="bench", reason="rate_limit") == 1
    assert sample(text, "botmux_messages_admitted_total", platform="peer") == 1
    assert sample(text, "botmux_turns_started_total", platform="peer") == 1
    assert sample(text, "botmux_turns_total", platform="peer", outcome="answered") == 1
    assert (
        sample(
            text,
            "botmux_model_calls_total",
            model="gpt-primary",
            outcome="error",
            reason="rate_limit",
        )
        == 1
    )
    assert sample(text, "botmux_model_calls_total", model="gpt-fallback", outcome="ok") == 1
    benched = sample(text, "botmux_credential_benched_seconds", model="gpt-primary", key="key1")
    assert 100 < benched <= 120
    assert sample(text, "botmux_live_sessions") == 1
    assert sample(text, "botmux_store_commit_seconds_count") >= 2
    assert "conversation" not in text and "peer:m" not in text  # no conversation labels


async def test_no_log_line_carries_a_secret(tmp_path: Path) -> None:
    # The key's tail is letters: a tail of digits turned up in a float of a log line (a
    # commit's seconds) one run in many, and failed the check of the last four characters.
    key, token = "sk-live-9f8e7d6c5b4a3wxyz", "peer-token-0123456789abcdef"
    stream = io.StringIO()
    async with open_fake_model() as fake:
        config = make_config(tmp_path / "b.db", fake.base_url, keys=(key,), listen="127.0.0.1:0")
        import dataclasses

        config = dataclasses.replace(
            config, peer=dataclasses.replace(config.peer, tokens=(PeerToken.plain(token),))
        )
        handler = configure_logging(
            level="debug", fmt="json", secrets=config.secrets(), stream=stream
        )
        try:
            # A provider that echoes the key back in its error body, as some do.
            fake.script(error(401, f"Incorrect API key provided: {key}", code="invalid_api_key"))
            async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
                auth = {"Authorization": f"Bearer {token}"}
                r = await http.post(
                    f"{url}/api/sessions/s/chat", json={"message": "hi"}, headers=auth
                )
                body = await r.json()
                r = await http.get(
                    f"{url}/api/sessions/s/messages", headers={"Authorization": "Bearer nope"}
                )
                assert r.status == 401
        finally:
            logging.getLogger().removeHandler(handler)
    logs = stream.getvalue()
    assert body["failure"]["reason"] == "auth"
    assert key not in json.dumps(body) and token not in json.dumps(body)
    lines = [json.loads(line) for line in logs.splitlines()]
    decisions = [line for line in lines if line["event"] == "decision"]
    assert decisions and all(
        d["conversation"] == "peer:s" and d["platform"] == "peer" and d["turn"] > 0
        for d in decisions
    )
    assert key not in logs and token not in logs
    assert '"key": "key1"' in logs  # the key is referred to by its name, nothing of it shown
    assert key[-4:] not in logs
    assert key.encode() not in await anyio.Path(tmp_path / "b.db").read_bytes()
