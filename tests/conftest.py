"""Shared pytest setup: the anyio backend, and a throwaway PostgreSQL server.

PostgreSQL: ``BOTMUX_TEST_POSTGRES`` (a server URL, set by ``.ci/run``) is used when set;
otherwise the first test that needs it starts one for the session (``tests/pgserver.py``). Each
test gets a database of its own. Where no server can be started the PostgreSQL tests skip,
saying why; ``BOTMUX_REQUIRE_POSTGRES=1`` (CI) turns that skip into a failure.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pgserver


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
