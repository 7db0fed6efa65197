"""The undo's restore against a workspace that changes between the check and the write:
a symlink swapped in where a directory was stops it (nothing written outside), and a
before-image altered after the check is not put in place."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from shellward.types import EffectKind, FileEffect
from shellwardd.errors import PermissionDenied, StateError
from shellwardd.staging.blobs import BlobStore
from shellwardd.undo import plan_undo, restore
from shellwardd.undo.plan import UndoPlan


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


def _keep(store: BlobStore, tmp_path: Path, data: bytes) -> None:
    image = tmp_path / "image"
    image.write_bytes(data)
    store.put_file(image)


def _modified(tmp_path: Path, store: BlobStore, rel: str) -> tuple[Path, UndoPlan]:
    """A workspace where a call changed ``rel`` from "before" to "after", its before-image
    kept, and the undo planned (checked) for it."""
    workspace = tmp_path / "ws"
    (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
    (workspace / rel).write_bytes(b"after\n")
    _keep(store, tmp_path, b"before\n")
    effect = FileEffect(rel, EffectKind.MODIFIED, _sha(b"before\n"), _sha(b"after\n"))
    return workspace, plan_undo("c1", workspace, [effect], store)


def test_a_symlink_swapped_in_after_the_check_stops_the_restore(
    tmp_path: Path, store: BlobStore
) -> None:
    workspace, plan = _modified(tmp_path, store, "d/f.txt")
    # Between the check and the write: d becomes a link to a directory outside.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_bytes(b"after\n")
    os.rename(workspace / "d", tmp_path / "d-moved")
    os.symlink(outside, workspace / "d")
    with pytest.raises(PermissionDenied, match="Nothing was written outside"):
        restore(workspace, plan, store)
    assert (outside / "f.txt").read_bytes() == b"after\n"
    assert os.listdir(outside) == ["f.txt"]


def test_a_link_swapped_in_at_the_file_itself_is_replaced_not_followed(
    tmp_path: Path, store: BlobStore
) -> None:
    workspace, plan = _modified(tmp_path, store, "f.txt")
    target = tmp_path / "target.txt"
    target.write_bytes(b"not yours\n")
    (workspace / "f.txt").unlink()
    os.symlink(target, workspace / "f.txt")
    restore(workspace, plan, store)
    assert target.read_bytes() == b"not yours\n"
    assert not os.path.islink(workspace / "f.txt")
    assert (workspace / "f.txt").read_bytes() == b"before\n"


def test_an_image_altered_after_the_check_is_not_put_in_place(
    tmp_path: Path, store: BlobStore
) -> None:
    workspace, plan = _modified(tmp_path, store, "f.txt")
    blob = store.path_of(_sha(b"before\n"))
    os.chmod(blob, 0o600)
    blob.write_bytes(b"evil\n")
    with pytest.raises(StateError, match="altered"):
        restore(workspace, plan, store)
    assert (workspace / "f.txt").read_bytes() == b"after\n"
    assert os.listdir(workspace) == ["f.txt"]  # the temporary file is gone too


def test_a_rename_and_a_created_directory_are_reversed(tmp_path: Path, store: BlobStore) -> None:
    workspace = tmp_path / "ws"
    (workspace / "new" / "deep").mkdir(parents=True)
    (workspace / "new" / "deep" / "b.txt").write_bytes(b"x\n")
    effects = [
        FileEffect("new/", EffectKind.CREATED, "", "directory"),
        FileEffect("new/deep/", EffectKind.CREATED, "", "directory"),
        FileEffect("new/deep/b.txt", EffectKind.RENAMED, _sha(b"x\n"), _sha(b"x\n"),
                   renamed_from="a.txt"),
    ]  # fmt: skip
    restore(workspace, plan_undo("c1", workspace, effects, store), store)
    assert os.listdir(workspace) == ["a.txt"]
    assert (workspace / "a.txt").read_bytes() == b"x\n"


def test_the_recorded_mode_is_restored_never_a_set_uid_bit(
    tmp_path: Path, store: BlobStore
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "m.sh").write_bytes(b"after\n")
    os.chmod(workspace / "m.sh", 0o600)  # the call changed the bits too
    _keep(store, tmp_path, b"before\n")
    effects = [
        # A tampered or hostile record asks for set-uid: only permission bits are put back.
        FileEffect("m.sh", EffectKind.MODIFIED, _sha(b"before\n"), _sha(b"after\n"),
                   before_mode=0o4755),
        FileEffect("gone.sh", EffectKind.DELETED, _sha(b"before\n"), before_mode=0o750),
        FileEffect("old.txt", EffectKind.DELETED, _sha(b"before\n")),  # no mode recorded
    ]  # fmt: skip
    old = os.umask(0o022)
    try:
        restore(workspace, plan_undo("c1", workspace, effects, store), store)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in workspace.iterdir()}
    assert modes == {"m.sh": 0o755, "gone.sh": 0o750, "old.txt": 0o644}
    assert (workspace / "gone.sh").read_bytes() == b"before\n"
