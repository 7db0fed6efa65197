"""A real, throw-away PostgreSQL server for the tests: initdb into a temporary directory,
listening on a Unix socket only (no TCP), run as the ``postgres`` user when we are root
(PostgreSQL refuses to run as root). ``make test`` installs Debian's ``postgresql``.

Without PostgreSQL the tests that need it are skipped, except in CI (``CI=true``), where a
server that cannot start fails them loudly: the fleet must be tested there.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest

START_TIMEOUT = 60.0


@dataclass
class PostgresServer:
    process: subprocess.Popen[bytes]
    base: Path

    @property
    def socket_dir(self) -> Path:
        return self.base / "socket"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def _bin_dir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def start_postgres(*, durable: bool = False) -> PostgresServer:
    """Start a server, or raise RuntimeError saying why it cannot. Not ``durable``: no
    fsync (the tests' data is thrown away); the benchmarks ask for a durable one."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL is not installed (initdb not found); `make test` installs it"
        )
    base = Path(tempfile.mkdtemp(prefix="shellward-pg-"))
    (base / "socket").mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(base / "socket", "postgres")
    data = base / "data"
    initdb = subprocess.run(
        _as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                      "-E", "UTF8", "--no-sync"]),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if initdb.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {initdb.stderr.strip()}")
    process = subprocess.Popen(
        _as_postgres([str(bin_dir / "postgres"), "-D", str(data), "-k", str(base / "socket"),
                      "-c", "listen_addresses=", "-c", f"fsync={'on' if durable else 'off'}",
                      "-c", "max_connections=200"]),
        stdout=subprocess.DEVNULL, stderr=(base / "server.log").open("wb"),
    )  # fmt: skip
    server = PostgresServer(process, base)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (base / "server.log").read_text(errors="replace")
            shutil.rmtree(base, ignore_errors=True)
            raise RuntimeError(f"postgres exited at start: {log.strip()[-2000:]}")
        try:
            psycopg.connect(server.url(), connect_timeout=2).close()
            return server
        except psycopg.OperationalError:
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"postgres did not accept connections within {START_TIMEOUT:g}s")


def unavailable(reason: str) -> NoReturn:
    """Skip (a developer's machine without PostgreSQL) or, in CI, fail loudly."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"PostgreSQL is required in CI and could not start: {reason}")
    pytest.skip(f"PostgreSQL unavailable: {reason}")
