"""One real daemon shared by the MCP tests, and ways to reach it through ``shellward mcp``
with the SDK's own client, over stdio (a subprocess, as a host starts it)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ElicitationFnT

from tests.helpers import Daemon, start_daemon

MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"


def mock_log(daemon: Daemon) -> Path:
    """Where the mock business server (`biz` in the daemon's tools config) logs requests."""
    return daemon.workspace.parent / "mock-log.jsonl"


@pytest.fixture(scope="package")
def mcp_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The daemon every MCP test talks to; its tools config declares the mock business
    server as `biz`."""
    root = tmp_path_factory.mktemp("mcp")
    workspace = root / "workspace"
    workspace.mkdir()
    config = root / "tools.toml"
    config.write_text(
        '[[server]]\nname = "biz"\n'
        f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
        f"env = {{ MOCK_LOG = {json.dumps(str(root / 'mock-log.jsonl'))} }}\n"
    )
    handle = start_daemon(
        root / "run" / "shellward.sock", root / "state", workspace, "--tools-config", str(config)
    )
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}


def mcp_command(socket: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "shellward.cli", "--socket", str(socket), "mcp", *args]


@asynccontextmanager
async def mcp_session(
    socket: Path,
    cwd: Path,
    *args: str,
    errlog: Path | None = None,
    elicitation: ElicitationFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """``shellward mcp`` started as a host starts it, and an initialized SDK session to it;
    ``elicitation``: the host's user, answering approvals (None: a host that cannot ask)."""
    command, *rest = mcp_command(socket, *args)
    parameters = StdioServerParameters(command=command, args=rest, env=clean_env(), cwd=str(cwd))
    with (errlog or Path(os.devnull)).open("w") as err:
        async with (
            stdio_client(parameters, errlog=err) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation) as session,
        ):
            await session.initialize()
            yield session
