"""Pairing cannot be squatted: one code per user, a large cap per platform, and the operator
can reject a code (its user then gets no new one until it would have expired).

The store rules run on both backends; the squatting scenario runs against a real gateway on
the fake Bot API, with the operator's CLI as a real process.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest

from gateway.access import PAIRING_MAX_PENDING
from gateway.config import parse_config
from gateway.store import ApprovePairing, PairingCodes, RejectPairing, RequestPairing
from tests.fakes.openai_server import FakeModel
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import ROOT, config_text, running_gateway, telegram_section
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


async def test_one_code_per_user_and_rejected_codes_hold_their_user(open_store: Opener) -> None:
    async with open_store() as store:
        a, _ = await store.submit(RequestPairing("telegram", "u1", "", ttl_s=3600, max_pending=2))
        b, _ = await store.submit(RequestPairing("telegram", "u2", "", ttl_s=3600, max_pending=2))
        assert a is not None and b is not None
        assert await store.submit(
            RequestPairing("telegram", "u1", "", ttl_s=3600, max_pending=2)
        ) == (
            None,
            "pending",
        )
        assert (
            await store.submit(RequestPairing("telegram", "u3", "", ttl_s=3600, max_pending=2))
        )[1] == "full"
        assert await store.submit(RejectPairing("telegram", a.lower())) == "u1"
        assert await store.submit(RejectPairing("telegram", a)) is None  # already rejected
        assert await store.submit(RejectPairing("discord", b)) is None  # codes are per platform
        assert [c.user_id for c in await store.read(PairingCodes(time.time()))] == ["u2"]
        assert await store.submit(ApprovePairing("telegram", a)) is None  # a rejected code is dead
        assert await store.submit(ApprovePairing("telegram", "-" + a)) is None
        # The rejected user gets no new code meanwhile, and the slot is free for others.
        assert await store.submit(
            RequestPairing("telegram", "u1", "", ttl_s=3600, max_pending=2)
        ) == (
            None,
            "pending",
        )
        c, status = await store.submit(
            RequestPairing("telegram", "u3", "", ttl_s=3600, max_pending=2)
        )
        assert status == "new" and c is not None
        assert await store.submit(ApprovePairing("telegram", c)) == "u3"


async def botmux(config: Path, *args: str) -> tuple[int, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "gateway", *args, "--config", str(config)], cwd=ROOT, check=False
    )
    return done.returncode, (done.stdout + done.stderr).decode()


@pytest.mark.gateway
@pytest.mark.process
async def test_strangers_cannot_squat_pairing_and_the_operator_rejects_one(
    tmp_path: Path, tg: FakeTelegram, model: FakeModel
) -> None:
    assert PAIRING_MAX_PENDING >= 100
    strangers = list(range(701, 711))  # ten: three used to fill every slot
    section = telegram_section(tg, "allow_users = [42]\n")
    text = config_text(tmp_path / "botmux.db", model.base_url, extra=section)
    path = tmp_path / "botmux.toml"
    path.write_text(text)
    async with running_gateway(parse_config(text, source=str(path), env={})):
        for user in strangers:
            tg.inject_message(user, "let me in")
        with anyio.fail_after(20):
            await tg.wait_until(lambda: all(tg.sent_messages(u) for u in strangers))
        codes = {
            u: tg.sent_messages(u)[0].split("approve telegram ")[1].split()[0] for u in strangers
        }
        assert len(set(codes.values())) == len(strangers)

        squatter, latecomer = strangers[0], 799
        with anyio.fail_after(30):
            rc, out = await botmux(path, "pairing", "reject", "telegram", codes[squatter])
            assert rc == 0 and f"rejected telegram user {squatter}" in out
            rc, out = await botmux(path, "pairing", "list")
            assert codes[squatter] not in out and codes[strangers[1]] in out
            assert (await botmux(path, "pairing", "reject", "telegram", codes[squatter]))[0] == 1
            assert (await botmux(path, "pairing", "approve", "telegram", codes[squatter]))[0] == 1

        tg.inject_message(squatter, "again?")  # no second code
        tg.inject_message(latecomer, "me too")  # still gets one
        tg.inject_message(42, "hello")
        with anyio.fail_after(10):
            await tg.wait_for_sent(1, latecomer)
            await tg.wait_for_sent(1, 42)
        assert len(tg.sent_messages(squatter)) == 1
        assert "approve telegram" in tg.sent_messages(latecomer)[0]
    assert [r.last_user for r in model.requests] == ["hello"]
