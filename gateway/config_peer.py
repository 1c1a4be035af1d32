"""The peer API's config (SPEC 6, 14): ``[peer]``, its listener's bounds, and its bearer
tokens, each a principal with a name, session globs, a request rate and a share of the
connections (``[[peer.tokens]]``, or a plain string)."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field
from typing import Annotated, Any

from annotated_types import Ge, Gt
from pydantic import BeforeValidator

from gateway import _config_checks as checks
from gateway._schema import SECRET, TABLE, Problem, problem_error, rule
from gateway.queue import QueueMode


@dataclass(frozen=True, slots=True)
class PeerToken:
    """One peer bearer token, a principal: named in logs and metrics (never shown itself),
    limited to the sessions its globs match, with its own request rate (0: the default) and
    its share of the listener's connections (0: half of ``[peer] max_connections``)."""

    __pydantic_config__ = TABLE

    token: Annotated[str, rule(checks.token)] = field(repr=False, metadata=SECRET)
    name: Annotated[str, rule(checks.token_name)]
    sessions: Annotated[
        tuple[Annotated[str, rule(checks.non_empty)], ...], rule(checks.non_empty)
    ] = ("*",)
    requests_per_min: Annotated[int, Ge(0)] = 0
    max_connections: Annotated[int, Ge(0)] = 0

    @staticmethod
    def default_name(token: str) -> str:
        """The name of a token given as a plain string: ``token-`` and 8 hex of its SHA-256."""
        return "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]

    @classmethod
    def plain(cls, token: str) -> PeerToken:
        """What ``tokens = ["..."]`` makes of a string: every session, the default rate."""
        return cls(token=token, name=cls.default_name(token))


def _peer_token_entry(value: Any) -> Any:
    """A plain string is a token named after its hash; a table may leave its name out too.
    Configured tokens are stripped (a CRLF ``.env`` leaves a ``\\r`` that could never match)."""
    if isinstance(value, str):
        token = value.strip()
        problem = checks.token(token)
        if problem:
            raise problem_error(problem)
        return {"token": token, "name": PeerToken.default_name(token)}
    if isinstance(value, dict) and isinstance(value.get("token"), str):
        token = value["token"].strip()
        # What this returns is validated as Python, where strict mode wants a tuple.
        table = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
        return {"name": PeerToken.default_name(token), **table, "token": token}
    return value


@dataclass(frozen=True, slots=True)
class PeerConfig:
    __pydantic_config__ = TABLE

    listen: Annotated[str, rule(checks.listen)] = "127.0.0.1:8642"
    # Strings or [[peer.tokens]] tables; empty: no auth, loopback only.
    # (A secret, though shown in repr: PeerToken's repr shows its name, never the token.)
    tokens: tuple[Annotated[PeerToken, BeforeValidator(_peer_token_entry)], ...] = field(
        default=(), metadata=SECRET
    )
    max_body_bytes: Annotated[int, Gt(0)] = 1024 * 1024
    # Failed bearer-token attempts per client address in a sliding window; past the limit that
    # address gets 429 until the window frees it. No legitimate client fails this often. 0: off.
    auth_fail_limit: Annotated[int, Ge(0)] = 10
    auth_fail_window_s: Annotated[float, Gt(0)] = 60.0
    # Requests per minute per peer token (a token bucket of token_burst). Off by default: the
    # gateway's own bounds (max_concurrent_turns, mailboxes) already protect it, and what is
    # fair between peers depends on the deployment. 0: off.
    token_requests_per_min: Annotated[int, Ge(0)] = 0
    token_burst: Annotated[int, Gt(0)] = 60
    header_timeout_s: Annotated[float, Gt(0)] = 10.0  # a connection's request headers
    idle_timeout_s: Annotated[float, Gt(0)] = 75.0  # an idle keep-alive connection
    max_connections: Annotated[int, Gt(0)] = 1000
    # Direct peers whose X-Forwarded-For is believed (IPs or CIDRs): your reverse proxies.
    trusted_proxies: tuple[Annotated[str, rule(checks.network)], ...] = ()
    # Queue mode for this platform's conversations (SPEC 10); None: [gateway] queue_mode.
    queue_mode: QueueMode | None = None

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def token_values(self) -> tuple[str, ...]:
        return tuple(t.token for t in self.tokens)


def peer_problems(peer: PeerConfig) -> list[Problem]:
    """What the tokens say together (no repeats) and with the listen address (tokens
    before a non-loopback listener)."""
    problems: list[Problem] = []
    tokens: dict[str, int] = {}
    names: dict[str, int] = {}
    for i, t in enumerate(peer.tokens):
        if t.token in tokens:
            problems.append(
                (f"peer.tokens[{i}]", f"the same token as peer.tokens[{tokens[t.token]}]")
            )
            continue
        tokens[t.token] = i
        if t.name in names:
            problems.append(
                (f"peer.tokens[{i}].name", f"the same name as peer.tokens[{names[t.name]}]")
            )
        names.setdefault(t.name, i)
    if not peer.tokens:
        host = peer.host
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            problems.append(
                (
                    "peer.listen",
                    "is not a loopback address and peer.tokens is empty: set tokens before"
                    " exposing the peer API",
                )
            )
    return problems
