"""Shared fixtures: a workspace, a real daemon on a temporary socket, a client for it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client
from tests.helpers import Daemon, daemon_under, start_daemon
from tests.postgres import PostgresServer, start_postgres, unavailable


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


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for every test of a module: its start-up is most of a short end-to-end
    test's time. A module whose tests need neither a fresh daemon nor an empty ledger or
    workspace (each uses its own run ids and file names) opts in by overriding ``daemon``
    with this one and ``workspace`` with its workspace."""
    with daemon_under(tmp_path_factory.mktemp("daemon")) as handle:
        yield handle


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    with daemon.client() as c:
        yield c


@contextlib.contextmanager
def _host_directory() -> Iterator[Path]:
    parent = Path("/var/lib") if os.geteuid() == 0 else Path.home()
    path = Path(tempfile.mkdtemp(prefix="shellward-test-", dir=parent))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory the sandbox sees as it is on the host: not under /tmp or /var/tmp
    (private tmpfs inside), and reachable by a root daemon's unprivileged sandbox user."""
    with _host_directory() as path:
        yield path


@pytest.fixture(scope="module")
def module_host_dir() -> Iterator[Path]:
    """``host_dir`` for all the tests of a module."""
    with _host_directory() as path:
        yield path


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | None]:
    """One PostgreSQL server for the session (None when it cannot start; see ``pg_url``)."""
    try:
        server = start_postgres()
    except RuntimeError as exc:
        _POSTGRES_PROBLEM.append(str(exc))
        yield None
        return
    yield server
    server.stop()


_POSTGRES_PROBLEM: list[str] = []


@pytest.fixture
def pg_url(postgres_server: PostgresServer | None) -> str:
    """A fresh database on the session's PostgreSQL server."""
    if postgres_server is None:
        unavailable(_POSTGRES_PROBLEM[0])
    return postgres_server.new_database()
