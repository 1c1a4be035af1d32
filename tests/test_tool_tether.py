"""The tether a stdio MCP server runs under (``agent/tools/_tether.py``, finding T-3): it passes
the server's exit on as its own (a code, a signal, a command that cannot start), holds none of
the pipes, and ends the server's process group once the gateway is gone: also a server that
ignores its stdin closing, with a helper of its own. The whole gateway's case (kill -9 with the
SDK's server and its helper): ``tests/test_surface_tools.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress

import pytest

from agent.tools._stdio import TETHER
from tests.harness import children, is_running

pytestmark = pytest.mark.process


def tethered(*command: str, **popen: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*TETHER, str(os.getpid()), *command],
        capture_output=True,
        start_new_session=True,
        timeout=20,
        **popen,  # type: ignore[call-overload]
    )


def test_the_servers_exit_is_the_tethers() -> None:
    done = tethered(sys.executable, "-c", "import sys; print('out'); sys.exit(3)")
    assert (done.returncode, done.stdout) == (3, b"out\n")
    killed = tethered(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 15)")
    assert killed.returncode == -signal.SIGTERM
    # What the gateway's log says of a command that is not there: its last stderr line.
    missing = tethered("/nonexistent/mcp-server")
    assert missing.returncode == 127
    assert missing.stderr.decode().strip() == (
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    )


def test_the_tether_holds_no_end_of_the_pipes() -> None:
    """The server's stdout ends when the server's does, not when the tether exits."""
    with subprocess.Popen(
        [*TETHER, str(os.getpid()), sys.executable, "-c", "print('bye')"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.read() == b"bye\n"  # EOF: nothing else holds the write end
        targets = []
        with suppress(FileNotFoundError):  # exited already: it held nothing either
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                with suppress(FileNotFoundError):
                    targets.append(os.readlink(f"/proc/{proc.pid}/fd/{fd}"))
        assert all(not t.startswith("pipe:") for t in targets), targets
        assert proc.wait(10) == 0


GATEWAY = """
import subprocess, sys, time
tether = subprocess.Popen(
    [*{tether!r}, str(__import__("os").getpid()), "sh", "-c", "sleep 301 & exec sleep 302"],
    stdin=subprocess.PIPE, start_new_session=True,
)
print(tether.pid, flush=True)
time.sleep(300)
"""


def test_a_server_that_ignores_its_stdin_is_ended_with_its_helper_once_the_gateway_is_gone() -> (
    None
):
    """A stand-in gateway starts the tether (stdin a pipe, as the gateway's), then dies by
    SIGKILL: the server (``sleep``, which never reads its stdin) and its helper are ended
    within the tether's look (1 s) and its grace."""
    left: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", GATEWAY.format(tether=TETHER)], stdout=subprocess.PIPE
    ) as gateway:
        try:
            assert gateway.stdout is not None
            tether = int(gateway.stdout.readline())
            deadline = time.monotonic() + 10
            while len(left) < 2 and time.monotonic() < deadline:
                servers = children(tether, "sleep 302")
                left = servers + [h for s in servers for h in children(s, "sleep 301")]
                time.sleep(0.02)
            assert len(left) == 2, left
            gateway.kill()
            gateway.wait(5)
            deadline = time.monotonic() + 5
            while any(is_running(p) for p in [*left, tether]) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert [p for p in [*left, tether] if is_running(p)] == []
        finally:
            for pid in left:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            gateway.kill()
