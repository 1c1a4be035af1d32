"""The shared failure policy: classification, user-facing failure text, retry and fallback."""

from policy.classify import REASONS, TRANSIENT, classify, classify_send, parse_retry_after
from policy.replies import failure_reply

__all__ = [
    "REASONS",
    "TRANSIENT",
    "classify",
    "classify_send",
    "failure_reply",
    "parse_retry_after",
]
