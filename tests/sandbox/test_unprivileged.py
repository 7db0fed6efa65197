"""A few containment tests again, with the daemon running as an ordinary user.

The user is created once per session with ``useradd`` (so the tests need root to set up,
and are skipped otherwise: then the whole suite already runs unprivileged).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client
from shellward.types import Code
from tests.helpers import host_processes, unique_sleep, wait_for

USER = "shellward-redteam"
ROOT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("creating the test user needs root")
    # Under a lock: test processes running at once (pytest -n) would race to create it,
    # and the loser's useradd fails.
    with open(Path(tempfile.gettempdir()) / f"{USER}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(USER)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", USER], check=True)
            return pwd.getpwnam(USER)


def _python_for(user: pwd.struct_passwd, env: dict[str, str]) -> list[str]:
    """How the test user starts the daemon with this environment's packages: this interpreter if
    the user can reach it, else the system's python3 of the same version with this
    environment's site-packages (a pyenv under a 0700 /root is out of the user's reach)."""
    as_user = ["setpriv", "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid),
               "--init-groups", "--"]  # fmt: skip
    probe = subprocess.run([*as_user, sys.executable, "-c", "pass"], env=env, check=False)
    if probe.returncode == 0:
        return [sys.executable, "-m", "shellwardd.main"]
    system = Path("/usr/bin/python3")
    version = f"import sys; sys.exit(sys.version_info[:2] != {tuple(sys.version_info[:2])})"
    if subprocess.run([*as_user, str(system), "-c", version], env=env, check=False).returncode:
        pytest.fail(
            f"the test user cannot run {sys.executable}, and {system} is not Python "
            f"{sys.version_info.major}.{sys.version_info.minor}: give the user a way to run "
            "this environment's interpreter"
        )
    packages = sysconfig.get_paths()["purelib"]
    bootstrap = (
        f"import runpy, site; site.addsitedir({packages!r}); "
        "runpy.run_module('shellwardd.main', run_name='__main__', alter_sys=True)"
    )
    return [str(system), "-c", bootstrap]


@pytest.fixture(scope="module")
def user_daemon(user: pwd.struct_passwd) -> Iterator[tuple[Client, Path]]:
    home = Path(user.pw_dir)
    base = home / f"t{os.getpid()}"
    workspace = base / "workspace"
    workspace.mkdir(parents=True)
    shutil.chown(base, user.pw_uid, user.pw_gid)
    shutil.chown(workspace, user.pw_uid, user.pw_gid)
    socket = base / "s.sock"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": f"{ROOT_DIR / 'daemon'}:{ROOT_DIR / 'client'}",
    }
    process = subprocess.Popen(
        [
            "setpriv", "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid),
            "--init-groups", "--",
            *_python_for(user, env), "--socket", str(socket),
            "--state-dir", str(base / "state"), "--workspace", str(workspace),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=workspace,
    )  # fmt: skip
    assert process.stdout is not None
    lines = [process.stdout.readline()]  # log lines may come first
    while "listening on" not in lines[-1] and lines[-1] and len(lines) < 50:
        lines.append(process.stdout.readline())
    assert "listening on" in lines[-1], "".join(lines)
    client = Client(socket)
    yield client, workspace
    client.close()
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(base, ignore_errors=True)


def test_runs_as_the_user_without_capabilities(user_daemon: tuple[Client, Path]) -> None:
    client, workspace = user_daemon
    result = client.run_command(
        "grep CapEff /proc/self/status; mount -o remount,rw,bind / && echo remounted;"
        " unshare -U true && echo unshared; cat /etc/shadow",
        cwd=workspace,
    )
    assert "CapEff:\t0000000000000000" in result.stdout.text
    assert "remounted" not in result.stdout.text and "unshared" not in result.stdout.text
    assert "root:" not in result.stdout.text


def test_ld_preload_stays_inside(user_daemon: tuple[Client, Path]) -> None:
    client, workspace = user_daemon
    # /tmp is private inside the sandbox: the marker appears on the host only if a host
    # process (setpriv, prlimit, bwrap) loaded the library.
    marker = Path("/tmp") / f"shellward-preloaded-{os.getpid()}"
    (workspace / "evil.c").write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void hit(void) {\n"
        f'  FILE *f = fopen("{marker}", "a"); if (f) fclose(f);\n}}\n'
    )
    assert client.run_command("gcc -shared -fPIC -o evil.so evil.c", cwd=workspace).ok
    pending = client.run_command(
        "echo $FOO", cwd=workspace, env={"LD_PRELOAD": f"{workspace}/evil.so", "FOO": "bar"}
    )
    # The classifier asks a human first (LD_PRELOAD changes what a program does); approved,
    # the call runs, and the library is loaded inside only.
    assert pending.code is Code.NEEDS_APPROVAL, pending.content
    client.approve(pending.call_id)
    result = client.wait_call(pending.call_id)
    assert result.stdout.text == "bar\n", result.content
    assert not marker.exists(), "the request's LD_PRELOAD ran outside the sandbox"


def test_timeout_leaves_nothing_running(user_daemon: tuple[Client, Path]) -> None:
    client, workspace = user_daemon
    outer, inner = unique_sleep(191), unique_sleep(192)
    result = client.run_command(f"(setsid {outer} &); {inner}", cwd=workspace, timeout=1)
    assert not result.ok
    wait_for(lambda: not host_processes(outer) and not host_processes(inner))


def test_status_says_rlimits_or_cgroup(user_daemon: tuple[Client, Path]) -> None:
    client, _ = user_daemon
    controls = {c.control: c.state for c in client.status().containment}
    assert controls["capabilities"].startswith("none")
    assert controls["user namespace"].startswith("yes")


def test_staged_writes_commit_and_leave_nothing_behind(user_daemon: tuple[Client, Path]) -> None:
    # Mounted in a user namespace (userxattr): whiteouts and overlayfs's mode-000 work dir
    # belong to the daemon's user, who must still commit and clean them up.
    client, workspace = user_daemon
    (workspace / "old.txt").write_text("old\n")
    result = client.run_command("echo new > new.txt && rm old.txt", cwd=workspace)
    assert result.ok, result.content
    assert {e.path for e in result.file_effects} == {"new.txt", "old.txt"}
    assert (workspace / "new.txt").read_text() == "new\n"
    assert not (workspace / "old.txt").exists()
    staging = workspace.parent / "state" / "staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    # Removed off the call's path, but removed: mode-000 work dir and all.
    trash = workspace.parent / "state" / "staging.discarded"
    wait_for(lambda: not trash.exists() or list(trash.iterdir()) == [])
    controls = {c.control: c.state for c in client.status().containment}
    assert "in a user namespace" in controls["workspace writes"]
