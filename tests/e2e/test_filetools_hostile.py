"""The file tools attacked through a real daemon over gRPC: a directory swapped with a
symlink while they run, a hard link to a file outside, a FIFO, a read larger than the
operator allows, and an answer larger than the ledger keeps."""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, Code
from tests.daemon.hostile import Layout, swapping, watching_opens
from tests.helpers import start_daemon

TRIES = 300
# Between two swaps: a swap storm without a pause makes every call of the daemon wait for
# its write detector to catch up, and the test would measure that instead.
PAUSE = 0.001


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.timeout(600)  # 300 calls through the daemon; slow on a loaded 2-core machine
def test_read_file_never_returns_outside_content_while_a_directory_is_swapped(
    client: Client, tmp_path: Path, workspace: Path
) -> None:
    layout = Layout.make(tmp_path, workspace)
    codes: dict[Code, int] = {}
    with swapping(layout, PAUSE):
        for _ in range(TRIES):
            result = client.call_tool("read_file", {"path": "d/f"}, cwd=workspace)
            assert Layout.SECRET not in result.stdout.data
            assert result.stdout.data in (b"", Layout.INSIDE)
            codes[result.code] = codes.get(result.code, 0) + 1
            assert result.ok or result.code is Code.PERMISSION_DENIED, result.content
    assert codes.get(Code.PERMISSION_DENIED)  # the swap really happened under the reads


@pytest.mark.timeout(600)
def test_write_file_never_writes_outside_while_a_directory_is_swapped(
    client: Client, tmp_path: Path, workspace: Path
) -> None:
    layout = Layout.make(tmp_path, workspace)
    with swapping(layout, PAUSE):
        for n in range(TRIES // 3):
            args = {"path": f"d/new-{n}.txt", "content": "x"}
            result = client.call_tool("write_file", args, cwd=workspace)
            assert result.ok or result.code is Code.PERMISSION_DENIED, result.content
    assert layout.outside_names() == ["f", "only-outside.txt"]
    assert (layout.outside / "f").read_bytes() == Layout.SECRET


def test_a_hard_link_to_a_file_outside_is_not_read(
    client: Client, tmp_path: Path, workspace: Path
) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"PRIVATE KEY\n")
    os.link(secret, workspace / "notes.txt")
    result = client.call_tool("read_file", {"path": "notes.txt"}, cwd=workspace)
    assert result.code is Code.PERMISSION_DENIED
    assert "2 hard links" in result.content and "cp " in result.content
    assert b"PRIVATE" not in result.stdout.data
    written = client.call_tool("write_file", {"path": "notes.txt", "content": "x"}, cwd=workspace)
    assert written.code is Code.PERMISSION_DENIED and not written.file_effects
    assert secret.read_bytes() == b"PRIVATE KEY\n"


def test_a_fifo_is_refused_and_never_opened_by_the_daemon(client: Client, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    with watching_opens(workspace / "pipe") as opens:
        result = client.call_tool("read_file", {"path": "pipe"}, cwd=workspace, timeout=30)
        assert result.code is Code.INVALID_ARGUMENT and "not a regular file" in result.content
        args = {"path": "pipe", "content": "x"}
        written = client.call_tool("write_file", args, cwd=workspace)
        assert written.code is Code.INVALID_ARGUMENT and "not a regular file" in written.content
        assert opens() == 0


@pytest.fixture
def small_client(tmp_path: Path, workspace: Path) -> Iterator[Client]:
    # The ceiling through its environment twin, the ledger's cap through its flag.
    handle = start_daemon(
        tmp_path / "run" / "small.sock", tmp_path / "small-state", workspace,
        "--output-cap", "100", env={"SHELLWARD_READ_MAX_BYTES": "4096"},
    )  # fmt: skip
    try:
        with handle.client() as client:
            yield client
    finally:
        handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def test_read_file_max_bytes_has_a_ceiling(small_client: Client, workspace: Path) -> None:
    (workspace / "big.bin").write_bytes(b"z" * 10_000)
    result = small_client.call_tool(
        "read_file", {"path": "big.bin", "max_bytes": 4097}, cwd=workspace
    )
    assert result.code is Code.INVALID_ARGUMENT
    assert "4096" in result.content and "--read-max-bytes" in result.content
    assert result.started_at is None  # refused before it started: nothing was read
    huge = small_client.call_tool(
        "read_file", {"path": "big.bin", "max_bytes": 2**40}, cwd=workspace
    )
    assert huge.code is Code.INVALID_ARGUMENT


def test_a_tool_answer_is_stored_capped_with_its_size_and_digest(
    small_client: Client, workspace: Path
) -> None:
    data = bytes(range(256)) * 4
    (workspace / "data.bin").write_bytes(data)
    result = small_client.call_tool(
        "read_file", {"path": "data.bin", "max_bytes": 4096}, cwd=workspace
    )
    assert result.ok and result.output["size"] == len(data)
    stored = small_client.get_call(result.call_id).stdout
    for output in (result.stdout, stored):
        assert output.data == data[:100]
        assert (output.total_bytes, output.truncated, output.sha256) == (
            len(data), True, _sha(data),
        )  # fmt: skip
