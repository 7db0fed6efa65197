"""Shared fixtures: a workspace, a real daemon on a temporary socket, a client for it."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client
from tests.helpers import Daemon, start_daemon


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


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory the sandbox sees as it is on the host: not under /tmp or /var/tmp
    (private tmpfs inside), and reachable by a root daemon's unprivileged sandbox user."""
    parent = Path("/var/lib") if os.geteuid() == 0 else Path.home()
    path = Path(tempfile.mkdtemp(prefix="shellward-test-", dir=parent))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
