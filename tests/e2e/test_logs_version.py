"""The daemon's log formats (--log-format; auto: text on a terminal, JSON lines otherwise;
the log file always JSON) and ``--version`` of both programs."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shellward._version import package_version
from tests.helpers import start_daemon


def _serving_line(lines: list[str]) -> str:
    return next(line for line in lines if "serving" in line)


@pytest.mark.parametrize("log_format", ["text", "json", ""])
def test_stderr_log_format(log_format: str, tmp_path: Path, workspace: Path) -> None:
    extra = ("--log-format", log_format) if log_format else ()
    daemon = start_daemon(tmp_path / "run" / "s.sock", tmp_path / "state", workspace, *extra)
    daemon.stop()
    line = _serving_line(daemon.logs().splitlines())
    if log_format == "text":
        assert " INFO    shellwardd: serving socket=" in line
        assert f"state_dir={tmp_path / 'state'}" in line
    else:  # stderr is a file here: auto means JSON
        assert json.loads(line)["event"] == "serving"
    # The file in the state directory is JSON lines whatever stderr gets.
    file_line = _serving_line((tmp_path / "state" / "daemon.log").read_text().splitlines())
    assert json.loads(file_line)["state_dir"] == str(tmp_path / "state")


def test_auto_is_text_on_a_terminal(tmp_path: Path, workspace: Path) -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "shellwardd.main", "--socket", str(tmp_path / "s.sock"),
         "--state-dir", str(tmp_path / "state"), "--workspace", str(workspace)],
        stdout=subprocess.DEVNULL, stderr=terminal,
        env={k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")},
    )  # fmt: skip
    os.close(terminal)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"serving" not in seen and time.monotonic() < deadline:
            if select.select([controller], [], [], 1)[0]:
                seen += os.read(controller, 65536)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        os.close(controller)
    line = _serving_line(seen.decode(errors="replace").splitlines())
    assert not line.lstrip().startswith("{")
    assert "INFO" in line and "workspaces=" in line


def test_a_bad_log_format_is_refused(tmp_path: Path, workspace: Path) -> None:
    with pytest.raises(RuntimeError, match="--log-format 'xml': use auto, text or json"):
        start_daemon(tmp_path / "s.sock", tmp_path / "state", workspace, "--log-format", "xml")


@pytest.mark.parametrize(("module", "name"), [("shellwardd.main", "shellwardd"),
                                              ("shellward.cli", "shellward")])  # fmt: skip
def test_version(module: str, name: str) -> None:
    answer = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == f"{name} {package_version()}"
