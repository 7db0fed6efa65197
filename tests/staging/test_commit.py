"""Reading an upper layer and applying it, without a daemon (root makes the whiteouts)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from shellward.types import EffectKind
from shellwardd.staging.commit import apply, conflicts
from shellwardd.staging.upper import UpperRefused, staged_effects
from shellwardd.watch.hashing import IndexEntry, probe
from shellwardd.watch.paths import PathFilter, PathKind

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts need CAP_MKNOD")


class _Before:
    """The workspace as it was: probed once, up front."""

    def __init__(self, workspace: Path) -> None:
        self._entries: dict[str, IndexEntry] = {}
        for path in workspace.rglob("*"):
            entry = probe(path)
            if entry is not None:
                self._entries[str(path.relative_to(workspace))] = entry

    def file(self, path: str) -> IndexEntry | None:
        return self._entries.get(path)

    def under(self, directory: str) -> list[str]:
        return sorted(p for p in self._entries if p.startswith(f"{directory}/"))

    def kind(self, path: str) -> PathKind:
        return PathFilter(("*.log",)).classify(path)


def _whiteout(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


@pytest.fixture
def layers(tmp_path: Path) -> tuple[Path, Path]:
    workspace, upper = tmp_path / "ws", tmp_path / "upper"
    workspace.mkdir()
    upper.mkdir()
    (workspace / "keep.txt").write_text("keep\n")
    (workspace / "mod.txt").write_text("old\n")
    (workspace / "gone.txt").write_text("bye\n")
    (workspace / "old-name.txt").write_text("moved\n")
    (workspace / "tree").mkdir()
    (workspace / "tree" / "a").write_text("a\n")
    (workspace / "tree" / "b").write_text("b\n")
    return workspace, upper


def test_effects_and_apply(layers: tuple[Path, Path]) -> None:
    workspace, upper = layers
    before = _Before(workspace)
    (upper / "mod.txt").write_text("new\n")
    _whiteout(upper / "gone.txt")
    _whiteout(upper / "old-name.txt")
    (upper / "new-name.txt").write_text("moved\n")
    (upper / "d").mkdir()
    (upper / "d" / "f").write_text("f\n")
    (upper / "tree").mkdir()  # replaced: opaque, holds only c
    os.setxattr(upper / "tree", "trusted.overlay.opaque", b"y")
    (upper / "tree" / "c").write_text("c\n")
    effects = {e.path: e for e in staged_effects(upper, workspace, before)}
    assert {p: e.kind for p, e in effects.items()} == {
        "mod.txt": EffectKind.MODIFIED,
        "gone.txt": EffectKind.DELETED,
        "new-name.txt": EffectKind.RENAMED,
        "d/f": EffectKind.CREATED,
        "tree/a": EffectKind.DELETED,
        "tree/b": EffectKind.DELETED,
        "tree/c": EffectKind.CREATED,
    }
    assert effects["new-name.txt"].renamed_from == "old-name.txt"
    assert conflicts(workspace, list(effects.values())) == []
    apply(upper, workspace, None)
    assert sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")) == [
        "d", "d/f", "keep.txt", "mod.txt", "new-name.txt", "tree", "tree/c",
    ]  # fmt: skip
    assert (workspace / "mod.txt").read_text() == "new\n"
    assert sorted(upper.rglob("*")) == [upper / "d", upper / "tree"]  # all moved; dirs stay
    apply(upper, workspace, None)  # again (a crash after the first): nothing changes
    assert (workspace / "tree" / "c").read_text() == "c\n"


def test_git_writes_are_one_effect_and_ignored_paths_none(layers: tuple[Path, Path]) -> None:
    workspace, upper = layers
    (workspace / ".git").mkdir()
    before = _Before(workspace)
    (upper / ".git" / "objects").mkdir(parents=True)
    (upper / ".git" / "objects" / "ab").write_text("object\n")
    (upper / ".git" / "index").write_text("index\n")
    (upper / "build.log").write_text("noise\n")
    effects = staged_effects(upper, workspace, before)
    assert [(e.path, e.kind) for e in effects] == [(".git/", EffectKind.MODIFIED)]
    apply(upper, workspace, None)  # committed all the same
    assert (workspace / "build.log").read_text() == "noise\n"
    assert (workspace / ".git" / "objects" / "ab").exists()


def test_a_change_since_the_call_began_is_a_conflict(layers: tuple[Path, Path]) -> None:
    workspace, upper = layers
    before = _Before(workspace)
    (upper / "mod.txt").write_text("mine\n")
    (upper / "fresh.txt").write_text("mine\n")
    effects = staged_effects(upper, workspace, before)
    (workspace / "mod.txt").write_text("theirs\n")
    (workspace / "fresh.txt").write_text("theirs\n")
    found = conflicts(workspace, effects)
    assert [f.split(":")[0] for f in found] == ["fresh.txt", "mod.txt"]


def test_apply_never_writes_through_a_symlink(layers: tuple[Path, Path], tmp_path: Path) -> None:
    workspace, upper = layers
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "sub").symlink_to(outside)
    (upper / "sub").mkdir()
    (upper / "sub" / "x").write_text("pwned\n")
    apply(upper, workspace, None)  # the staged directory replaces the link
    assert list(outside.iterdir()) == []
    assert not (workspace / "sub").is_symlink()
    assert (workspace / "sub" / "x").read_text() == "pwned\n"


def test_a_device_node_fails_closed(layers: tuple[Path, Path]) -> None:
    workspace, upper = layers
    os.mknod(upper / "disk", stat.S_IFBLK | 0o600, os.makedev(8, 0))
    with pytest.raises(UpperRefused, match="disk"):
        staged_effects(upper, workspace, _Before(workspace))


def test_fuse_overlayfs_markers_without_devices(layers: tuple[Path, Path]) -> None:
    # fuse-overlayfs on a file system where it cannot make a device: whiteouts are
    # ".wh.NAME" files, an opaque directory holds ".wh..wh..opq" (and its own xattr).
    workspace, upper = layers
    before = _Before(workspace)
    (upper / ".wh.gone.txt").write_text("")
    (upper / ".wh.old-name.txt").write_text("")
    (upper / "new-name.txt").write_text("moved\n")
    (upper / "tree").mkdir()
    (upper / "tree" / ".wh..wh..opq").write_text("")
    _whiteout(upper / "tree" / ".wh..opq")  # the marker's own whiteout, as it leaves it
    (upper / "tree" / "c").write_text("c\n")
    effects = {e.path: e for e in staged_effects(upper, workspace, before, fuse_markers=True)}
    assert {p: e.kind for p, e in effects.items()} == {
        "gone.txt": EffectKind.DELETED,
        "new-name.txt": EffectKind.RENAMED,
        "tree/a": EffectKind.DELETED,
        "tree/b": EffectKind.DELETED,
        "tree/c": EffectKind.CREATED,
    }
    apply(upper, workspace, None, fuse_markers=True)
    assert sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")) == [
        "keep.txt", "mod.txt", "new-name.txt", "tree", "tree/c",
    ]  # fmt: skip
    (workspace / "tree" / "d").write_text("d\n")
    apply(
        upper, workspace, None, fuse_markers=True
    )  # again (a crash after the first): nothing removed
    assert sorted(p.name for p in (workspace / "tree").iterdir()) == ["c", "d"]


def test_fuse_overlayfs_opaque_xattr(layers: tuple[Path, Path]) -> None:
    workspace, upper = layers
    before = _Before(workspace)
    (upper / "tree").mkdir()
    os.setxattr(upper / "tree", "user.fuseoverlayfs.opaque", b"y")
    effects = {e.path: e.kind for e in staged_effects(upper, workspace, before)}
    assert effects == {"tree/a": EffectKind.DELETED, "tree/b": EffectKind.DELETED}


def test_marker_names_from_a_kernel_overlay_are_plain_files(layers: tuple[Path, Path]) -> None:
    """Under kernel overlayfs a command may name a file ".wh.NAME" or ".wh..wh..opq": read
    as fuse-overlayfs markers, ".git/.wh.config" would delete a file the sandbox holds
    read-only. They are files the command created, and deleted nothing."""
    workspace, upper = layers
    before = _Before(workspace)
    (upper / ".wh.keep.txt").write_text("")
    (upper / "tree").mkdir()
    (upper / "tree" / ".wh..wh..opq").write_text("")
    effects = {e.path: e.kind for e in staged_effects(upper, workspace, before)}
    assert effects == {
        ".wh.keep.txt": EffectKind.CREATED,
        "tree/.wh..wh..opq": EffectKind.CREATED,
    }
    apply(upper, workspace, None)
    assert (workspace / "keep.txt").exists() and (workspace / ".wh.keep.txt").exists()
    assert sorted(p.name for p in (workspace / "tree").iterdir()) == [".wh..wh..opq", "a", "b"]
