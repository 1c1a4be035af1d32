"""A2A tasks' push notification configs in the store (``gateway.ports.PushConfigs``, SPEC 12)."""

from __future__ import annotations

from gateway.store import PushConfigsOf, SetPushConfig, Store


class StoredPushConfigs:
    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "<StoredPushConfigs>"

    async def save(self, user_row_id: int, config_id: str, config: str) -> None:
        await self._store.submit(SetPushConfig(user_row_id, config_id, config))

    async def configs(self, user_row_id: int) -> list[str]:
        return await self._store.read(PushConfigsOf(user_row_id))

    async def delete(self, user_row_id: int, config_id: str) -> None:
        await self._store.submit(SetPushConfig(user_row_id, config_id, None))
