"""``shellward mcp --http``: streamable HTTP with a bearer token, through the SDK's client."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from shellward._exceptions import InvalidRequest
from shellward.mcp_server import parse_listen
from tests.helpers import Daemon, wait_for
from tests.mcp_server.conftest import clean_env, mcp_command

TOKEN = "test-token-" + uuid.uuid4().hex


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def http_url(mcp_daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("http") / "mcp-http.log"
    with log.open("w") as err:
        process = subprocess.Popen(
            mcp_command(mcp_daemon.socket, "--http", f"127.0.0.1:{port}"),
            cwd=mcp_daemon.workspace,
            env={**clean_env(), "SHELLWARD_MCP_TOKEN": TOKEN},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(lambda: _listening(port) or process.poll() is not None)
        assert process.poll() is None, log.read_text()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_http_with_the_token_lists_tools_and_runs_a_command(
    http_url: str, mcp_daemon: Daemon
) -> None:
    async def main() -> tuple[set[str], types.CallToolResult, types.CallToolResult]:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with (
            client,
            streamable_http_client(http_url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            args = {"command": "echo h >> http.txt", "step_id": "http-1"}
            return (
                names,
                await session.call_tool("run_command", args),
                await session.call_tool("run_command", args),
            )

    names, first, again = anyio.run(main)
    assert {"run_command", "read_file", "write_file"} <= names
    assert isinstance(first.structured_content, dict) and first.structured_content["ok"]
    assert isinstance(again.structured_content, dict) and again.structured_content["replayed"]
    assert (mcp_daemon.workspace / "http.txt").read_text() == "h\n"


# Ids, not the values: the token is random, and parallel workers (pytest -n) must collect
# the same test names.
@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x"],
    ids=["none", "wrong-token", "basic-scheme", "token-with-a-suffix"],
)
def test_http_without_the_right_token_is_refused(http_url: str, header: str | None) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
    request = urllib.request.Request(http_url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json, text/event-stream")
    if header is not None:
        request.add_header("Authorization", header)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401


@pytest.mark.parametrize("address", ["0.0.0.0:8765", "192.168.1.4:80", "[::]:8765", "example:1"])
def test_http_refuses_a_non_loopback_address_unless_allowed(address: str) -> None:
    with pytest.raises(InvalidRequest, match="--http-allow-remote"):
        parse_listen(address, allow_remote=False)
    assert parse_listen(address, allow_remote=True)[1] == int(address.rpartition(":")[2])


@pytest.mark.parametrize("address", ["127.0.0.1:8765", "localhost:1", "[::1]:9"])
def test_http_takes_a_loopback_address(address: str) -> None:
    host, _ = parse_listen(address, allow_remote=False)
    assert host in ("127.0.0.1", "localhost", "::1")


def test_cli_refuses_a_remote_address_before_serving(tmp_path: Path) -> None:
    done = subprocess.run(
        mcp_command(tmp_path / "none.sock", "--http", "0.0.0.0:8765"),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "not a loopback address" in done.stderr, done
