"""The dependency policy holds: every requirement pinned in constraints.txt, within its range,
floors above the releases with published advisories, CI and the image installing the pins."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, Version]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not a pin: {line!r}"
            found[canonicalize_name(name)] = Version(version)
    return found


def project() -> dict[str, list[str]]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"runtime": table["dependencies"], "test": table["optional-dependencies"]["test"]}


def test_every_requirement_is_pinned_inside_its_range() -> None:
    pinned = pins()
    for spec in project()["runtime"] + project()["test"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (req, pinned[name])
    assert "botmux" not in pinned


def test_runtime_floors_and_bounds() -> None:
    runtime = {
        canonicalize_name(r.name): r.specifier for r in map(Requirement, project()["runtime"])
    }
    aiohttp = runtime["aiohttp"]
    assert not aiohttp.contains("3.14.3") and aiohttp.contains("3.14.4")  # PYSEC-2026-4371
    assert not runtime["openai"].contains("4.0.0")  # the next major: transcriptions, errors
    assert not runtime["mcp"].contains("2.4.0")  # its dispatcher under ClientSession
    for name in ("anyio", "aiosqlite", "aiohttp", "asyncpg", "prometheus-client", "openai"):
        assert any(s.operator == "<" for s in runtime[name]), f"{name} has no upper bound"


def test_ci_and_the_image_install_the_pins() -> None:
    assert "pip install -q -c constraints.txt -e '.[test]'" in (ROOT / ".ci" / "run").read_text()
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "constraints.txt" in dockerfile.split("pip install", 1)[0]  # copied before
    assert "pip install --no-cache-dir -c constraints.txt ." in dockerfile
