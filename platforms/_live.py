"""A chat adapter's section of the running config, read where it is used.

A reload (``gateway.reload``) may change what is read at use time (allow lists, group mode,
streaming, typing); an adapter that mixes :class:`LiveSection` in reads ``self._config`` from
the getter the composition root gave it, so the next check sees the new value. What an
adapter reads only at start (its token, api base, mode) is a key a reload refuses to change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LiveSection(Generic[T]):
    _live: Callable[[], T]

    @property
    def _config(self) -> T:
        return self._live()

    def _use_config(self, config: T, live: Callable[[], T] | None) -> None:
        self._live = live if live is not None else lambda: config
