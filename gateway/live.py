"""The running config, one holder for every part that reads a setting at use time.

A reload (``gateway.reload``) swaps the whole :class:`~gateway.config.Config` at once, so a
reader sees the old config or the new one, never half of each. Parts read the section they
need through :meth:`LiveConfig.view` (a getter, not a copy), when they need it: the allowlist
at a sender's check, the caps at admission, the history length at a turn's start. What is
read only at start (listen addresses, the store) is what a reload refuses to change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gateway.config import Config

T = TypeVar("T")


class LiveConfig:
    """The current config and how many reloads it has seen (``version``, 0 at start)."""

    __slots__ = ("_current", "_version")

    def __init__(self, config: Config) -> None:
        self._current = config
        self._version = 0

    def __repr__(self) -> str:
        return f"<LiveConfig {self._current.source} version={self._version}>"

    @property
    def current(self) -> Config:
        return self._current

    @property
    def version(self) -> int:
        return self._version

    def replace(self, config: Config) -> int:
        """Make ``config`` the current one (whole); the new version."""
        self._current = config
        self._version += 1
        return self._version

    def view(self, pick: Callable[[Config], T]) -> Callable[[], T]:
        """A getter of one part of whatever config is current when it is called."""
        return lambda: pick(self._current)
