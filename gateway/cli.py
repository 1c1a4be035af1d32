"""The ``botmux`` command line (SPEC section 7).

Exit codes: 0 clean stop, 2 bad config or usage, 1 anything else (``reload``: 0 applied, 2
refused or a bad file, 1 no gateway answered). ``--config PATH`` is accepted anywhere on the
line, for every subcommand.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

from gateway import cli_schedules, cli_sessions, control, event_loop, exposure
from gateway.cli_text import printable
from gateway.config import Config, load_config
from gateway.errors import ConfigError, GatewayError
from gateway.failpoints import Failpoints
from gateway.logs import RedactingFilter, configure_logging, install_excepthooks

if TYPE_CHECKING:
    from gateway.store import Store

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
PAIRING_PLATFORMS = ("telegram", "discord", "slack")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"botmux: error: {message}\n")


def _split_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Take ``--config PATH`` / ``--config=PATH`` from anywhere on the line."""
    rest: list[str] = []
    path: str | None = None
    items = iter(argv)
    for arg in items:
        if arg == "--config":
            path = next(items, None)
            if path is None:
                raise SystemExit(_usage_error("--config needs a path"))
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return path, rest


def _usage_error(message: str) -> int:
    print(f"botmux: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="botmux", description="A self-hosted multi-platform bot gateway.")
    parser.add_argument("--config", metavar="PATH", help="config file (default ./botmux.toml)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("run", help="run the gateway until SIGINT/SIGTERM, then drain")
    check = sub.add_parser("check", help="validate the config and say what would start")
    check.add_argument(
        "--against",
        metavar="HOST:PORT",
        help="the running gateway to compare with (default: the one running this file)",
    )
    sub.add_parser("reload", help="make the running gateway re-read its config file")
    sub.add_parser("status", help="what the store and the running gateway say, as a table")
    cli_sessions.add_parser(sub, _Parser)
    cli_schedules.add_parser(sub, _Parser)
    pairing = sub.add_parser("pairing", help="manage DM pairing of unknown users")
    psub = pairing.add_subparsers(dest="action", required=True, parser_class=_Parser)
    psub.add_parser("list", help="pending codes and approved users")
    approve = psub.add_parser("approve", help="let the user behind a code in")
    approve.add_argument("platform", choices=PAIRING_PLATFORMS)
    approve.add_argument("code")
    reject = psub.add_parser("reject", help="refuse a pending code (its user gets no new one)")
    reject.add_argument("platform", choices=PAIRING_PLATFORMS)
    reject.add_argument("code")
    revoke = psub.add_parser("revoke", help="withdraw a user's approval")
    revoke.add_argument("platform", choices=PAIRING_PLATFORMS)
    revoke.add_argument("user_id")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    try:
        config_arg, rest = _split_config(args_in)
    except SystemExit as exc:
        return int(exc.code or EXIT_USAGE)
    try:
        args = _parser().parse_args(rest)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        config = load_config(config_arg)
    except ConfigError as exc:
        _config_errors(exc.errors)  # all of them: fix the file once, not once per key
        return EXIT_USAGE
    try:
        if args.command == "run":
            return _run(config, config_arg)
        if args.command == "check":
            code = _check(config)
            return code if code != EXIT_OK else anyio.run(_preview, config, args.against)
        if args.command == "reload":
            return anyio.run(_reload, config)
        if args.command == "status":
            return anyio.run(_status, config)
        if args.command == "sessions":
            return cli_sessions.run(config, args)
        if args.command == "pairing":
            return anyio.run(_pairing, config, args)
        if args.command == "schedules":
            return anyio.run(cli_schedules.run, config, args)
    except GatewayError as exc:
        print(f"botmux: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_USAGE


def _config_errors(errors: Iterable[tuple[str | None, str | None]]) -> None:
    for path, message in errors:
        where = f"{path}: " if path else ""
        print(f"botmux: config error: {where}{message}", file=sys.stderr)


def _run(config: Config, config_arg: str | None = None) -> int:
    from gateway.app import GatewayApp  # the composition root loads every part: only for `run`

    try:
        failpoints = Failpoints.from_env(os.environ)
        loop = event_loop.chosen(os.environ)
    except ConfigError as exc:
        print(f"botmux: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(level=config.log.level, fmt=config.log.format, secrets=config.secrets())
    install_excepthooks(config.secrets())
    for warning in exposure.warnings(config):  # what `check` says, said where it runs
        logging.getLogger("gateway").warning(f"config warning: {warning}")
    if failpoints:
        logging.getLogger("gateway").warning(
            "failpoints armed: this process will kill itself (a testing aid)",
            extra={"failpoints": os.environ.get("BOTMUX_FAILPOINT")},
        )
    # A reload reads what `run` read: the same file, with this process's environment.
    app = GatewayApp(config, failpoints=failpoints, read=lambda: load_config(config_arg))

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as sigs:

                async def watch() -> None:
                    async for sig in sigs:
                        if sig != signal.SIGHUP:
                            app.stop.set()
                            return
                        if app.reloader is not None:  # ConfigReloaded logs what it did
                            await app.reloader.reload("signal")

                tg.start_soon(watch)
                await control.serve_with_run_file(app)
                tg.cancel_scope.cancel()

    _tune_collector()
    try:
        logging.getLogger("gateway").info("event loop", extra={"loop": loop})
        anyio.run(serve, backend_options=event_loop.backend_options(loop))
    except (GatewayError, OSError, BaseExceptionGroup) as exc:
        cause = _expected_failure(exc)
        if cause is None:
            raise
        # A port in use, a store that cannot be opened, a refused bot token: one line, not a
        # traceback, and never a secret (a library's text may quote one).
        line = RedactingFilter(config.secrets()).redact(str(cause))
        logging.getLogger("gateway").error("botmux could not run", extra={"error": line})
        print(f"botmux: error: {line}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _tune_collector() -> None:
    """The cyclic garbage collector, set for a long-running server (``run`` only: tests that
    start gateways in their own process keep Python's defaults).

    What the imports built (modules, classes, functions: most of the heap) is moved out of
    every future collection (``gc.freeze``), and the youngest generation is collected every
    7,000 container allocations instead of 700. Garbage without cycles is freed at once as
    ever; only cycles wait a little longer. Instructions per turn at 50 conversations
    (callgrind, ``tests.bench.instructions``): 2.49-2.54 -> 2.39-2.41 M."""
    gc.freeze()
    gc.set_threshold(7_000, 10, 10)


def _expected_failure(exc: BaseException) -> BaseException | None:
    """The operator-facing failure (ours, or the OS refusing something) inside task groups'
    exception groups; None when there is anything else in there (a bug: show it whole)."""
    if isinstance(exc, GatewayError | OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = [_expected_failure(e) for e in exc.exceptions]
        if found and all(f is not None for f in found):
            return found[0]
    return None


def _mask(secret: str) -> str:
    return "unused" if secret == "unused" else f"…{secret[-4:]}" if len(secret) > 8 else "****"


def _check_tools(config: Config) -> None:
    """The MCP servers, and which profile (and tools) each platform's conversations get."""
    from gateway.config_tools import profile_lines

    servers = config.tools.mcp
    if not servers:
        print("tools: no MCP server")
    for server in servers:
        where = f"stdio: {server.command}" if server.command else f"http: {server.url}"
        print(f"tool server {server.name} ({where}), approval: {server.approval}")
    chats = ("telegram", "discord", "slack", "a2a")
    platforms = ["peer", *(p for p in chats if getattr(config, p))]
    for platform in platforms:
        for line in profile_lines(config.profiles, config.agent.tools, platform):
            print(f"{platform} conversations: {line}")


def _slack_line(config: Config) -> str:
    sl = config.slack
    if sl is None:
        return "slack: off"
    way = "Socket Mode" if sl.socket_mode else f"Events API at http://{sl.listen}/slack/events"
    channels = f"{len(sl.allow_channels)} open channel(s)"
    users = f"{len(sl.allow_users)} allowed user(s), others by DM pairing"
    mention = "mention needed in channels" if sl.require_mention else "answers everything"
    threads = "answers in threads" if sl.reply_in_thread else "answers in the channel"
    return f"slack: {way} via {sl.api_base}, {channels}, {users}, {mention}, {threads}"


def _check(config: Config) -> int:
    print(f"config: {config.source}: valid")
    if config.store.shared:
        from gateway.store import describe

        print(
            f"store: {describe(config)}, node {config.cluster.node_id or '(hostname-pid)'},"
            f" lease {config.cluster.lease_s:g} s, heartbeat {config.cluster.heartbeat_s:g} s"
        )
    else:
        print(f"store: SQLite at {Path(config.store.path).resolve()}")
    if config.model is None:
        print(
            "model: NOT CONFIGURED: botmux will start, and every turn will answer with how to"
            " configure one (set OPENAI_BASE_URL / OPENAI_API_KEY / BOTMUX_MODEL, or add [model])"
        )
    else:
        for i, endpoint in enumerate(config.model.chain):
            role = "primary" if i == 0 else f"fallback {i}"
            keys = ", ".join(_mask(k) for k in endpoint.api_keys)
            print(f"model ({role}): {endpoint.model} at {endpoint.base_url} keys [{keys}]")
    names = ", ".join(t.name for t in config.peer.tokens)
    auth = (
        f"{len(config.peer.tokens)} bearer token(s): {names}"
        if config.peer.tokens
        else "no auth (loopback only)"
    )
    print(f"peer API: http://{config.peer.listen} ({auth})")
    if config.telegram is None:
        print("telegram: off")
    else:
        tg = config.telegram
        users = f"{len(tg.allow_users)} allowed user(s), others by DM pairing"
        print(f"telegram: {tg.mode} via {tg.api_base}, groups: {tg.group_mode}, {users}")
    if config.discord is None:
        print("discord: off")
    else:
        dc = config.discord
        guilds = f"{len(dc.allow_guilds)} allowed guild(s)" if dc.allow_guilds else "every guild"
        who = "every member" if dc.guild_access == "everyone" else "allowed and paired users"
        guilds += f" ({who})"
        mention = "mention or reply needed" if dc.require_mention else "answers everything"
        print(f"discord: via {dc.api_base}, {guilds}, {mention}")
    print(_slack_line(config))
    _check_tools(config)
    for line in cli_schedules.check_lines(config):
        print(line)
    for line in anyio.run(cli_schedules.preview, config):
        print(line)
    for warning in exposure.warnings(config):
        print(f"warning: {warning}")
    return EXIT_OK


async def _preview(config: Config, against: str | None) -> int:
    """What a reload of this file would change in the running gateway (a dry run there).
    The exit status stays the file's (valid: 0) whatever that gateway thinks of it (its
    environment may lack a variable): its opinion is printed beside the file's. Only a
    gateway named with ``--against`` that does not answer is a failure."""
    text = ""
    if config.source != "(embedded defaults)":
        text = await anyio.Path(config.source).read_text(encoding="utf-8")
    try:
        answer = await control.ask_reload(config, dry_run=True, text=text, against=against)
    except ConfigError as exc:  # an untrusted run directory: nothing was sent anywhere
        print(f"running gateway: not asked: {exc}")
        return EXIT_OK
    if answer is None:
        print(f"running gateway: none answered{' at ' + against if against else ''}")
        return EXIT_FAILURE if against else EXIT_OK
    if answer.status != 200:
        print(f"running gateway at {answer.url}: {_refusal(answer)}")
        for e in answer.body.get("errors") or []:
            print(f"running gateway at {answer.url}: {e.get('key')}: {e.get('message')}")
        return EXIT_OK
    live, restart = answer.body.get("live") or [], answer.body.get("restart") or []
    if not live and not restart:
        print(f"running gateway at {answer.url}: a reload would change nothing")
    if live:
        print(f"running gateway at {answer.url}: a reload applies live: {', '.join(live)}")
    if restart:
        print(f"running gateway at {answer.url}: needs a restart: {', '.join(restart)}")
    return EXIT_OK


def _refusal(answer: control.Answer) -> str:
    if answer.status == 401:
        return "refused every peer token of this file (401); send SIGHUP to reload"
    error = answer.body.get("error")
    if isinstance(error, dict):
        return f"HTTP {answer.status}: {error.get('message')}"
    return f"HTTP {answer.status}"


async def _reload(config: Config) -> int:
    """``botmux reload``: 0 applied (or nothing to change), 2 refused, 1 nobody answered."""
    answer = await control.ask_reload(config)
    if answer is None:
        print(f"botmux: no gateway answers for {config.source}", file=sys.stderr)
        return EXIT_FAILURE
    body, status = answer.body, answer.status
    if status == 200:
        live = ", ".join(body.get("live") or []) or "nothing changed"
        print(f"reload {body.get('outcome')} (version {body.get('version')}): {live}")
        return EXIT_OK
    if status == 409:
        restart = ", ".join(body.get("restart") or [])
        print(f"botmux: reload refused: needs a restart: {restart}", file=sys.stderr)
        print("nothing was applied; the gateway runs on as it was", file=sys.stderr)
        return EXIT_USAGE
    if status == 422:
        _config_errors((e.get("key"), e.get("message")) for e in body.get("errors") or [])
        print("nothing was applied; the gateway runs on as it was", file=sys.stderr)
        return EXIT_USAGE
    print(f"botmux: reload: {_refusal(answer)}", file=sys.stderr)
    return EXIT_FAILURE


async def _scrape(config: Config) -> tuple[dict[str, object] | None, str | None]:
    """The running gateway's /readyz body and /metrics text, when it answers."""
    import aiohttp

    base = control.local_url(config)
    headers = (
        {"Authorization": f"Bearer {config.peer.token_values[0]}"} if config.peer.tokens else {}
    )
    timeout = aiohttp.ClientTimeout(total=2)
    try:
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
            async with http.get(f"{base}/readyz") as r:
                ready = await r.json()
            async with http.get(f"{base}/metrics") as r:
                metrics = await r.text() if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None, None
    return ready, metrics


def _samples(metrics: str, name: str) -> list[tuple[dict[str, str], float]]:
    import re

    found = []
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            metric, _, value = line.rpartition(" ")
            found.append((dict(re.findall(r'(\w+)="([^"]*)"', metric)), float(value)))
    return found


async def _status(config: Config) -> int:
    from gateway.store import Conversations, OutboxPending, RecentFailures, open_store

    ready, metrics = await _scrape(config)
    print(f"gateway: {'not reachable at ' + config.peer.listen if ready is None else 'running'}")
    if ready is not None:
        checks = ready.get("checks", {})
        assert isinstance(checks, dict)
        for part, ok in checks.items():
            print(f"  {part:<12} {'ready' if ok else 'NOT READY'}")
        servers = ready.get("tools", [])  # SPEC 15: a server down is no reason for NOT READY
        assert isinstance(servers, list)
        for server in servers:
            detail = f" ({server['detail']})" if server.get("detail") else ""
            print(
                f"  tool server {server['name']}: {server['state']},"
                f" {server['tools']} tool(s){printable(detail)}"
            )
    if metrics is not None:
        for _, value in _samples(metrics, "botmux_live_sessions"):
            print(f"live conversations: {int(value)}")
        benched = _samples(metrics, "botmux_credential_benched_seconds")
        print("benched credentials:" if benched else "benched credentials: none")
        for labels, value in benched:
            left = "until restart" if value == float("inf") else f"{value:.0f} s left"
            print(
                f"  {labels.get('model')} key {labels.get('key')} ({labels.get('reason')}), {left}"
            )
    if not config.store.shared and not await anyio.Path(config.store.path).exists():
        print(f"store: none yet at {config.store.path}")
        return EXIT_OK
    async with open_store(config) as store:
        nodes = await _nodes(store)
        if nodes:
            print("nodes:")
        for n in nodes:
            state = "alive" if n["alive"] else "gone"
            print(f"  {n['node']:<32} {state:<6} {n['conversations']} conversations held")
        conversations = await store.read(Conversations())
        pending = [c for c in conversations if c.pending]
        print(f"conversations: {len(conversations)}, with pending turns: {len(pending)}")
        for c in pending[:20]:
            print(f"  {c.key:<40} {c.pending} pending")
        outbox = await store.read(OutboxPending())
        total = sum(outbox.values())
        detail = ", ".join(f"{p} {n}" for p, n in sorted(outbox.items()))
        print(f"undelivered reply chunks: {total}" + (f" ({detail})" if detail else ""))
        failures = await store.read(RecentFailures(10))
        print("recent failures:" if failures else "recent failures: none")
        for m in failures:
            when = datetime.fromtimestamp(m.created_at).strftime("%Y-%m-%d %H:%M:%S")
            print(f"  {when} {m.conversation:<32} {m.failure}")
    return EXIT_OK


async def _nodes(store: Store) -> list[dict[str, Any]]:
    """The nodes sharing a PostgreSQL store (none for SQLite)."""
    return [] if store.leases is None else await store.leases.nodes()


async def _pairing(config: Config, args: argparse.Namespace) -> int:
    from gateway.store import (
        ApprovedUsers,
        ApprovePairing,
        PairingCodes,
        RejectPairing,
        RevokeUser,
        open_store,
    )

    async with open_store(config) as store:
        if args.action == "list":
            codes = await store.read(PairingCodes(time.time()))
            print("pending codes:" if codes else "pending codes: none")
            for c in codes:
                left = max(0, int(c.expires_at - time.time()) // 60)
                who = printable(f"user {c.user_id} {c.label}")
                print(f"  {c.platform:<9} {c.code}  {who}  ({left} min left)")
            users = await store.read(ApprovedUsers())
            print("approved users:" if users else "approved users: none")
            for platform, user_id, when in users:
                stamp = datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M")
                print(f"  {platform:<9} {user_id}  (since {stamp})")
            return EXIT_OK
        if args.action in ("approve", "reject"):
            approve = args.action == "approve"
            decide = ApprovePairing if approve else RejectPairing
            user = await store.submit(decide(args.platform, args.code))
            if user is None:
                print(
                    f"botmux: no pending {args.platform} code {args.code!r} (expired?)",
                    file=sys.stderr,
                )
                return EXIT_FAILURE
            if approve:
                print(f"approved {args.platform} user {user}")
            else:
                print(f"rejected {args.platform} user {user}'s code {args.code.strip().upper()}")
            return EXIT_OK
        if await store.submit(RevokeUser(args.platform, args.user_id)):
            print(f"revoked {args.platform} user {args.user_id}")
            return EXIT_OK
        print(f"botmux: {args.platform} user {args.user_id} was not approved", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
