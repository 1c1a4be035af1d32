"""The fast lane: tests that start an OS process or run a whole gateway carry a marker, and a
test that does either without its marker fails.

``process`` marks a test that starts an OS process (a ``botmux`` child, a second Python, a
linter, Chromium) or needs PostgreSQL; ``gateway`` marks a test that runs a whole in-process
gateway (``GatewayApp.run``, which ``tests.harness.running_gateway`` calls). The fast lane is
``pytest -m "not process and not gateway"``; CI runs everything.

Marks are explicit (a module's ``pytestmark``, a test's decorator) except where the fixtures
say it: a test using ``postgres_url`` or ``postgres_server`` is marked ``process`` here at
collection. What a test really does is watched while its fixtures are set up and while it
runs (not at its teardown, which also ends the wider fixtures the next test does not use):
every process start through Python's audit events (``subprocess.Popen``, ``os.posix_spawn``,
``os.fork``, ``os.exec``, ``os.system``, which asyncio's and anyio's subprocesses go through
too), every gateway run through a wrapper around ``GatewayApp.run`` that records and
delegates, and every PostgreSQL database handed out by ``postgres_url`` (also to a fixture
that asks for it by name). A test that did one without its marker gets an error at teardown
that says which marker to add, so a forgotten mark cannot quietly slow the fast lane down or
leave a test out of ``-m process``.

Loaded by ``tests/conftest.py`` (``pytest_plugins``); the markers are registered in
pyproject.toml. ``tests/test_layout.py`` runs this check against tests that break it.
"""

from __future__ import annotations

import functools
import platform
import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

from gateway.app import GatewayApp

PROCESS = "process"
GATEWAY = "gateway"
#: The audit events that start a process (https://docs.python.org/3/library/audit_events.html).
SPAWNS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.exec",
     "os.system"}
)  # fmt: skip
#: Fixtures whose use makes a test ``process`` before it runs.
POSTGRES_FIXTURES = frozenset({"postgres_url", "postgres_server"})


class LaneCheck:
    """What the running test did that needs a marker: ``(marker, what)`` pairs."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None  # the test being watched: its setup and call
        self.seen: list[tuple[str, str]] = []

    def saw(self, marker: str, what: str) -> None:
        if self.item is not None and self.item.get_closest_marker(marker) is None:
            self.seen.append((marker, what))

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        # Runs for every audit event of the process (file opens, imports, ...): kept cheap.
        if event in SPAWNS and self.item is not None:
            self.saw(PROCESS, _spawned(event, args))

    def watch_gateways(self) -> Callable[[], None]:
        """Wrap ``GatewayApp.run`` so a gateway run is seen; returns the undo."""
        run = GatewayApp.run

        @functools.wraps(run)
        async def recorded(app: GatewayApp, *args: Any, **kwargs: Any) -> None:
            self.saw(GATEWAY, "a whole gateway (GatewayApp.run)")
            await run(app, *args, **kwargs)

        GatewayApp.run = recorded  # type: ignore[method-assign]

        def undo() -> None:
            GatewayApp.run = run  # type: ignore[method-assign]

        return undo

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if POSTGRES_FIXTURES.intersection(getattr(item, "fixturenames", ())):
                item.add_marker(PROCESS)

    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[object]) -> None:
        if fixturedef.argname in POSTGRES_FIXTURES:
            self.saw(PROCESS, "PostgreSQL")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.item, self.seen = item, []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self) -> None:
        # A test's teardown also ends the wider fixtures the next test does not use (the
        # PostgreSQL server, stopped after the session's last test): what runs there is no
        # one test's doing.
        self.item = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "teardown" and self.seen:
            report.outcome = "failed"
            report.longrepr = _missing(item, self.seen)
            self.seen = []
        return report


def _spawned(event: str, args: tuple[Any, ...]) -> str:
    if event == "subprocess.Popen" and len(args) > 1:
        argv = args[1]
        shown = " ".join(map(str, argv)) if isinstance(argv, list | tuple) else str(argv)
        return f"a process ({shown[:120]})"
    return f"a process ({event})"


def _missing(item: pytest.Item, seen: list[tuple[str, str]]) -> str:
    markers = sorted({marker for marker, _ in seen})
    what = "; ".join(dict.fromkeys(what for _, what in seen))
    marks = ", ".join(f"pytest.mark.{m}" for m in markers)
    return (
        f"{item.nodeid} started {what} but is not marked {' and '.join(markers)}: add {marks}"
        " to the test (or to the module's pytestmark) so the fast lane"
        ' (pytest -m "not process and not gateway") leaves it out (tests/lanes.py)'
    )


def pytest_configure(config: pytest.Config) -> None:
    # The openai client reads platform.uname() once per process, and its processor field runs
    # `uname -p`: read here, before any test, it is cached and charged to no test.
    platform.processor()
    check = LaneCheck()
    config.pluginmanager.register(check, LaneCheck.__name__)
    # Audit hooks cannot be removed: this one does nothing once no test is running.
    sys.addaudithook(check.audit)
    config.add_cleanup(check.watch_gateways())
