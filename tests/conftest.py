"""Shared pytest setup: the anyio backend, a throwaway PostgreSQL server, the fixtures every
module may ask for (``open_store`` over both backends, ``model``: the fake model, ``tg``: the
fake Telegram; a module that needs them set up otherwise defines its own of the same name), a
spy on the model request's JSON encoder, and the fast lane's markers and their check
(``tests/lanes.py``).

PostgreSQL: ``BOTMUX_TEST_POSTGRES`` (a server URL, set by ``.ci/run``) is used when set;
otherwise the first test that needs it starts one for the session (``tests/pgserver.py``). Each
test gets a database of its own. Where no server can be started the PostgreSQL tests skip,
saying why; ``BOTMUX_REQUIRE_POSTGRES=1`` (CI) turns that skip into a failure.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import _body
from tests import pgserver
from tests.fakes.openai_server import FakeModel, open_fake_model
from tests.fakes.telegram_server import FakeTelegram, open_fake_telegram
from tests.support.stores import open_store

pytest_plugins = ["tests.lanes"]
__all__ = ["open_store"]  # a fixture defined in tests/support/stores.py, offered to every module


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    url = os.environ.get("BOTMUX_TEST_POSTGRES")
    if url:
        yield url
        return
    base = Path(tempfile.mkdtemp(prefix="botmux-pg-"))
    try:
        url = pgserver.start(base)
    except pgserver.Unavailable as exc:
        if os.environ.get("BOTMUX_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here and could not start: {exc}")
        pytest.skip(f"PostgreSQL tests skipped: no server could be started ({exc})")
    try:
        yield url
    finally:
        pgserver.stop(base)


_numbers = itertools.count()


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A new, empty database on the session's server."""
    name = f"t{os.getpid()}_{next(_numbers)}"
    pgserver.create_database(postgres_server, name)
    return postgres_server.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    """The fake model (tests/fakes/openai_server.py), echoing unless scripted."""
    async with open_fake_model() as fake:
        yield fake


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """The fake Telegram Bot API (tests/fakes/telegram_server.py)."""
    async with open_fake_telegram() as fake:
        yield fake


@pytest.fixture
def encoded_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each JSON document ``agent._body`` has ``json.dumps`` make, in order
    (a spy: what is encoded is unchanged). Images it splices in are not part of them."""
    sizes: list[int] = []
    dumps = _body.dumps

    def measured(body: Any, default: Any = None) -> bytes:
        data = dumps(body, default)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(_body, "dumps", measured)
    return sizes
