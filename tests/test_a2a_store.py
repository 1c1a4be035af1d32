"""A2A tasks' push notification configs in the store (SPEC 12), on both backends: set,
replaced, deleted, read back after a reopen, and gone with their conversation."""

from __future__ import annotations

import pytest

from gateway.messages import Inbound
from gateway.store import (
    AdmitRow,
    DeleteConversation,
    PushConfigsOf,
    SetPushConfig,
)
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


async def test_push_configs_are_kept_per_task_and_survive_a_reopen(open_store: Opener) -> None:
    async with open_store() as store:
        one = (await store.submit(AdmitRow(Inbound("a2a", "a2a:c", "-:m1", "one")))).row
        two = (await store.submit(AdmitRow(Inbound("a2a", "a2a:c", "-:m2", "two")))).row
        await store.submit(SetPushConfig(one.id, "a", '{"url": "1"}'))
        await store.submit(SetPushConfig(one.id, "b", '{"url": "2"}'))
        await store.submit(SetPushConfig(one.id, "a", '{"url": "1b"}'))  # replaced
        await store.submit(SetPushConfig(two.id, "a", '{"url": "3"}'))
        await store.submit(SetPushConfig(two.id, "a", None))  # deleted
        await store.submit(SetPushConfig(two.id, "never", None))  # nothing to delete: no error
    async with open_store() as store:
        assert sorted(await store.read(PushConfigsOf(one.id))) == ['{"url": "1b"}', '{"url": "2"}']
        assert await store.read(PushConfigsOf(two.id)) == []
        assert await store.submit(DeleteConversation("a2a:c")) == 2
        assert await store.read(PushConfigsOf(one.id)) == []
