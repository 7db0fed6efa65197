"""One real daemon shared by the CLI tests (each test uses its own run ids), and ways to
call the CLI: as a subprocess (real stdout/stderr bytes, real exit status) or in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shellward.cli import main
from tests.helpers import Daemon, daemon_under


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture(scope="package")
def cli_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with daemon_under(tmp_path_factory.mktemp("cli")) as handle:
        yield handle


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}
    env.pop("NO_COLOR", None)
    return env


@pytest.fixture
def shellward_process(
    cli_daemon: Daemon,
) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """Run ``python -m shellward.cli --socket S ARGS…`` in the daemon's workspace."""

    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "shellward.cli", "--socket", str(cli_daemon.socket), *args],
            cwd=cwd or cli_daemon.workspace,
            env=_clean_env(),
            capture_output=True,
            timeout=60,
            check=False,
        )

    return run


@pytest.fixture
def shellward(
    cli_daemon: Daemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Outcome]:
    """Call ``main([--socket S, ARGS…])`` in-process, from the daemon's workspace."""
    monkeypatch.chdir(cli_daemon.workspace)

    def run(*args: str) -> Outcome:
        capsys.readouterr()
        code = main(["--socket", str(cli_daemon.socket), *args])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run
