"""Every store command and its two functions, SQLite's and PostgreSQL's: how the backends
dispatch (``REGISTRY.writer(type)``, ``REGISTRY.reader(query)``).

Each concern module ends with its ``HANDLERS``: each command with its two functions, typed
with the command and its result (``WriteHandler[AdmitRow, Admission](AdmitRow, f, g)``), so
mypy refuses a function that takes another command or returns another result. Adding a write
or a query to a concern is its class, its two functions and its line in that module's
``HANDLERS``; a new concern is one line here. ``tests/test_store_registry.py`` checks that
every command of the concern modules is registered, with both functions.
"""

from __future__ import annotations

from gateway.store import (
    admission,
    answers,
    attachments,
    claims,
    console,
    conversations,
    outbox,
    pairing,
    previews,
    push_configs,
    schedules,
    steps,
    summaries,
    transcripts,
)
from gateway.store.commands import Registry

#: The concern modules, each with its commands (``HANDLERS``).
CONCERNS = (
    admission,
    answers,
    attachments,
    claims,
    console,
    conversations,
    outbox,
    pairing,
    previews,
    push_configs,
    schedules,
    steps,
    summaries,
    transcripts,
)

REGISTRY = Registry(*(handler for concern in CONCERNS for handler in concern.HANDLERS))
