"""Test helpers: a real daemon on a temporary Unix socket, with its own state dir."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

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
    # The line the daemon printed when it started listening.
    banner: str = ""

    def client(self, **kwargs: object) -> Client:
        return Client(self.socket, **kwargs)  # type: ignore[arg-type]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextlib.contextmanager
def daemon_under(root: Path) -> Iterator[Daemon]:
    """A daemon whose socket, state dir and (new, empty) workspace are under ``root``,
    killed when the block ends: one daemon shared by many tests."""
    workspace = root / "workspace"
    workspace.mkdir()
    handle = start_daemon(root / "run" / "shellward.sock", root / "state", workspace)
    try:
        yield handle
    finally:
        handle.stop(signal.SIGKILL)


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
    return Daemon(process, socket, state_dir, workspace, log, line.strip())


def wait_for(predicate: Callable[[], object], timeout: float = 20.0) -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not reached within {timeout}s")


def unique_sleep(seconds: int) -> str:
    """A `sleep` command line no other test process on this host runs (its pid in the
    fraction), for tests that look for survivors among all the host's processes."""
    return f"sleep {seconds}.{os.getpid():07d}"


def host_processes(cmdline: str) -> list[Path]:
    """Processes on the host whose argv is exactly ``cmdline`` split on spaces."""
    wanted = cmdline.replace(" ", "\x00") + "\x00"
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_text() == wanted:
                found.append(proc)
        except OSError:
            continue
    return found


def self_signed_certificate(where: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate (and its key) in ``where`` for ``name`` and 127.0.0.1."""
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name},IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key
