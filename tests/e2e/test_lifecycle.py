"""The daemon's own life cycle: one daemon per state dir, private state, a socket directory
nobody else controls, clean start-up failures, and a ledger another process holds."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward.types import Code
from shellwardd.config import load_config
from shellwardd.main import EXIT_CONFIG, EXIT_STATE, Daemon
from shellwardd.statedir import StateDirLock
from tests.helpers import start_daemon

TEST_USER = "shellward-test"


def _daemon_argv(socket: Path, state: Path, workspace: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "shellwardd.main", "--socket", str(socket),
            "--state-dir", str(state), "--workspace", str(workspace), *args]  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="session")
def other_user() -> Iterator[pwd.struct_passwd]:
    """An unprivileged local user (created for the test run when missing)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create another user")
    try:
        yield pwd.getpwnam(TEST_USER)
        return
    except KeyError:
        pass
    subprocess.run(["useradd", "--system", "--no-create-home", TEST_USER], check=True)
    yield pwd.getpwnam(TEST_USER)


def test_a_second_daemon_on_the_same_state_dir_is_refused(tmp_path: Path, workspace: Path) -> None:
    state = tmp_path / "state"
    first = start_daemon(tmp_path / "a" / "s.sock", state, workspace)
    try:
        second = subprocess.run(
            _daemon_argv(tmp_path / "b" / "s.sock", state, workspace),
            capture_output=True, text=True, timeout=60, env=_env(),
        )  # fmt: skip
        assert second.returncode == EXIT_STATE, second.stderr
        assert f"another shellwardd (pid {first.process.pid})" in second.stderr
        assert "Traceback" not in second.stderr
        with first.client() as client:
            assert client.status()
    finally:
        first.stop()
    # The lock dies with its holder: the state dir can be used again.
    again = start_daemon(tmp_path / "c" / "s.sock", state, workspace)
    again.stop()


def test_state_is_private_whatever_the_umask(tmp_path: Path, workspace: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (state / "ledger.sqlite3").touch(mode=0o644)  # as an older daemon left it
    previous = os.umask(0)
    try:
        daemon = start_daemon(tmp_path / "run" / "s.sock", state, workspace)
    finally:
        os.umask(previous)
    try:
        with daemon.client() as client:
            assert client.run_command("echo hi", cwd=workspace).ok
    finally:
        daemon.stop()
    assert _mode(state) == 0o700
    for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "daemon.log", "daemon.lock"):
        path = state / name
        if path.exists():
            assert _mode(path) == 0o600, name
    assert _mode(tmp_path / "run") == 0o700


def test_a_socket_dir_of_another_user_is_refused(
    tmp_path: Path, workspace: Path, other_user: pwd.struct_passwd
) -> None:
    socket_dir = tmp_path / "run"
    socket_dir.mkdir(mode=0o700)
    os.chown(socket_dir, other_user.pw_uid, other_user.pw_gid)
    run = subprocess.run(
        _daemon_argv(socket_dir / "s.sock", tmp_path / "state", workspace),
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert run.returncode == EXIT_CONFIG, run.stderr
    assert f"belongs to uid {other_user.pw_uid}" in run.stderr
    assert not (socket_dir / "s.sock").exists()


def test_a_socket_dir_others_can_write_is_refused(tmp_path: Path, workspace: Path) -> None:
    socket_dir = tmp_path / "run"
    socket_dir.mkdir()
    os.chmod(socket_dir, 0o777)
    run = subprocess.run(
        _daemon_argv(socket_dir / "s.sock", tmp_path / "state", workspace),
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert run.returncode == EXIT_CONFIG, run.stderr
    assert "writable by others" in run.stderr and "chmod 700" in run.stderr


def test_a_read_only_state_dir_is_a_clean_error(tmp_path: Path, workspace: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private mount namespace (unshare -m) for a read-only mount")
    argv = " ".join(_daemon_argv(tmp_path / "run" / "s.sock", state, workspace))
    run = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f"mount --bind {state} {state} && mount -o remount,bind,ro {state} && exec {argv}"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert run.returncode == EXIT_STATE, run.stderr
    assert f"cannot use the state directory {state}" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_failed_start_up_closes_what_it_opened(tmp_path: Path, workspace: Path) -> None:
    tools = tmp_path / "tools.toml"
    tools.write_text("this is [not toml\n")
    state = tmp_path / "state"
    config = load_config(
        ["--socket", str(tmp_path / "run" / "s.sock"), "--state-dir", str(state),
         "--workspace", str(workspace), "--tools-config", str(tools)],
        env={},
    )  # fmt: skip
    # Threads of this test process that earlier tests started (the MCP clients' shared loop,
    # `shellward-mcp`, lives as long as the process) are not the daemon's to stop.
    before = set(threading.enumerate())
    assert Daemon(config).run() == EXIT_CONFIG
    # The write detectors started before the tools failed are stopped, and the state
    # directory is free again.
    left = [t.name for t in threading.enumerate() if t not in before]
    assert not [name for name in left if name.startswith("shellward-")]
    StateDirLock(state).close()


def test_a_busy_ledger_answers_unavailable_and_the_daemon_keeps_serving(
    tmp_path: Path, workspace: Path
) -> None:
    daemon = start_daemon(tmp_path / "run" / "s.sock", tmp_path / "state", workspace)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys, time\n"
         "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(6.5)\n"
         "db.execute('ROLLBACK')",
         str(tmp_path / "state" / "ledger.sqlite3")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with daemon.client() as client:
            busy = client.run_command("touch ran", cwd=workspace)
            assert (busy.ok, busy.code, busy.retryable) == (False, Code.UNAVAILABLE, True)
            assert "Nothing ran" in busy.content
            assert not (workspace / "ran").exists()
            assert holder.wait(timeout=30) == 0
            time.sleep(1.5)  # a tick of the main loop meets the ledger free again
            assert daemon.process.poll() is None, daemon.logs()
            assert client.run_command("touch ran", cwd=workspace).ok
            assert (workspace / "ran").exists()
    finally:
        holder.kill()
        daemon.stop(signal.SIGTERM)
