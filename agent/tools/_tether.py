"""A stdio MCP server's tether: what ends the server, and every process the server started,
once the gateway that started it is gone, even killed by SIGKILL or the OOM killer (finding T-3
of the 2026-12-05 review). Without it a server exits when its stdin closes, but a helper it
started (a browser, a language server) lives on, and each restart of the gateway adds a set.

``agent.tools._stdio`` runs it as ``python -I -S _tether.py GATEWAY_PID COMMAND [ARG ...]``,
leading a session and a process group of its own (``start_new_session``). It starts the server
in that group, hands it its standard streams and keeps none of them, and waits:

- The server exits: the tether exits with the server's status (its code, or the same signal).
  If the gateway is gone by then (the server saw its stdin close when the gateway died), it
  ends the group first: what the server started does not outlive it. While the gateway runs,
  the gateway ends the group itself (``_stdio._stop``).
- The gateway is gone while the server runs on (checked every :data:`POLL_S`: a server that
  ignores its stdin closing): the group is ended.
- SIGTERM (the gateway's stop sends it to the whole group): the tether ends, the default action;
  the gateway's stop sees to the rest of the group.

Ending the group is SIGTERM to it, up to :data:`GRACE_S` for its other processes to exit, then
SIGKILL to it, the tether included. The standard library only, and imported by nothing: run
with ``-I -S`` (no site directory, no ``PYTHON*`` variable, nothing of the server's working
directory on ``sys.path``), neither the server's environment nor its working directory can
change what the tether runs. It costs each stdio server about 10 MB of memory (4 MB of it its
own, the rest shared with other Python processes) and 16 ms at its start (docs/TOOLS.md).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

POLL_S = 1.0  # how often the tether looks whether the gateway is still its parent
GRACE_S = 2.0  # after SIGTERM to the group, before SIGKILL
_STEP_S = 0.02


class Orphaned(Exception):
    """The gateway is no longer the tether's parent."""


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: _tether.py GATEWAY_PID COMMAND [ARG ...]", file=sys.stderr)
        return 2
    gateway, command = int(argv[0]), argv[1:]
    try:
        server = os.posix_spawnp(command[0], command, os.environ)
    except OSError as exc:  # what the gateway's log says of the server: its last stderr line
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 127
    _let_go()

    def look(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != gateway:
            raise Orphaned

    reaped: int | None = None  # the server's wait status, once it is reaped
    try:
        if os.getppid() != gateway:  # gone before the first look
            raise Orphaned
        signal.signal(signal.SIGALRM, look)
        signal.setitimer(signal.ITIMER_REAL, POLL_S, POLL_S)
        _, reaped = os.waitpid(server, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        if os.getppid() != gateway:
            raise Orphaned
    except Orphaned:
        signal.setitimer(signal.ITIMER_REAL, 0)
        end_group(server, reaped is not None)
    return _exit_as(reaped if reaped is not None else 0)


def _let_go() -> None:
    """The server has the standard streams; the tether keeps no end of the gateway's pipes
    (the gateway reads the server's output to its end, whenever the tether exits)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def end_group(server: int, reaped: bool) -> None:
    """SIGTERM to the tether's group (the tether ignores it), up to :data:`GRACE_S` for the
    others to exit, then SIGKILL to the group: the tether does not return."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if not reaped:  # a zombie server keeps its place in the group
            try:
                reaped = os.waitpid(server, os.WNOHANG)[0] != 0
            except ChildProcessError:  # reaped just before the look that found us orphaned
                reaped = True
        if reaped and not _others_in(group):
            break
        time.sleep(_STEP_S)
    os.killpg(group, signal.SIGKILL)


def _others_in(group: int) -> bool:
    """Whether a live process other than the tether is in ``group`` (/proc; elsewhere the
    whole grace is waited)."""
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if fields[2:3] == [str(group).encode()] and fields[:1] != [b"Z"]:
            return True
    return False


def _exit_as(status: int) -> int:
    """The server's wait status as the tether's own exit: its code, or its signal."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        with_signal = signal.Signals(-code)
        if with_signal not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(with_signal, signal.SIG_DFL)
        os.kill(os.getpid(), with_signal)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
