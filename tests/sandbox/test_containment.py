"""Red-team tests of the sandbox on its own: what a hostile command tries, and must fail at.

Each test runs as whoever runs pytest (root in CI: the case that matters most, since a
root daemon's sandbox used to keep every capability); ``test_unprivileged.py`` repeats a
few of them with the daemon as an ordinary user.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellwardd.config import Limits
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from shellwardd.sandbox.cgroup import Cgroups
from tests.helpers import host_processes, unique_sleep, wait_for

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    box.check()
    yield box
    box.close()


def run(
    sandbox: Sandbox,
    workspace: Path,
    command: str,
    *,
    env: dict[str, str] | None = None,
    limits: Limits | None = None,
    timeout: float = 30.0,
) -> ProcessOutcome:
    spec = SandboxSpec(
        command, workspace, workspace, env or {}, None, timeout, limits or Limits(), 1 << 20
    )
    return sandbox.run(spec, lambda chunk: None, threading.Event())


def out(outcome: ProcessOutcome) -> str:
    return outcome.stdout.text + outcome.stderr.text


# --- finding 1: the request's environment stays inside ---------------------------------


def test_ld_preload_from_the_request_never_runs_outside(
    sandbox: Sandbox, workspace: Path, tmp_path: Path
) -> None:
    # The constructor appends to a file outside the workspace. Inside the sandbox that
    # path is on the private /tmp (gone afterwards), so the marker appears on the host
    # only if prlimit or bwrap (host processes) loaded the library.
    marker = tmp_path / "preloaded-outside"
    (workspace / "evil.c").write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void hit(void) {\n"
        f'  FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("x", f); fclose(f); }}\n'
        "}\n"
    )
    built = run(sandbox, workspace, "gcc -shared -fPIC -o evil.so evil.c")
    assert built.exit_code == 0, out(built)
    outcome = run(
        sandbox, workspace, "echo $FOO", env={"LD_PRELOAD": f"{workspace}/evil.so", "FOO": "bar"}
    )
    assert outcome.exit_code == 0 and outcome.stdout.text == "bar\n", out(outcome)
    assert not marker.exists(), "the request's LD_PRELOAD ran in a process outside the sandbox"


def test_request_env_is_not_on_any_host_command_line(sandbox: Sandbox, workspace: Path) -> None:
    # /proc/*/cmdline is world-readable: a token in the request's env must not be there.
    secret = f"tok-{os.getpid()}-{time.monotonic_ns()}"
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for proc in Path("/proc").iterdir():
                try:
                    if proc.name.isdigit() and secret in (proc / "cmdline").read_text():
                        seen.append(proc.name)
                except OSError:
                    continue

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        outcome = run(sandbox, workspace, 'sleep 1; echo "$TOKEN"', env={"TOKEN": secret})
    finally:
        done.set()
        watcher.join()
    assert outcome.stdout.text == f"{secret}\n"
    assert not seen, f"the request's env was on the command line of {seen}"


# --- finding 2: no capabilities, whoever runs the daemon --------------------------------


def test_no_capabilities_inside(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status")
    lines = dict(line.split(":\t") for line in outcome.stdout.text.splitlines())
    assert set(lines.values()) == {"0000000000000000"}, lines


def test_cannot_remount_the_root_writable(sandbox: Sandbox, workspace: Path) -> None:
    target = Path("/etc") / f"shellward-escape-{os.getpid()}"
    outcome = run(sandbox, workspace, f"mount -o remount,rw,bind / && touch {target}")
    assert outcome.exit_code != 0
    assert not target.exists()


def test_cannot_unmount_a_hidden_secret(
    workspace: Path, host_dir: Path, request: pytest.FixtureRequest
) -> None:
    home = host_dir / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    box = Sandbox(home=home)
    box.check()
    request.addfinalizer(box.close)
    outcome = run(box, workspace, f"umount {home}/.ssh; umount -l {home}/.ssh; cat {home}/.ssh/*")
    assert "PRIVATE KEY" not in outcome.stdout.text


def test_cannot_unmount_proc_to_see_host_processes(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, "umount -l /proc; ls /proc | grep -c '^[0-9]'")
    assert int(outcome.stdout.text.strip() or 0) < 10, out(outcome)


@pytest.mark.skipif(not ROOT, reason="/etc/shadow is unreadable to a non-root daemon anyway")
def test_root_only_files_are_unreadable(sandbox: Sandbox, workspace: Path) -> None:
    assert Path("/etc/shadow").read_text()  # readable here: the daemon is root
    outcome = run(sandbox, workspace, "cat /etc/shadow")
    assert outcome.exit_code != 0 and not outcome.stdout.data, out(outcome)


def test_no_new_user_namespace(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, "unshare -U true && echo escaped; unshare -Ur id")
    assert "escaped" not in outcome.stdout.text and "uid=0" not in outcome.stdout.text


@pytest.mark.parametrize(
    "syscall",
    [
        "keyctl(0, 0)",  # KEYCTL_GET_KEYRING_ID
        "bpf(0, 0, 0)",
        "perf_event_open(0, 0, -1, -1, 0)",
        "userfaultfd(0)",
        "io_uring_setup(1, 0)",
    ],
)
def test_refused_syscalls(sandbox: Sandbox, workspace: Path, syscall: str) -> None:
    name, _, args = syscall.partition("(")
    script = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"nr = {{'keyctl': 250, 'bpf': 321, 'perf_event_open': 298, 'userfaultfd': 323, "
        f"'io_uring_setup': 425}}['{name}']\n"
        f"r = libc.syscall(nr, {args.rstrip(')')})\n"
        "print(r, os.strerror(ctypes.get_errno()))\n"
    )
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers above are x86-64's")
    outcome = run(sandbox, workspace, f'python3 -c "{script}"')
    assert outcome.stdout.text.strip() == "-1 Operation not permitted", out(outcome)


def test_workspace_stays_writable_and_files_keep_their_owner(
    sandbox: Sandbox, workspace: Path
) -> None:
    (workspace / "old.txt").write_text("x")
    outcome = run(sandbox, workspace, "echo y >> old.txt && echo new > new.txt && mkdir d")
    assert outcome.exit_code == 0, out(outcome)
    owner = workspace.stat().st_uid
    assert (workspace / "old.txt").read_text() == "xy\n"
    assert {(workspace / name).stat().st_uid for name in ("new.txt", "d")} == {owner}


# --- finding 3: no process outlives its call -------------------------------------------


def _no_survivor(cmdline: str) -> None:
    wait_for(lambda: not host_processes(cmdline), timeout=10)


def test_double_fork_and_setsid_do_not_outlive_a_timeout(sandbox: Sandbox, workspace: Path) -> None:
    sleeps = [unique_sleep(n) for n in (171, 172, 173)]
    outcome = run(sandbox, workspace, "(setsid {} &) ; nohup {} & {}".format(*sleeps), timeout=1.0)
    assert outcome.timed_out
    for cmdline in sleeps:
        _no_survivor(cmdline)


def test_without_cgroups_a_timeout_still_ends_everything(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # Where the daemon may create no cgroup, killing the namespace's init (by pidfd) ends
    # every process in it.
    monkeypatch.setattr(Cgroups, "detect", classmethod(lambda cls, state_dir: None))
    box = Sandbox()
    box.check()
    request.addfinalizer(box.close)
    controls = {c.control: c.state for c in box.containment(Limits())}
    assert controls["processes"].startswith("rlimits only")
    sleeps = [unique_sleep(n) for n in (193, 194, 195)]
    outcome = run(box, workspace, "(setsid {} &); nohup {} & {}".format(*sleeps), timeout=1)
    assert outcome.timed_out
    for cmdline in sleeps:
        _no_survivor(cmdline)


def test_leftover_call_cgroups_are_killed_at_start_up(tmp_path: Path) -> None:
    # What a crashed daemon leaves: a process in one of its call cgroups.
    cgroups = Cgroups.detect(tmp_path / "state")
    if cgroups is None:
        pytest.skip("no cgroup v2 the tests may create here")
    cgroup = cgroups.create("crashed", 0, 0)
    joins = cgroup.join_files()

    def join() -> None:
        for procs in joins:
            Path(procs).write_text("0")

    orphan = subprocess.Popen(["sleep", "175"], preexec_fn=join)
    try:
        successor = Cgroups.detect(tmp_path / "state")
        assert successor is not None
        assert successor.reap() == 1
        assert orphan.wait(timeout=10) == -9
        assert not any(path.exists() for path in cgroup.paths)
    finally:
        orphan.kill()
        successor.close()


# --- finding 4: limits -----------------------------------------------------------------


FORK_60 = (
    "import os, time\n"
    "n = 0\n"
    "try:\n"
    "    while n < 60:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30)\n"
    "            os._exit(0)\n"
    "        n += 1\n"
    "except OSError:\n"
    "    pass\n"
    "print(n)\n"
)


def test_process_limit_binds_root_too(sandbox: Sandbox, workspace: Path) -> None:
    # RLIMIT_NPROC does not bind root; the call's pids cgroup does.
    (workspace / "fork.py").write_text(FORK_60)
    outcome = run(sandbox, workspace, "python3 fork.py", limits=Limits(max_processes=20))
    assert outcome.exit_code == 0, out(outcome)
    assert int(outcome.stdout.text.strip()) < 20, out(outcome)


def test_one_calls_processes_do_not_count_against_another_calls_limit(
    sandbox: Sandbox, workspace: Path
) -> None:
    # Every call of a root daemon runs as the same sandbox user. RLIMIT_NPROC counts all of
    # that user's processes on the host, so with it a call's small limit was eaten by
    # another call's processes; the call's pids cgroup counts its own only.
    controls = {c.control: c.state for c in sandbox.containment(Limits())}
    if "pids" not in controls["processes"]:
        pytest.skip("no pids cgroup per call here: RLIMIT_NPROC is the only bound")
    sleep = unique_sleep(61)
    busy = threading.Thread(
        target=run, args=(sandbox, workspace, " & ".join([sleep] * 12) + " & wait"),
        kwargs={"timeout": 8.0}, daemon=True,
    )  # fmt: skip
    busy.start()
    try:
        wait_for(lambda: len(host_processes(sleep)) == 12, timeout=10)
        outcome = run(sandbox, workspace, "true; true", limits=Limits(max_processes=6))
        assert outcome.exit_code == 0, out(outcome)
    finally:
        for proc in host_processes(sleep):
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), 9)
        busy.join(10)


def test_memory_limit_binds_the_whole_call(sandbox: Sandbox, workspace: Path) -> None:
    # Four processes of 48 MiB each: under RLIMIT_AS (per process, 16 GiB) each is fine;
    # the call's cgroup (64 MiB for all of them) is not.
    controls = {c.control: c.state for c in sandbox.containment(Limits())}
    if "memory" not in controls["processes"]:
        pytest.skip("no memory controller the daemon may use here")
    command = (
        "for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(48 << 20); "
        "b[::4096] = bytes(len(b) // 4096); time.sleep(3)' & done; wait; echo done"
    )
    outcome = run(sandbox, workspace, command, limits=Limits(memory_bytes=64 << 20))
    assert "Killed" in outcome.stderr.text or "MemoryError" in outcome.stderr.text, out(outcome)


@pytest.mark.skipif(not ROOT, reason="only root can give the workspace to another user")
def test_root_daemon_writes_as_the_workspace_owner(sandbox: Sandbox, workspace: Path) -> None:
    os.chown(workspace, 12345, 12345)
    (workspace / "theirs.txt").write_text("x")
    os.chown(workspace / "theirs.txt", 12345, 12345)
    outcome = run(sandbox, workspace, "echo y >> theirs.txt && echo new > new.txt && id -u")
    assert outcome.exit_code == 0, out(outcome)
    assert (workspace / "theirs.txt").read_text() == "xy\n"
    assert (workspace / "new.txt").stat().st_uid == 12345


@pytest.mark.skipif(not ROOT, reason="only a root daemon runs commands as another uid")
def test_unreachable_workspace_is_a_clear_error(sandbox: Sandbox, host_dir: Path) -> None:
    private = host_dir / "private"
    (private / "ws").mkdir(parents=True)
    private.chmod(0o700)
    outcome = run(sandbox, private / "ws", "echo ran")
    assert not outcome.started and "ran" not in outcome.stdout.text
    assert "cannot reach" in outcome.sandbox_error and "chmod o+x" in outcome.sandbox_error


@pytest.mark.parametrize("where", ["/tmp", "/var/tmp"])
def test_tmp_is_bounded(sandbox: Sandbox, workspace: Path, where: str) -> None:
    limits = Limits(tmp_bytes=4 << 20)
    outcome = run(
        sandbox,
        workspace,
        f"head -c 16M /dev/zero > {where}/fill; du -k {where}/fill",
        limits=limits,
    )
    assert outcome.exit_code != 0 or "No space" in outcome.stderr.text
    assert int(outcome.stdout.text.split()[0]) <= 4 * 1024, out(outcome)
