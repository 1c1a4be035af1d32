"""Durable storage: the store interface and its SQLite backend."""

from gateway.store.base import Store
from gateway.store.sqlite import SqliteStore, open_sqlite_store

__all__ = ["SqliteStore", "Store", "open_sqlite_store"]
