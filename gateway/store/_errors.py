"""Library exceptions into ours, where the store calls its database library (httpx's
``map_exceptions``): the store raises only :class:`~gateway.errors.StoreError` subclasses.

A table is an ordered list of (library exception class, our class); the first entry the
exception is an instance of wins, so narrower entries come first. This module holds the
mechanism and SQLite's table; PostgreSQL's is in ``_pg_connection`` (asyncpg is imported
only when used). ``tests/test_store_errors.py`` checks that every exception class of both
libraries has an entry.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gateway.errors import StoreError, StoreUnavailable

Table = Sequence[tuple[type[BaseException], type[StoreError]]]

SQLITE_ERRORS: Table = (
    # Locked past busy_timeout, unwritable, disk full or failing, cannot open: try later.
    (sqlite3.OperationalError, StoreUnavailable),
    # A constraint, bad data, a corrupt file, a misuse: this statement, not the database.
    (sqlite3.Error, StoreError),
    (sqlite3.Warning, StoreError),
    # The file or its directory cannot be created.
    (OSError, StoreUnavailable),
)


def kind_of(exc: BaseException, table: Table) -> type[StoreError] | None:
    """Our class for ``exc``, or None when the table has no entry (then it is a bug of ours,
    not the database's, and propagates as it is)."""
    for library, ours in table:
        if isinstance(exc, library):
            return ours
    return None


@contextmanager
def mapped(table: Table, what: str) -> Iterator[None]:
    """Raise what the body's library raises as ours, ``from`` the original."""
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:
        kind = kind_of(exc, table)
        if kind is None:
            raise
        raise kind(f"{what}: {str(exc) or type(exc).__name__}") from exc
