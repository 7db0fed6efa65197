"""A client nobody here wrote: the MCP Inspector's CLI mode (npm) against ``shellward mcp``.

Installed once into a cache directory when node and npm are present; skipped otherwise, or
when the npm registry cannot be reached, except under CI=true: there, with node present, a
failed install fails the test (a CI run must not pass by skipping the only third-party client).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Daemon
from tests.mcp_server.conftest import clean_env, mcp_command

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"


@pytest.fixture(scope="module")
def inspector() -> Path:
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("node/npm not installed: the MCP Inspector cannot run")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = cache / "shellward-tests" / "inspector-0.15.0"
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if not binary.exists():
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), INSPECTOR],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not binary.exists():
            problem = f"could not install {INSPECTOR} from npm: {done.stderr[-500:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(problem)
            pytest.skip(problem)
    return binary


def _inspect(inspector: Path, daemon: Daemon, *args: str) -> Any:
    done = subprocess.run(
        [str(inspector), "--cli", *mcp_command(daemon.socket), *args],
        cwd=daemon.workspace,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_inspector_lists_tools_and_calls_one(inspector: Path, mcp_daemon: Daemon) -> None:
    listed = _inspect(inspector, mcp_daemon, "--method", "tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert tools["run_command"]["annotations"]["destructiveHint"] is True
    assert tools["read_file"]["annotations"]["readOnlyHint"] is True
    assert "outputSchema" in tools["run_command"]

    step = f"insp-{uuid.uuid4().hex[:8]}"
    call = ["--method", "tools/call", "--tool-name", "run_command"]
    args = [
        "--tool-arg",
        "command=echo inspected >> inspector.txt",
        "--tool-arg",
        f"step_id={step}",
    ]
    first = _inspect(inspector, mcp_daemon, *call, *args)
    # A second Inspector process is a second session: the same step is a new run's step.
    again = _inspect(inspector, mcp_daemon, *call, *args)
    assert first["structuredContent"]["ok"] is True and first["isError"] is False
    assert first["structuredContent"]["effects"] == [{"path": "inspector.txt", "kind": "created"}]
    assert again["structuredContent"]["call_id"] != first["structuredContent"]["call_id"]
