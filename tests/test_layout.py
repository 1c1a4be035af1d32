"""The test layout holds: no test module imports another (what two share lives in
tests/support/, tests/harness.py, tests/actors.py or tests/fakes/), and the fast lane's check
(tests/lanes.py) fails a test that starts a process or a gateway without its marker."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

#: Test modules still importing another, each with the module it imports (none left; an
#: entry here is a debt with a name, and goes when its import does).
NOT_YET: set[tuple[str, str]] = set()


def imported_test_modules(path: Path) -> set[str]:
    """The ``tests.test_*`` modules ``path`` imports, wherever in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("tests.test_"):
                found.add(node.module)
            elif node.module == "tests":
                found.update(f"tests.{a.name}" for a in node.names if a.name.startswith("test_"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tests.test_"))
    return found


def test_no_test_module_imports_another() -> None:
    found = {
        (path.stem, module)
        for path in sorted(TESTS.rglob("*.py"))
        for module in imported_test_modules(path)
    }
    assert found - NOT_YET == set(), "move what they share to tests/support/ (tests/README.md)"
    assert found >= NOT_YET, "an import listed in NOT_YET is gone: remove its entry"


def test_the_import_check_sees_every_form(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        "from tests.test_a import x\n"
        "import tests.test_b\n"
        "from tests import test_c, harness\n"
        "def f():\n    from tests.test_d import y\n"
        "from tests.support.stores import Opener\n"
    )
    assert imported_test_modules(module) == {
        "tests.test_a",
        "tests.test_b",
        "tests.test_c",
        "tests.test_d",
    }


# -- the fast lane's check ----------------------------------------------------------------------

CASES = """
import subprocess
import sys

import pytest

from tests.harness import make_config, running_gateway

pytestmark = pytest.mark.anyio


@pytest.fixture
def postgres_url():
    return "postgresql://nowhere/none"  # only its name matters to the check


def test_starts_nothing():
    assert sum([1, 2]) == 3


def test_starts_a_process_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.process
def test_starts_a_process_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


async def test_runs_a_gateway_unmarked(tmp_path):
    async with running_gateway(make_config(tmp_path / "b.db", None)):
        pass


@pytest.mark.gateway
async def test_runs_a_gateway_marked(tmp_path):
    async with running_gateway(make_config(tmp_path / "b.db", None)):
        pass


def test_asks_for_postgres_on_the_way_unmarked(request):
    request.getfixturevalue("postgres_url")


def test_asks_for_postgres_by_name(postgres_url):
    pass
"""


def run_pytest(tmp_path: Path, *args: str) -> tuple[dict[str, set[str]], str]:
    """Run the cases under the fast lane's check: each test's outcomes (a test whose check
    fails has passed its call and errs at teardown), and the output."""
    (tmp_path / "test_cases.py").write_text(CASES)
    pytest_ = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", "."]
    done = subprocess.run(
        [
            *pytest_,
            "-p",
            "tests.lanes",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            *args,
            "test_cases.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    outcomes: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        outcome, _, rest = line.partition(" test_cases.py::")
        if outcome in ("PASSED", "FAILED", "ERROR") and rest:
            outcomes.setdefault(rest.split()[0].split("[")[0], set()).add(outcome)
    return outcomes, done.stdout + done.stderr


UNMARKED = {
    "test_starts_a_process_unmarked",
    "test_runs_a_gateway_unmarked",
    "test_asks_for_postgres_on_the_way_unmarked",
}


@pytest.mark.process
def test_a_test_that_starts_a_process_or_a_gateway_unmarked_fails(tmp_path: Path) -> None:
    outcomes, out = run_pytest(tmp_path)
    assert {name for name, seen in outcomes.items() if "ERROR" in seen} == UNMARKED, out
    assert {name for name, seen in outcomes.items() if seen == {"PASSED"}} == {
        "test_starts_nothing",
        "test_starts_a_process_marked",
        "test_runs_a_gateway_marked",
        "test_asks_for_postgres_by_name",  # marked at collection
    }, out
    assert "_unmarked started a process (" in out
    assert "is not marked process: add pytest.mark.process" in out
    assert "_unmarked[asyncio] started a whole gateway (GatewayApp.run)" in out
    assert "is not marked gateway: add pytest.mark.gateway" in out
    assert "_on_the_way_unmarked started PostgreSQL" in out


@pytest.mark.process
def test_the_fast_lane_leaves_the_marked_tests_out(tmp_path: Path) -> None:
    outcomes, out = run_pytest(tmp_path, "-m", "not process and not gateway")
    assert set(outcomes) == UNMARKED | {"test_starts_nothing"}, out
    assert "3 deselected" in out, out
