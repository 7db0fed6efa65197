"""Shared fixtures: a real daemon on a temporary Unix socket, with its own state dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shellward import Client

STARTUP_TIMEOUT = 30.0


@dataclass
class Daemon:
    """A running ``shellwardd`` process and where it keeps things."""

    process: subprocess.Popen[str]
    socket: Path
    state_dir: Path
    workspace: Path
    log: Path
    extra_args: Sequence[str] = field(default_factory=tuple)

    def client(self, **kwargs: object) -> Client:
        return Client(self.socket, **kwargs)  # type: ignore[arg-type]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_daemon(
    socket: Path,
    state_dir: Path,
    workspace: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> Daemon:
    """Start ``shellwardd`` and wait until it prints that it listens."""
    log = state_dir.parent / f"{state_dir.name}-stderr.log"
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}
    full_env.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable, "-m", "shellwardd.main",
            "--socket", str(socket),
            "--state-dir", str(state_dir),
            "--workspace", str(workspace),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=full_env,
    )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + STARTUP_TIMEOUT
    line = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "listening on" in line or process.poll() is not None:
            break
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"shellwardd did not start: {line!r}\n{log.read_text()}")
    return Daemon(process, socket, state_dir, workspace, log, args)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def daemon(tmp_path: Path, workspace: Path) -> Iterator[Daemon]:
    handle = start_daemon(tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace)
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    with daemon.client() as c:
        yield c
