"""The store over both backends, for tests that must hold on each: the ``open_store`` fixture
(an SQLite file, then a PostgreSQL database of its own; ``tests/conftest.py`` offers it to
every module) and ``inbound``, a peer message to admit.

The PostgreSQL case is marked ``process`` (a server runs), so the fast lane keeps the SQLite
case only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from gateway.messages import Inbound
from gateway.store import open_sqlite_store
from gateway.store.postgres import open_postgres_store

#: ``open_store(node=..., lease_s=..., clock=...)``: the same store each call (``node`` names a
#: PostgreSQL node; SQLite has one node and ignores it; ``clock``: the writes' time).
Opener = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.process)])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the same store each time it is called (``node`` names a PostgreSQL node)."""
    if request.param == "sqlite":
        path = str(tmp_path / "s.db")

        def sqlite(
            node: str = "", clock: Callable[[], float] = time.time
        ) -> AbstractAsyncContextManager[Any]:
            return open_sqlite_store(path, clock=clock)

        return sqlite
    url = request.getfixturevalue("postgres_url")

    def postgres(
        node: str = "n1", lease_s: float = 5.0, clock: Callable[[], float] = time.time
    ) -> AbstractAsyncContextManager[Any]:
        return open_postgres_store(url, node=node, lease_s=lease_s, clock=clock)

    return postgres


def inbound(text: str, pmid: str, conversation: str = "peer:a") -> Inbound:
    """A peer's message ``text`` with platform message id ``pmid``."""
    return Inbound(platform="peer", conversation=conversation, platform_message_id=pmid, text=text)
