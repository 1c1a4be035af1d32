"""A2A (SPEC 12): other agents send botmux tasks over JSON-RPC at ``POST /a2a``, on the peer
listener (its auth, limits and connection guard); a task is one turn, stored as its user row."""

from platforms.a2a.adapter import A2aAdapter

__all__ = ["A2aAdapter"]
