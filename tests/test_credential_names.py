"""A key is shown by its name (its position in the config), never by any part of it."""

from __future__ import annotations

from policy.credentials import CredentialPool


def test_keys_are_named_by_their_position_and_nothing_of_them_shows() -> None:
    pool = CredentialPool("m", ["sk-aaaa-1111", "sk-bbbb-2222", "sk-aaaa-1111", "sk-cccc-3333"])
    assert [pool.name(k) for k in ("sk-aaaa-1111", "sk-bbbb-2222", "sk-cccc-3333")] == [
        "key1",
        "key2",
        "key4",  # a repeated key keeps its first name; the others keep their positions
    ]
    pool.bench("sk-cccc-3333", until=100.0, reason="auth")
    assert pool.benched(now=0.0) == [("key4", 100.0, "auth")]
    assert "3333" not in repr(pool) + str(pool.benched(now=0.0))
