"""The model's context is bounded (SPEC section 11): every request carries the endpoint's
``max_output_tokens`` as ``max_tokens``, and the history is cut to ``[agent] history_chars``,
oldest rows first. What the fake model received is what is asserted."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.fakes.openai_server import ok, open_fake_model, rate_limited
from tests.harness import make_config, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]


async def test_max_tokens_is_sent_per_endpoint(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        extra = (
            "max_output_tokens = 321\nbackoff_base_s = 0.01\n"
            f'\n[[model.fallbacks]]\nbase_url = "{fake.base_url}"\nmodel = "gpt-fallback"\n'
        )
        config = make_config(tmp_path / "b.db", fake.base_url, model_extra=extra)
        fake.script(rate_limited(retry_after=120), model="gpt-test")
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            r = await http.post(f"{url}/api/sessions/m/chat", json={"message": "one"})
            assert r.status == 200
    # The primary's own value, then the fallback's default.
    assert [(r.model, r.body["max_tokens"]) for r in fake.requests] == [
        ("gpt-test", 321),
        ("gpt-fallback", 4096),
    ]


async def test_six_turns_of_100_kb_send_a_bounded_prompt(tmp_path: Path) -> None:
    budget = 250_000
    async with open_fake_model() as fake:
        config = make_config(
            tmp_path / "b.db",
            fake.base_url,
            extra=f"[agent]\nhistory_chars = {budget}\n[gateway]\nmax_message_chars = 200000\n",
        )
        fake.default = lambda r: ok(f"short answer to turn {len(fake.requests)}")
        async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:
            for i in range(6):
                text = f"turn {i} " + "x" * 100_000
                r = await http.post(f"{url}/api/sessions/big/chat", json={"message": text})
                assert r.status == 200
    sizes = []
    for request in fake.requests:
        history = request.messages[1:-1]  # not the system prompt, not the new message
        assert sum(len(m["content"]) for m in history) <= budget
        assert history == [] or history[0]["role"] == "user"
        sizes.append(sum(len(m["content"]) for m in request.messages))
    # Two earlier turns fit in the budget: the prompt stops growing at three messages' worth.
    kept = [len(r.messages[1:-1]) for r in fake.requests]
    assert kept == [0, 2, 4, 4, 4, 4]
    assert max(sizes) < 3 * 100_100 + 1_000
    # The newest rows are the ones kept.
    last = fake.requests[-1].messages
    assert [m["content"][:7] for m in last[1:] if m["role"] == "user"] == [
        "turn 3 ",
        "turn 4 ",
        "turn 5 ",
    ]
