"""The names tools reach the model under (SPEC 15): ``<server>__<tool>``.

Providers accept a function name of 1-64 characters out of ``[A-Za-z0-9_-]``; an MCP server
may name a tool with 128 characters, dots or spaces. A name that would not pass is rewritten:
the characters providers refuse become ``_``, the name is cut to fit, and a short hash of the
server's and the tool's names is appended. The hash, not a counter, keeps the rewritten name
the same across restarts, nodes and listings in another order, and tells apart two tools that
rewrite alike ("a b" and "a.b").

A plain name splits back at its first ``__`` (a server's name has no ``__``), unless the
server's name ends with ``_``: such a server's names are always hashed, so no plain name of
one server can spell a name of another.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable

MAX_NAME = 64
SEPARATOR = "__"
_ALLOWED = re.compile(r"^[A-Za-z0-9_-]+$")
_REFUSED = re.compile(r"[^A-Za-z0-9_-]")
_HASH = 8  # hex digits: 32 bits, and a clash is still caught where names are indexed


def model_name(server: str, tool: str, *, clash: bool = False) -> str:
    """The model's name for ``tool`` of ``server`` (the server's name is a valid config name:
    1-32 of ``[A-Za-z0-9_-]``, no ``__``). ``clash``: the name is taken by another tool of the
    listing (one built to spell it, or a hash clash): hashed, with a longer hash."""
    plain = f"{server}{SEPARATOR}{tool}"
    if len(plain) <= MAX_NAME and _ALLOWED.match(tool) and not server.endswith("_") and not clash:
        return plain
    hash_digits = 2 * _HASH if clash else _HASH
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:hash_digits]
    room = MAX_NAME - len(server) - len(SEPARATOR) - 1 - hash_digits
    return f"{server}{SEPARATOR}{_REFUSED.sub('_', tool)[:room]}_{digest}"


def matches(patterns: Iterable[str], name: str) -> bool:
    """Whether a profile's globs (over ``<server>__<tool>``) take the tool named ``name``."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
