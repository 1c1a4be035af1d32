"""The run directory of ``botmux reload`` and ``botmux check`` (gateway/control.py; security
review 2026-12-05, H-4): trusted only when it is this user's alone. A directory that another
user made (first, in a shared /tmp), or that others may write, is refused naming its path, and
nothing is sent to the address a file in it names; a symlink planted there is never followed,
neither by the gateway writing its run file nor by the command line reading it. The round
trip through a run directory of our own is tests/test_reload.py's real-process test.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway import control
from gateway.config import parse_config
from tests.fakes.push_receiver import PushReceiver, push_receiver
from tests.harness import ROOT, GatewayProcess, config_text, free_port

pytestmark = pytest.mark.anyio

NOBODY = 65534
OPERATOR = "op-token-0123456789abcdef"
root_only = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


@pytest.fixture
async def attacker() -> AsyncIterator[PushReceiver]:
    """A local listener that answers 401, as the review's attacker did: every token in turn."""
    async with push_receiver(default=401) as listener:
        yield listener


def write_config(tmp_path: Path, port: int) -> Path:
    text = config_text(tmp_path / "b.db", None, listen=f"127.0.0.1:{port}")
    text = text.replace("[peer]\n", f'[peer]\ntokens = ["{OPERATOR}"]\n')
    path = tmp_path / "botmux.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def hashed(config: Path, suffix: str) -> str:
    return hashlib.sha256(str(config.resolve()).encode()).hexdigest()[:16] + suffix


def botmux(*args: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        env={**os.environ, "BOTMUX_RUN_DIR": str(run_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def cli(*args: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: botmux(*args, run_dir=run_dir))


def squat(directory: Path, files: dict[str, str] | None = None) -> None:
    """What the review's local user did: the directory made first, 0777, files planted."""
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    for name, content in (files or {}).items():
        (directory / name).write_text(content)
    for path in (directory, *directory.iterdir()):
        os.lchown(path, NOBODY, NOBODY)


@pytest.mark.process
@root_only
async def test_another_users_run_directory_is_refused_and_no_token_leaves(
    tmp_path: Path, attacker: PushReceiver
) -> None:
    config = write_config(tmp_path, free_port())
    run_dir = tmp_path / "squatted"
    planted = json.dumps({"pid": 1, "url": f"http://127.0.0.1:{attacker.port}"})
    squat(run_dir, {hashed(config, ".json"): planted})

    reload = await cli("reload", "--config", str(config), run_dir=run_dir)
    assert reload.returncode == 1, reload.stdout + reload.stderr
    assert f"the run directory {run_dir} belongs to uid {NOBODY}" in reload.stderr
    assert "[gateway] run_dir" in reload.stderr

    check = await cli("check", "--config", str(config), run_dir=run_dir)
    assert check.returncode == 0, check.stdout + check.stderr  # the file itself is valid
    assert f"running gateway: not asked: gateway.run_dir: the run directory {run_dir}" in (
        check.stdout
    )
    assert attacker.received == []  # neither a token nor the config's text


@pytest.mark.process
async def test_a_run_directory_others_may_write_is_refused(
    tmp_path: Path, attacker: PushReceiver
) -> None:
    config = write_config(tmp_path, free_port())
    run_dir = tmp_path / "open"
    run_dir.mkdir()
    run_dir.chmod(0o777)
    (run_dir / hashed(config, ".json")).write_text(
        json.dumps({"pid": os.getpid(), "url": f"http://127.0.0.1:{attacker.port}"})
    )
    reload = await cli("reload", "--config", str(config), run_dir=run_dir)
    assert reload.returncode == 1
    assert "is writable by others (mode 777; 700 expected)" in reload.stderr
    assert attacker.received == []


@pytest.mark.process
async def test_a_symlinked_run_file_or_directory_is_not_followed(
    tmp_path: Path, attacker: PushReceiver
) -> None:
    config = write_config(tmp_path, free_port())
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(
        json.dumps({"pid": os.getpid(), "url": f"http://127.0.0.1:{attacker.port}"})
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / hashed(config, ".json")).symlink_to(elsewhere)
    reload = await cli("reload", "--config", str(config), run_dir=run_dir)
    assert reload.returncode == 1 and "no gateway answers" in reload.stderr  # listen: nobody

    link = tmp_path / "link"
    link.symlink_to(run_dir)
    reload = await cli("reload", "--config", str(config), run_dir=link)
    assert reload.returncode == 1
    assert f"the run directory {link} is a symlink or not a directory" in reload.stderr
    assert attacker.received == []


@pytest.mark.process
@root_only
async def test_the_gateway_writes_no_run_file_through_another_users_directory(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    victim = tmp_path / "victim.txt"
    victim.write_text("IMPORTANT DATA of root")
    victim.chmod(0o600)
    run_dir = tmp_path / "squatted"
    squat(run_dir)
    (run_dir / hashed(config, ".tmp")).symlink_to(victim)  # the review's planted link
    os.lchown(run_dir / hashed(config, ".tmp"), NOBODY, NOBODY)
    proc = GatewayProcess(config, port, tmp_path / "botmux.log")
    await proc.start({"BOTMUX_RUN_DIR": str(run_dir)})
    try:
        assert victim.read_text() == "IMPORTANT DATA of root"
        assert sorted(p.name for p in run_dir.iterdir()) == [hashed(config, ".tmp")]
        assert "no run file for botmux reload" in proc.log()
        assert f"belongs to uid {NOBODY}" in proc.log()
    finally:
        proc.signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await proc.wait() == 0, proc.log_tail()


def test_the_gateway_replaces_a_planted_run_file_link_instead_of_writing_through_it(
    tmp_path: Path,
) -> None:
    config = parse_config(
        config_text(tmp_path / "b.db", None), source=str(tmp_path / "c.toml"), env={}
    )
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    env = {"BOTMUX_RUN_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    link = tmp_path / "run" / control.run_file_name(config.source)
    link.symlink_to(victim)
    written = control.write_run_file(config, 1234, env)
    assert written == link and not link.is_symlink() and victim.read_text() == "keep me"
    assert (link.stat().st_mode & 0o777) == 0o600
    assert json.loads(link.read_text()) == {"pid": os.getpid(), "url": "http://127.0.0.1:1234"}
    assert control.read_run_file(config, env) == json.loads(link.read_text())
    control.remove_run_file(written)
    assert list((tmp_path / "run").iterdir()) == []


def test_where_the_run_directory_is(tmp_path: Path) -> None:
    """``$BOTMUX_RUN_DIR``, ``[gateway] run_dir``, ``$XDG_RUNTIME_DIR/botmux``, else beside
    the store: never a name in the shared temp directory that anyone may create first."""
    plain = parse_config(config_text(tmp_path / "s" / "b.db", None), source="t", env={})
    named = parse_config(
        config_text(tmp_path / "b.db", None, extra=f'[gateway]\nrun_dir = "{tmp_path}/r"\n'),
        source="t",
        env={},
    )
    xdg = {"XDG_RUNTIME_DIR": "/run/user/1000"}
    assert control.run_dir(plain, {}) == tmp_path / "s" / "botmux-run"
    assert control.run_dir(plain, xdg) == Path("/run/user/1000/botmux")
    assert control.run_dir(named, xdg) == tmp_path / "r"
    assert control.run_dir(named, {**xdg, "BOTMUX_RUN_DIR": "/x"}) == Path("/x")
    assert control.open_run_dir(tmp_path / "s" / "botmux-run", create=False) is None
    fd = control.open_run_dir(tmp_path / "s" / "botmux-run", create=True)
    assert fd is not None
    os.close(fd)
    assert ((tmp_path / "s" / "botmux-run").stat().st_mode & 0o777) == 0o700
