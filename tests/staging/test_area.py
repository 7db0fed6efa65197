"""The staging area: a discarded call's directory is gone from its place at once and removed
from the disk soon after, with whatever a stopped daemon left to remove."""

from __future__ import annotations

import os
from pathlib import Path

from shellwardd.staging.area import StagingArea
from tests.helpers import wait_for


def _used(area: StagingArea, call_id: str, workspace: Path) -> Path:
    """A call's directories as a run leaves them: a staged file, overlayfs's mode-000
    work/work."""
    dirs = area.create(call_id, workspace, None)
    (dirs.upper / "staged.txt").write_text("staged\n")
    (dirs.work / "work").mkdir(mode=0)
    return dirs.root


def _trash(tmp_path: Path) -> Path:
    return tmp_path / "state" / "staging.discarded"


def test_discard_frees_the_call_at_once_and_removes_its_files(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    area = StagingArea(tmp_path / "state" / "staging")
    root = _used(area, "c1", workspace)
    area.discard(area.dirs("c1"))
    assert not root.exists()  # a preview or a commit never finds it again
    wait_for(lambda: not any(_trash(tmp_path).iterdir()))
    assert os.stat(_trash(tmp_path)).st_mode & 0o777 == 0o700


def test_discard_removes_what_a_stopped_daemon_left_in_the_trash(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    area = StagingArea(tmp_path / "state" / "staging")
    # A predecessor stopped after moving this call out of the way, before removing it.
    left = _used(area, "old", workspace)
    _trash(tmp_path).mkdir(mode=0o700)
    os.rename(left, _trash(tmp_path) / "old")
    _used(area, "new", workspace)
    area.discard(area.dirs("new"))
    wait_for(lambda: not any(_trash(tmp_path).iterdir()))


def test_discard_without_a_staging_directory_is_harmless(tmp_path: Path) -> None:
    area = StagingArea(tmp_path / "state" / "staging")
    (tmp_path / "state").mkdir()
    area.discard(area.dirs("never-made"))
    assert not (tmp_path / "state" / "staging").exists()
