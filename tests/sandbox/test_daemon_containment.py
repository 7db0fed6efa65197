"""Containment through a real daemon: limits merging, status, and a daemon killed mid-call."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import grpc

from shellward import Client, ShellwardError
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon, host_processes, start_daemon, unique_sleep, wait_for


def _run_raw(daemon: Daemon, request: pb.RunCommandRequest) -> pb.CommandResult:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        events = list(pb_grpc.ShellwardStub(channel).RunCommand(request))
    return next(e.result for e in events if e.HasField("result"))


def test_request_limits_only_lower_and_keep_the_operators(tmp_path: Path, workspace: Path) -> None:
    daemon = start_daemon(
        tmp_path / "s.sock", tmp_path / "state", workspace, "--limit-memory", str(1 << 30)
    )
    try:
        # One limit asked for: the others stay the operator's (was: built-in 16 GiB).
        lowered = _run_raw(
            daemon,
            pb.RunCommandRequest(
                command="ulimit -v; ulimit -t",
                cwd=str(workspace),
                limits=pb.ResourceLimits(cpu_seconds=100),
            ),
        )
        assert lowered.stdout.data == b"1048576\n100\n"
        # Asking for more than the operator allows gets the operator's limit.
        raised = _run_raw(
            daemon,
            pb.RunCommandRequest(
                command="ulimit -v",
                cwd=str(workspace),
                limits=pb.ResourceLimits(address_space_bytes=1 << 62),
            ),
        )
        assert raised.stdout.data == b"1048576\n"
    finally:
        daemon.stop()


def test_status_shows_the_containment(client: Client) -> None:
    controls = {c.control: c.state for c in client.status().containment}
    assert controls["capabilities"].startswith("none")
    assert "refused" in controls["seccomp"]
    assert "bytes each" in controls["tmpfs"]
    assert ".claude" in controls["hidden"] and ".ssh" in controls["hidden"]
    assert controls[".git"] == "hooks and config read-only"


def _kill_right_after_spawn(daemon: Daemon, command: str, cwd: Path) -> None:
    """Start ``command`` and SIGKILL the daemon as soon as its first child appears."""
    client = daemon.client()

    def call() -> None:
        with contextlib.suppress(ShellwardError):  # the daemon dies under the call on purpose
            client.run_command(command, cwd=cwd, timeout=120)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    tasks = Path(f"/proc/{daemon.process.pid}/task")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(_children(task) for task in tasks.iterdir()):
            break
    daemon.stop(signal.SIGKILL)
    worker.join(timeout=10)
    client.close()


def test_daemon_killed_right_after_spawn_leaves_nothing_running(
    tmp_path: Path, workspace: Path
) -> None:
    # Before bwrap arms its own parent-death signal; the restarted daemon must end what is
    # left (on the code before, 12 of 30 tries left the sandbox running).
    socket, state = tmp_path / "s.sock", tmp_path / "state"
    for marker in map(unique_sleep, (181, 182, 183)):
        _kill_right_after_spawn(start_daemon(socket, state, workspace), marker, workspace)
        restarted = start_daemon(socket, state, workspace)
        try:
            wait_for(lambda m=marker: not host_processes(m), timeout=10)  # type: ignore[misc]
        finally:
            restarted.stop()


def _children(task: Path) -> str:
    """A thread's child pids; "" for a thread that ended while we looked."""
    try:
        return (task / "children").read_text().strip()
    except FileNotFoundError:
        return ""
