"""Undo of the built-in file tools' writes, on a real daemon: write_file and apply_patch keep
the content they replace, so an undo restores it (and removes a file they created); refused
after a later change; a run mixing a command and file tools undone newest first; and the
attacks: a directory swapped with a link to outside while writes run must never get an
outside file into the store, and a store that cannot keep an image stops the write."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, Code, CommandResult
from shellward._exceptions import ShellwardError
from shellwardd.staging.blobs import BlobStore, store_path
from tests.daemon.hostile import Layout, swapping
from tests.helpers import Daemon, start_daemon


@pytest.fixture
def daemon(tmp_path: Path, workspace: Path) -> Iterator[Daemon]:
    handle = start_daemon(tmp_path / "run" / "s.sock", tmp_path / "state", workspace)
    yield handle
    handle.stop()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    with daemon.client() as c:
        yield c


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _store(daemon: Daemon) -> BlobStore:
    return BlobStore(store_path(daemon.state_dir))


def _tool(client: Client, tool: str, workspace: Path, **arguments: str) -> CommandResult:
    result = client.call_tool(tool, arguments, cwd=workspace)
    assert result.ok, result.content
    return result


def test_undo_of_write_file_restores_the_content_it_replaced(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"original\n")
    written = _tool(client, "write_file", workspace, path="f.txt", content="changed\n")
    # The effect's before hash (the write detector's, from its index) names the image kept.
    (effect,) = written.file_effects
    assert effect.path == "f.txt" and effect.before_hash == _sha(b"original\n")
    assert _store(daemon).has(effect.before_hash)
    assert written.output["before_hash"] == effect.before_hash
    undone = client.undo(written.call_id, cwd=workspace)
    assert undone.ok, undone.content
    assert (workspace / "f.txt").read_bytes() == b"original\n"


def test_undo_of_write_file_leaves_a_script_executable(client: Client, workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_bytes(b"#!/bin/sh\necho old\n")
    script.chmod(0o750)
    written = _tool(client, "write_file", workspace, path="run.sh", content="#!/bin/sh\n")
    assert client.undo(written.call_id, cwd=workspace).ok
    assert script.read_bytes() == b"#!/bin/sh\necho old\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750


def test_undo_of_write_file_that_created_a_file_removes_it(client: Client, workspace: Path) -> None:
    written = _tool(client, "write_file", workspace, path="new.txt", content="x", base_hash="")
    assert client.undo(written.call_id, cwd=workspace).ok
    assert not (workspace / "new.txt").exists()


def test_undo_of_apply_patch_restores_the_file(client: Client, workspace: Path) -> None:
    (workspace / "app.py").write_bytes(b"def f():\n    return 1\n")
    patch = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    patched = _tool(client, "apply_patch", workspace, path="app.py", patch=patch)
    assert (workspace / "app.py").read_bytes() == b"def f():\n    return 2\n"
    assert client.undo(patched.call_id, cwd=workspace).ok
    assert (workspace / "app.py").read_bytes() == b"def f():\n    return 1\n"


def test_undo_of_write_file_after_a_later_change_is_a_conflict(
    client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"v0\n")
    written = _tool(client, "write_file", workspace, path="f.txt", content="v1\n")
    (workspace / "f.txt").write_bytes(b"someone else's edit\n")
    with pytest.raises(ShellwardError) as refused:
        client.undo(written.call_id, cwd=workspace)
    assert refused.value.code is Code.CONFLICT and "f.txt" in refused.value.message
    assert (workspace / "f.txt").read_bytes() == b"someone else's edit\n"


def test_undo_of_a_run_mixing_commands_and_file_tools(client: Client, workspace: Path) -> None:
    (workspace / "a.txt").write_text("v0\n")
    ran = client.run_command("echo v1 > a.txt", cwd=workspace, run_id="r", step_id="s1")
    assert ran.ok and ran.file_effects, ran.content
    args = {"path": "a.txt", "content": "v2\n"}
    assert client.call_tool("write_file", args, cwd=workspace, run_id="r", step_id="s2").ok
    args = {"path": "b.txt", "content": "b\n"}
    assert client.call_tool("write_file", args, cwd=workspace, run_id="r", step_id="s3").ok
    ran = client.run_command("echo v3 > a.txt", cwd=workspace, run_id="r", step_id="s4")
    assert ran.ok, ran.content
    results = client.undo_run("r", "s1", cwd=workspace)
    assert [(r.ok, r.code) for r in results] == [(True, Code.OK)] * 4, [r.content for r in results]
    assert (workspace / "a.txt").read_text() == "v0\n"
    assert not (workspace / "b.txt").exists()


@pytest.mark.timeout(600)  # 100 calls through the daemon on a loaded machine
def test_a_directory_swapped_with_a_link_never_puts_an_outside_file_in_the_store(
    daemon: Daemon, client: Client, tmp_path: Path, workspace: Path
) -> None:
    # The attack: while writes replace d/f, d is swapped with a link to a directory outside
    # whose f is a secret; a before-image read by name would copy the secret into the
    # daemon's store, from where an undo would put it into the workspace.
    layout = Layout.make(tmp_path, workspace)
    codes: set[Code] = set()
    with swapping(layout, 0.001):
        for n in range(100):
            result = client.call_tool("write_file", {"path": "d/f", "content": f"{n}\n"},
                                      cwd=workspace)  # fmt: skip
            assert result.ok or result.code is Code.PERMISSION_DENIED, result.content
            codes.add(result.code)
    assert Code.OK in codes, "no write got through: the test proved nothing"
    kept = [p.read_bytes() for p in _store(daemon).root.glob("*/*")]
    assert kept and Layout.SECRET not in kept
    assert not _store(daemon).has(_sha(Layout.SECRET))
    assert (layout.outside / "f").read_bytes() == Layout.SECRET


def test_a_write_whose_before_image_cannot_be_kept_writes_nothing(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"original\n")
    blobs = store_path(daemon.state_dir)
    blobs.rmdir()  # nothing kept yet: empty
    blobs.write_bytes(b"")  # a root daemon writes into any mode: a file breaks the store
    result = client.call_tool("write_file", {"path": "f.txt", "content": "x"}, cwd=workspace)
    assert not result.ok and result.code is Code.UNAVAILABLE, result.content
    assert "Nothing was written" in result.content
    assert (workspace / "f.txt").read_bytes() == b"original\n"
    # A new file replaces nothing, so it needs no image: still written (and undoable).
    created = _tool(client, "write_file", workspace, path="new.txt", content="n", base_hash="")
    assert client.undo(created.call_id, cwd=workspace).ok


def test_a_file_tool_image_is_kept_by_the_collection_at_start_up(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"v0\n")
    written = _tool(client, "write_file", workspace, path="f.txt", content="v1\n")
    image = _store(daemon).path_of(_sha(b"v0\n"))
    os.utime(image, (1, 1))  # past the grace a young blob has: only retention keeps it now
    daemon.stop()
    again = start_daemon(daemon.socket, daemon.state_dir, workspace)
    try:
        with again.client() as second:
            assert second.undo(written.call_id, cwd=workspace).ok
    finally:
        again.stop()
    assert (workspace / "f.txt").read_bytes() == b"v0\n"
