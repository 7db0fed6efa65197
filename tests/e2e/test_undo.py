"""Undo of a call's file changes, on a real daemon with real bwrap: create, modify, delete and
rename put back; refused after a later change (CONFLICT naming the file, nothing restored);
undoing twice answers ALREADY_APPLIED; a run undone from a step, newest first; and the
attacks: a symlink swapped in, a tampered or evicted before-image, another workspace."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, Code
from shellward._exceptions import PermissionDenied, ShellwardError
from shellwardd.staging.blobs import BlobStore, store_path
from tests.helpers import Daemon, start_daemon


@pytest.fixture
def daemon(tmp_path: Path, workspace: Path) -> Iterator[Daemon]:
    other = tmp_path / "other-workspace"
    other.mkdir()
    handle = start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--workspace", str(other)
    )
    yield handle
    handle.stop()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    with daemon.client() as c:
        yield c


def _store(daemon: Daemon) -> BlobStore:
    """The daemon's store of before-images (the staged commit fills it)."""
    return BlobStore(store_path(daemon.state_dir))


def _image(daemon: Daemon, content: bytes) -> Path:
    return _store(daemon).path_of(hashlib.sha256(content).hexdigest())


def _ran(client: Client, command: str, workspace: Path, **identity: str) -> str:
    result = client.run_command(command, cwd=workspace, **identity)
    assert result.ok, result.content
    assert result.file_effects, "the call should have changed files"
    return result.call_id


def test_undo_of_a_create_removes_it_and_twice_is_already_applied(
    client: Client, workspace: Path
) -> None:
    (workspace / "d").mkdir()
    call = _ran(client, "echo hi > d/new.txt && echo top > top.txt", workspace)
    undone = client.undo(call, cwd=workspace)
    assert undone.ok, undone.content
    assert not (workspace / "top.txt").exists() and os.listdir(workspace / "d") == []
    entry = client.get_call(undone.call_id)
    assert entry.tool_name == "undo" and entry.step_id == f"undo:{call}"
    assert {e.path for e in entry.file_effects} >= {"d/new.txt"}

    again = client.undo(call, cwd=workspace)
    assert again.ok and again.code is Code.ALREADY_APPLIED, again.content
    assert again.call_id == undone.call_id


def test_undo_of_a_modify_and_a_delete_restores_the_before_images(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"original\n")
    (workspace / "g.txt").write_bytes(b"keep me\n")
    call = _ran(client, "echo changed > f.txt && rm g.txt", workspace)
    assert client.undo(call, cwd=workspace).ok
    assert (workspace / "f.txt").read_bytes() == b"original\n"
    assert (workspace / "g.txt").read_bytes() == b"keep me\n"


def test_undo_puts_back_the_permission_bits_of_a_modified_and_a_deleted_file(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"original\n")
    (workspace / "f.txt").chmod(0o640)
    (workspace / "run.sh").write_bytes(b"#!/bin/sh\n")
    (workspace / "run.sh").chmod(0o755)
    call = _ran(client, "echo changed > f.txt && chmod 600 f.txt && rm run.sh", workspace)
    modes = {e.path: e.before_mode for e in client.get_call(call).file_effects}
    assert modes == {"f.txt": 0o640, "run.sh": 0o755}
    assert client.undo(call, cwd=workspace).ok
    assert stat.S_IMODE((workspace / "f.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((workspace / "run.sh").stat().st_mode) == 0o755
    assert (workspace / "run.sh").read_bytes() == b"#!/bin/sh\n"


def test_undo_of_a_rename_moves_it_back(daemon: Daemon, client: Client, workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"content\n")
    (workspace / "sub").mkdir()
    call = _ran(client, "mv a.txt sub/b.txt", workspace)
    assert client.undo(call, cwd=workspace).ok
    assert (workspace / "a.txt").read_bytes() == b"content\n"
    assert os.listdir(workspace / "sub") == []


def test_undo_after_a_later_change_is_a_conflict_naming_the_file(
    client: Client, workspace: Path
) -> None:
    call = _ran(client, "echo one > one.txt && echo two > two.txt", workspace)
    (workspace / "two.txt").write_text("edited by someone else\n")
    with pytest.raises(ShellwardError) as refused:
        client.undo(call, cwd=workspace)
    assert refused.value.code is Code.CONFLICT
    assert "two.txt" in refused.value.message and "one.txt" not in refused.value.message
    # Nothing restored: the file that was still as the call left it is there too.
    assert (workspace / "one.txt").read_text() == "one\n"
    # Once the file is as the call left it again, the undo runs.
    (workspace / "two.txt").write_text("two\n")
    assert client.undo(call, cwd=workspace).ok
    assert not (workspace / "one.txt").exists()


def test_undo_of_a_run_from_a_step_goes_newest_first(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("v0\n")
    _ran(client, "echo v1 > a.txt", workspace, run_id="r", step_id="s1")
    _ran(client, "echo b > b.txt", workspace, run_id="r", step_id="s2")
    client.run_command("cat a.txt", cwd=workspace, run_id="r", step_id="read")
    _ran(client, "echo v2 > a.txt", workspace, run_id="r", step_id="s3")
    results = client.undo_run("r", "s2", cwd=workspace)
    assert [r.ok for r in results] == [True, True]
    undone = [client.get_call(r.call_id).step_id for r in results]
    assert undone == [
        f"undo:{client.get_call(run_id='r', step_id=s).call_id}" for s in ("s3", "s2")
    ]
    assert (workspace / "a.txt").read_text() == "v1\n"
    assert not (workspace / "b.txt").exists()


def test_undo_of_a_run_stops_at_the_first_conflict(client: Client, workspace: Path) -> None:
    _ran(client, "echo a > a.txt", workspace, run_id="r", step_id="s1")
    _ran(client, "echo b > b.txt", workspace, run_id="r", step_id="s2")
    _ran(client, "echo c > c.txt", workspace, run_id="r", step_id="s3")
    (workspace / "b.txt").write_text("changed\n")
    results = client.undo_run("r", "s1", cwd=workspace)
    assert [(r.ok, r.code) for r in results] == [(True, Code.OK), (False, Code.CONFLICT)]
    assert "b.txt" in results[-1].content
    assert not (workspace / "c.txt").exists()
    assert (workspace / "a.txt").exists()  # never reached


def test_a_symlink_swapped_in_never_lets_the_undo_write_outside(
    daemon: Daemon, client: Client, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_bytes(b"before\n")
    call = _ran(client, "echo after > d/f.txt", workspace)
    # The attack: d becomes a link to a directory outside whose f.txt looks exactly as the
    # call left d/f.txt, so that a check by name would pass and the restore would write there.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_bytes(b"after\n")
    os.rename(workspace / "d", tmp_path / "d-moved")
    os.symlink(outside, workspace / "d")
    with pytest.raises(ShellwardError) as refused:
        client.undo(call, cwd=workspace)
    assert refused.value.code is Code.CONFLICT and "d/f.txt" in refused.value.message
    assert (outside / "f.txt").read_bytes() == b"after\n"
    assert os.path.islink(workspace / "d")


def test_a_tampered_before_image_is_refused(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"good\n")
    call = _ran(client, "echo after > f.txt", workspace)
    blob = _image(daemon, b"good\n")
    os.chmod(blob, 0o600)
    blob.write_bytes(b"evil\n")
    with pytest.raises(ShellwardError, match="does not match its hash") as refused:
        client.undo(call, cwd=workspace)
    assert refused.value.code is Code.INTERNAL
    assert (workspace / "f.txt").read_bytes() == b"after\n"


def test_an_evicted_before_image_is_record_expired(
    daemon: Daemon, client: Client, workspace: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"gone\n")
    call = _ran(client, "echo after > f.txt", workspace)
    _image(daemon, b"gone\n").unlink()  # what eviction does
    with pytest.raises(ShellwardError, match="no longer kept") as refused:
        client.undo(call, cwd=workspace)
    assert refused.value.code is Code.RECORD_EXPIRED
    assert (workspace / "f.txt").read_bytes() == b"after\n"


def test_a_call_of_another_workspace_is_not_undone_from_this_one(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    call = _ran(client, "echo x > x.txt", workspace)
    with pytest.raises(PermissionDenied, match="ran in another workspace"):
        client.undo(call, cwd=tmp_path / "other-workspace")
    assert (workspace / "x.txt").exists()


def test_undo_is_not_a_tool_and_a_business_call_has_no_files(
    client: Client, workspace: Path
) -> None:
    refused = client.call_tool("undo", {"call_id": "x"}, cwd=workspace)
    assert refused.code is Code.INVALID_ARGUMENT and "Undo RPC" in refused.content
    with pytest.raises(ShellwardError) as unknown:
        client.undo("no-such-call", cwd=workspace)
    assert unknown.value.code is Code.NOT_FOUND


def test_images_past_the_size_bound_are_evicted_at_start_up(
    daemon: Daemon, client: Client, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "f.txt").write_bytes(b"v0\n")
    (tmp_path / "orphan").write_bytes(b"nobody needs this\n")
    _store(daemon).put_file(tmp_path / "orphan")
    call = _ran(client, "echo v1 > f.txt", workspace)
    orphan, image = _image(daemon, b"nobody needs this\n"), _image(daemon, b"v0\n")
    assert image.exists(), "the commit keeps the before-image"
    for blob in (orphan, image):
        os.utime(blob, (1, 1))  # old enough that no commit is still recording it
    daemon.stop()
    other = str(tmp_path / "other-workspace")
    small = start_daemon(
        daemon.socket, daemon.state_dir, workspace, "--workspace", other, "--undo-max-bytes", "2"
    )
    try:
        with small.client() as again, pytest.raises(ShellwardError, match="no longer") as refused:
            again.undo(call, cwd=workspace)
    finally:
        small.stop()
    assert refused.value.code is Code.RECORD_EXPIRED
    assert not orphan.exists()
    assert (workspace / "f.txt").read_bytes() == b"v1\n"
