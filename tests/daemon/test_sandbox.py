"""The bwrap sandbox on its own: real bwrap, real processes, no daemon."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward.types import OutputChunk
from shellwardd.config import Limits
from shellwardd.egress.policy import EgressPolicy
from shellwardd.errors import SandboxUnavailable
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from tests.helpers import host_processes, unique_sleep


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
    timeout: float = 20.0,
    network: EgressPolicy | None = None,
    limits: Limits | None = None,
    cap: int = 1 << 20,
    hidden: tuple[Path, ...] = (),
    chunks: list[OutputChunk] | None = None,
) -> ProcessOutcome:
    spec = SandboxSpec(
        command=command,
        workspace=workspace,
        cwd=workspace,
        env={},
        network=network,
        timeout=timeout,
        limits=limits or Limits(),
        output_cap=cap,
        hidden=hidden,
    )
    sink = chunks if chunks is not None else []
    return sandbox.run(spec, sink.append, threading.Event())


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on loopback, outside the sandbox."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def test_exit_code_and_streams(sandbox: Sandbox, workspace: Path) -> None:
    chunks: list[OutputChunk] = []
    outcome = run(sandbox, workspace, "echo out; echo err >&2; exit 7", chunks=chunks)
    assert outcome.started and outcome.exit_code == 7
    assert outcome.stdout.data == b"out\n" and outcome.stderr.data == b"err\n"
    assert b"".join(c.data for c in chunks if c.stream.value == "stdout") == b"out\n"


def test_workspace_is_writable_and_root_is_not(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, "echo hi > inside.txt && touch /usr/outside.txt")
    assert (workspace / "inside.txt").read_text() == "hi\n"
    assert outcome.exit_code != 0
    assert b"Read-only file system" in outcome.stderr.data
    assert not Path("/usr/outside.txt").exists()


def test_tmp_is_private(sandbox: Sandbox, workspace: Path) -> None:
    marker = Path("/tmp") / f"shellward-test-{os.getpid()}"
    run(sandbox, workspace, f"echo x > {marker}")
    assert not marker.exists()


def test_network_is_off_by_default(sandbox: Sandbox, workspace: Path, listener: int) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{listener} && echo connected"
    blocked = run(sandbox, workspace, connect)
    assert blocked.exit_code != 0 and b"connected" not in blocked.stdout.data
    # A call with network has its own namespace too: the host's loopback is not in it,
    # even when the operator allows loopback through the proxy.
    allowed = EgressPolicy(operator=frozenset({"127.0.0.1"}))
    granted = run(sandbox, workspace, connect, network=allowed)
    assert granted.exit_code != 0 and b"connected" not in granted.stdout.data


def test_timeout_kills_the_whole_tree(sandbox: Sandbox, workspace: Path) -> None:
    # The child writes its pid, then both sleep; nothing may survive the kill.
    sleep = unique_sleep(300)
    command = f"{sleep} & echo $! > child.pid; {sleep}"
    start = time.monotonic()
    outcome = run(sandbox, workspace, command, timeout=1.0)
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - start < 10
    # The child's pid is inside the namespace; look for that `sleep` left on the host.
    survivors = host_processes(sleep)
    assert not survivors, f"sleep children survived the timeout: {survivors}"


def test_output_cap_keeps_head_and_counts_all(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, "head -c 100000 /dev/zero", cap=1000)
    assert outcome.stdout.truncated
    assert len(outcome.stdout.data) == 1000 and outcome.stdout.total_bytes == 100000


def test_binary_output_survives(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, r"printf '\xff\xfe\x00\x01'")
    assert outcome.stdout.data == b"\xff\xfe\x00\x01"


def test_file_size_limit(sandbox: Sandbox, workspace: Path) -> None:
    limits = Limits(file_size_bytes=4096)
    outcome = run(sandbox, workspace, "head -c 100000 /dev/zero > big", limits=limits)
    assert outcome.exit_code != 0
    assert (workspace / "big").stat().st_size <= 4096


def test_cpu_limit(sandbox: Sandbox, workspace: Path) -> None:
    outcome = run(sandbox, workspace, "while :; do :; done", limits=Limits(cpu_seconds=1))
    assert not outcome.timed_out
    assert outcome.exit_code not in (0, None)  # killed by SIGXCPU/SIGKILL


def test_secrets_and_hidden_paths(
    workspace: Path, tmp_path: Path, host_dir: Path, request: pytest.FixtureRequest
) -> None:
    home = host_dir / "home"  # not under /tmp: the sandbox's own /tmp would hide it anyway
    (home / ".ssh").mkdir(parents=True)
    (home / "notes.txt").write_text("shown")
    (home / ".ssh" / "id_ed25519").write_text("secret")
    (home / ".netrc").write_text("machine x password y")
    state = tmp_path / "state"
    state.mkdir()
    (state / "ledger.sqlite3").write_text("ledger")
    box = Sandbox(home=home)
    box.check()
    request.addfinalizer(box.close)
    outcome = run(
        box,
        workspace,
        f"cat {home}/notes.txt {home}/.ssh/id_ed25519 {home}/.netrc {state}/ledger.sqlite3",
        hidden=(state,),
    )
    assert outcome.stdout.data.startswith(b"shown")  # the home itself is visible
    assert b"secret" not in outcome.stdout.data
    assert b"password" not in outcome.stdout.data
    assert b"ledger" not in outcome.stdout.data


def test_a_secret_created_after_start_is_hidden_from_the_next_call(
    workspace: Path, host_dir: Path, request: pytest.FixtureRequest
) -> None:
    # The hidden entries are made absolute once; which exist must be looked up per call.
    home = host_dir / "home"
    home.mkdir()
    box = Sandbox(home=home, hidden=(".aws", ".config/*token*", ".vault/**/key"))
    box.check()
    request.addfinalizer(box.close)
    deep = home / ".vault" / "a" / "b" / "key"
    show = f"cat {home}/.aws/credentials {home}/.config/.gh-token {deep} {home}/.config/plain"
    assert b"visible" not in run(box, workspace, show).stdout.data  # nothing exists yet
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws-secret")
    (home / ".config").mkdir()
    (home / ".config" / ".gh-token").write_text("gh-secret")  # a dot name matches `*token*`
    deep.parent.mkdir(parents=True)
    deep.write_text("vault-secret")  # `**` matches any depth
    (home / ".config" / "plain").write_text("visible")
    outcome = run(box, workspace, show)
    assert b"visible" in outcome.stdout.data  # the command did run and read
    assert b"aws-secret" not in outcome.stdout.data
    assert b"gh-secret" not in outcome.stdout.data
    assert b"vault-secret" not in outcome.stdout.data


def test_sandbox_failure_is_not_a_command_failure(sandbox: Sandbox, tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    spec = SandboxSpec("true", missing, missing, {}, None, 5.0, Limits(), 100)
    outcome = sandbox.run(spec, lambda chunk: None, threading.Event())
    assert not outcome.started and outcome.exit_code is None
    assert outcome.sandbox_error


def test_cancel_kills(sandbox: Sandbox, workspace: Path) -> None:
    cancel = threading.Event()
    spec = SandboxSpec("sleep 300", workspace, workspace, {}, None, 60.0, Limits(), 100)
    threading.Timer(0.5, cancel.set).start()
    outcome = sandbox.run(spec, lambda chunk: None, cancel)
    assert outcome.cancelled and outcome.exit_code is None


def test_without_bwrap_check_says_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("prlimit", "setpriv"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(SandboxUnavailable, match=r"bwrap\) is not installed.*--no-sandbox"):
        Sandbox().check()
    Sandbox(enabled=False).check()  # the explicit opt-out needs no bwrap
