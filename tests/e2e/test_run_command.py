"""RunCommand end to end: a real daemon, a real socket, real bwrap, a real ledger."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from shellward import (
    CallAccepted,
    CallStatus,
    Client,
    Code,
    CommandResult,
    Idempotency,
    NotFound,
    OutputChunk,
    Stream,
)
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon, host_processes, start_daemon, unique_sleep, wait_for

SLEEP = unique_sleep(301)


@pytest.fixture(scope="module")
def daemon(module_daemon: Daemon) -> Daemon:
    """One daemon for the module: each test uses its own run ids and file names."""
    return module_daemon


@pytest.fixture
def workspace(daemon: Daemon) -> Path:
    return daemon.workspace


def test_success_is_recorded(client: Client, workspace: Path) -> None:
    result = client.run_command("echo hello", cwd=workspace)
    assert result.ok and result.code is Code.OK and result.exit_code == 0
    assert result.stdout.data == b"hello\n"
    assert result.status is CallStatus.SUCCEEDED
    assert result.content
    entry = client.get_call(result.call_id)
    assert entry.status is CallStatus.SUCCEEDED
    assert entry.command == "echo hello" and entry.cwd == str(workspace)
    assert entry.started_at is not None and entry.finished_at is not None
    assert entry.created_at <= entry.started_at <= entry.finished_at
    assert entry.stdout.data == b"hello\n" and entry.input_hash.startswith("sha256:")


def test_output_streams_while_the_command_runs(
    client: Client, workspace: Path, host_dir: Path
) -> None:
    # The command waits for a file the test writes only after it saw the first chunk:
    # without live streaming it would run into its timeout. (Outside the workspace: a
    # command may not see a file created in the workspace during its call.)
    command = f"echo ready; while [ ! -f {host_dir}/go ]; do sleep 0.05; done; echo finished"
    threads = set(threading.enumerate())
    events = client.stream_command(command, cwd=workspace, timeout=20)
    first = next(events)
    assert isinstance(first, CallAccepted) and first.call_id
    chunk = next(events)
    assert isinstance(chunk, OutputChunk) and chunk.data == b"ready\n"
    assert chunk.stream is Stream.STDOUT
    # The events are read on this thread: grpc starts no thread of its own to read them
    # (the client's channel is single-threaded for streams).
    assert set(threading.enumerate()) <= threads
    (host_dir / "go").write_text("")
    rest = list(events)
    result = rest[-1]
    assert isinstance(result, CommandResult) and result.ok
    assert result.call_id == first.call_id
    assert result.stdout.data == b"ready\nfinished\n"


def test_nonzero_exit(client: Client, workspace: Path) -> None:
    result = client.run_command("echo oops >&2; exit 3", cwd=workspace)
    assert not result.ok and result.code is Code.COMMAND_FAILED
    assert result.exit_code == 3 and result.stderr.data == b"oops\n"
    assert result.status is CallStatus.FAILED
    assert "status 3" in result.content


def test_timeout_kills_tree_and_is_uncertain(client: Client, workspace: Path) -> None:
    result = client.run_command(f"touch marker; {SLEEP} & {SLEEP}", cwd=workspace, timeout=1)
    assert result.idempotency is not Idempotency.IDEMPOTENT
    assert not result.ok and result.code is Code.SIDE_EFFECT_UNCERTAIN
    assert result.status is CallStatus.UNCERTAIN and not result.retryable
    assert result.exit_code is None
    assert "Do not retry automatically" in result.content
    assert not host_processes(SLEEP), "a sleep child survived the timeout"
    assert client.get_call(result.call_id).status is CallStatus.UNCERTAIN


def test_binary_output_survives(client: Client, workspace: Path) -> None:
    result = client.run_command(r"printf '\x00\xff\xfebin'", cwd=workspace)
    assert result.stdout.data == b"\x00\xff\xfebin"
    assert client.get_call(result.call_id).stdout.data == b"\x00\xff\xfebin"


def test_output_cap(tmp_path: Path) -> None:
    workspace = tmp_path / "capped"
    workspace.mkdir()
    daemon = start_daemon(
        tmp_path / "cap.sock", tmp_path / "cap-state", workspace, "--output-cap", "1000"
    )
    try:
        with daemon.client() as client:
            result = client.run_command("head -c 5000 /dev/zero", cwd=workspace)
        assert result.ok
        assert result.stdout.truncated and result.stdout.total_bytes == 5000
        assert len(result.stdout.data) == 1000
        assert result.stdout.sha256.startswith("sha256:")
    finally:
        daemon.stop()


@pytest.fixture
def loopback_listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def test_network_is_blocked(client: Client, workspace: Path, loopback_listener: int) -> None:
    command = f"exec 3<>/dev/tcp/127.0.0.1/{loopback_listener} && echo connected"
    result = client.run_command(command, cwd=workspace)
    assert not result.ok and b"connected" not in result.stdout.data


def test_write_outside_workspace_fails(client: Client, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    result = client.run_command(f"echo x > {outside}; echo y > /etc/shellward-x", cwd=workspace)
    assert not result.ok
    assert not outside.exists() and not Path("/etc/shellward-x").exists()


# --- bad input: a clear answer, the daemon keeps serving, nothing lost -----------------


@pytest.mark.parametrize(
    ("command", "kwargs", "code", "words"),
    [
        ("", {}, Code.INVALID_ARGUMENT, "empty"),
        ("   \n", {}, Code.INVALID_ARGUMENT, "empty"),
        ("echo " + "x" * 70_000, {}, Code.INVALID_ARGUMENT, "over the limit"),
        ("echo a\0b", {}, Code.INVALID_ARGUMENT, "NUL"),
        ("ls", {"cwd": "/etc"}, Code.PERMISSION_DENIED, "outside the daemon's workspaces"),
        ("ls", {"timeout": -1}, Code.INVALID_ARGUMENT, "timeout"),
        ("ls", {"timeout": 10**9}, Code.INVALID_ARGUMENT, "over the daemon's limit"),
        ("ls", {"env": {"A=B": "x"}}, Code.INVALID_ARGUMENT, "env entry"),
    ],
)
def test_bad_input_is_refused_and_recorded(
    client: Client, workspace: Path, command: str, kwargs: dict[str, object], code: Code, words: str
) -> None:
    before = client.run_command("echo before", cwd=workspace)
    kwargs.setdefault("cwd", workspace)
    result = client.run_command(command, **kwargs)  # type: ignore[arg-type]
    assert not result.ok and result.code is code
    assert words in result.content
    assert result.exit_code is None and not result.retryable
    entry = client.get_call(result.call_id)
    assert entry.status is CallStatus.FAILED and entry.started_at is None
    assert client.get_call(before.call_id).stdout.data == b"before\n"
    assert client.run_command("echo after", cwd=workspace).ok


def test_missing_cwd(client: Client, workspace: Path) -> None:
    result = client.run_command("ls", cwd=workspace / "nope")
    assert result.code is Code.INVALID_ARGUMENT and "does not exist" in result.content


def test_unknown_call_id(client: Client) -> None:
    with pytest.raises(NotFound, match="no call"):
        client.get_call("does-not-exist")


def test_client_disconnect_cancels_the_command(daemon: Daemon, workspace: Path) -> None:
    channel = grpc.insecure_channel(f"unix:{daemon.socket}")
    stub = pb_grpc.ShellwardStub(channel)
    call = stub.RunCommand(
        pb.RunCommandRequest(command="sleep 5; echo done > done.txt", cwd=str(workspace))
    )
    accepted = next(call).accepted
    call.cancel()
    channel.close()
    with daemon.client() as client:
        wait_for(lambda: client.get_call(accepted.call_id).status.is_final)
        entry = client.get_call(accepted.call_id)
        # Killed while it ran (uncertain: it may write), or before it started (failed).
        assert entry.status in (CallStatus.UNCERTAIN, CallStatus.FAILED)
        assert "went away" in entry.note + entry.content
        assert not (workspace / "done.txt").exists()
        assert client.status().running_calls == 0


# --- identity ---------------------------------------------------------------------------


def test_same_step_after_success_replays_without_running(client: Client, workspace: Path) -> None:
    first = client.run_command("echo x >> log.txt", cwd=workspace, run_id="r1", step_id="s1")
    again = client.run_command("echo x >> log.txt", cwd=workspace, run_id="r1", step_id="s1")
    assert first.ok and again.ok and again.replayed and not first.replayed
    assert again.call_id == first.call_id and again.started_at == first.started_at
    assert (workspace / "log.txt").read_text() == "x\n"


def test_same_step_different_input_is_a_mismatch(client: Client, workspace: Path) -> None:
    client.run_command("echo a", cwd=workspace, run_id="r2", step_id="s1")
    other = client.run_command("echo b", cwd=workspace, run_id="r2", step_id="s1")
    assert other.code is Code.IDEMPOTENCY_KEY_MISMATCH and not other.ok
    assert other.stdout.data == b""


def test_duplicate_of_a_running_call_is_not_started_twice(
    client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    # The go signal comes from outside the workspace (a command sees the host read-only);
    # the command's own writes are staged until it exits.
    command = f"echo run >> runs.txt; while [ ! -f {host_dir}/go ]; do sleep 0.05; done"
    results: list[CommandResult] = []
    first = threading.Thread(
        target=lambda: results.append(
            client.run_command(command, cwd=workspace, run_id="r3", step_id="s1", timeout=30)
        )
    )
    first.start()
    wait_for(lambda: any((daemon.state_dir / "staging").glob("*/upper/runs.txt")))
    second = client.run_command(command, cwd=workspace, run_id="r3", step_id="s1")
    assert second.code is Code.IN_PROGRESS and second.retryable
    (host_dir / "go").write_text("")
    first.join(timeout=30)
    assert results and results[0].ok
    assert (workspace / "runs.txt").read_text() == "run\n"
