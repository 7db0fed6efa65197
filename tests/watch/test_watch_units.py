"""The pure parts of the write detector: path kinds, effects, hashing, the index, scans."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, InotifyFD

import shellwardd.watch
from shellward.types import EffectKind, FileEffect
from shellwardd.watch.dirset import DirectorySet
from shellwardd.watch.effects import diff, dir_effects
from shellwardd.watch.hashing import DIR_HASH, IndexEntry, content_hash, probe
from shellwardd.watch.index import HashIndex
from shellwardd.watch.observer import _InotifyFD, _Skipping
from shellwardd.watch.paths import PathFilter, PathKind, git_marker
from shellwardd.watch.scan import stat_scan

from .conftest import sha


def entry(digest: bytes, inode: int = 1, size: int = 1) -> IndexEntry:
    return IndexEntry(size=size, mtime_ns=0, ctime_ns=0, inode=inode, digest=digest)


def test_public_api() -> None:
    assert set(shellwardd.watch.__all__) == {
        "CallEffects",
        "CallWatch",
        "IndexNotReady",
        "IndexProgress",
        "WatchError",
        "WorkspaceMonitor",
        "content_hash",
    }


def test_path_kinds() -> None:
    f = PathFilter(("node_modules", "*.pyc", "build/out", "docs/*.tmp"))
    assert f.classify("src/main.py") is PathKind.INDEXED
    assert f.classify(".git") is PathKind.GIT
    assert f.classify("vendor/lib/.git/index") is PathKind.GIT
    assert f.classify("a/node_modules/x/y.js") is PathKind.IGNORED
    assert f.classify("pkg/__pycache__/m.cpython-311.pyc") is PathKind.IGNORED
    assert f.classify("build/out/bin") is PathKind.IGNORED
    assert f.classify("build/other") is PathKind.INDEXED
    assert f.classify("docs/a.tmp") is PathKind.IGNORED
    assert f.classify(".shellward/cookies/open-1") is PathKind.PRIVATE
    assert f.classify(".shellward/rules.toml") is PathKind.INDEXED
    assert f.child_kind("a/node_modules", "node_modules") is PathKind.IGNORED
    assert f.child_kind("docs/b.tmp", "b.tmp") is PathKind.IGNORED
    assert git_marker(".git/refs/heads/main") == ".git/"
    assert git_marker("vendor/lib/.git/index") == "vendor/lib/.git/"


def test_diff_kinds_and_rename_pairing() -> None:
    a, b, c = entry(b"A", inode=1), entry(b"B", inode=2), entry(b"C", inode=3)
    effects = diff(
        {
            "new": (None, a),
            "changed": (b, c),
            "touched": (c, c),
            "gone": (entry(b"G", inode=9), None),
            "moved/to": (None, entry(b"M", inode=7)),
            "moved_from": (entry(b"M", inode=7), None),
            # Same content but a new inode: a copy and a delete, not a rename.
            "copy": (None, entry(b"K", inode=5)),
            "orig": (entry(b"K", inode=4), None),
        }
    )
    hex_ = bytes.hex
    assert effects == [
        FileEffect(
            "changed", EffectKind.MODIFIED, "sha256:" + hex_(b"B"), "sha256:" + hex_(b"C"), 1
        ),
        FileEffect("copy", EffectKind.CREATED, after_hash="sha256:" + hex_(b"K"), size=1),
        FileEffect("gone", EffectKind.DELETED, before_hash="sha256:" + hex_(b"G"), size=1),
        FileEffect(
            "moved/to",
            EffectKind.RENAMED,
            "sha256:" + hex_(b"M"),
            "sha256:" + hex_(b"M"),
            1,
            renamed_from="moved_from",
        ),
        FileEffect("new", EffectKind.CREATED, after_hash="sha256:" + hex_(b"A"), size=1),
        FileEffect("orig", EffectKind.DELETED, before_hash="sha256:" + hex_(b"K"), size=1),
    ]


def test_a_removed_directory_is_reported_when_its_inode_comes_back_elsewhere() -> None:
    """`rm -r ab/deep && mkdir -p b/new/er`: the file system may give `b/new` the inode
    `ab/deep` had. The pair reads as a move, and a move into a directory holding other
    effects is implied by them; the old path's departure is not, and is reported."""
    deleted = FileEffect("ab/deep/", EffectKind.DELETED, DIR_HASH)
    reused = dir_effects({"b": 1, "b/new": 7, "b/new/er": 2}, {"ab/deep": 7}, [])
    assert deleted in reused and FileEffect("b/new/er/", EffectKind.CREATED, "", DIR_HASH) in reused
    assert not any(e.kind is EffectKind.RENAMED for e in reused)
    # An empty directory moved, then a file made in it: the file, and the old path gone.
    created = FileEffect("new/f", EffectKind.CREATED, after_hash=sha(b"x"), size=1)
    moved = dir_effects({"new": 7}, {"empty": 7}, [created])
    assert moved == [FileEffect("empty/", EffectKind.DELETED, DIR_HASH)]
    # A directory moved with its files: their renames say it all, as before.
    file_moved = FileEffect("b/f", EffectKind.RENAMED, sha(b"x"), sha(b"x"), 1, renamed_from="a/f")
    assert dir_effects({"b": 7}, {"a": 7}, [file_moved]) == []
    # A move with nothing else under it stays one RENAMED.
    assert dir_effects({"b": 7}, {"a": 7}, []) == [
        FileEffect("b/", EffectKind.RENAMED, DIR_HASH, DIR_HASH, renamed_from="a/")
    ]


def test_a_directory_subtree_is_exact() -> None:
    dirs = DirectorySet()
    for inode, path in enumerate(["a", "a/b", "a/b/c", "ab", "ab/x", "z/deep/er"]):
        dirs.add(path, inode)
    # "ab" shares a prefix with "a" but is not below it; "z" is not a member, its
    # descendant is (its parent was never listed, e.g. an ignored directory).
    assert dirs.subtree(["a"]) == {"a", "a/b", "a/b/c"}
    assert dirs.subtree(["a/b", "a"]) == {"a", "a/b", "a/b/c"}
    assert dirs.subtree(["z"]) == {"z/deep/er"}
    assert dirs.subtree(["missing", "a/b/c/d"]) == set()
    assert dirs.subtree([""]) == set(dirs) and len(dirs) == 6
    # Removing a member leaves its descendants found; removing the last one below a
    # non-member ancestor unlinks that ancestor.
    assert dirs.pop("a/b") == 1
    assert dirs.subtree(["a"]) == {"a", "a/b/c"}
    dirs.pop("z/deep/er")
    assert dirs.subtree(["z"]) == set() and "z" not in dirs._children
    dirs.add("a/b", 9)  # back, as a directory renamed to its old name would be
    assert dirs.subtree(["a/b"]) == {"a/b", "a/b/c"}
    dirs.add("a/b", 10)  # the same path, a new inode: replaced, not linked twice
    assert dirs.pop("a/b") == 10 and dirs.subtree(["a"]) == {"a", "a/b/c"}


def test_probe_files_links_and_others(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"hello")
    os.symlink("f", tmp_path / "link")
    os.symlink("/etc/passwd", tmp_path / "out")
    os.mkfifo(tmp_path / "fifo")
    f = probe(tmp_path / "f")
    assert f is not None and f.hash == sha(b"hello") and f.size == 5 and not f.is_link
    # Links are recorded by their target, never followed (in or out of the workspace).
    assert content_hash(tmp_path / "link") == "symlink:f"
    assert content_hash(tmp_path / "out") == "symlink:/etc/passwd"
    assert probe(tmp_path / "fifo") is None  # and does not block opening it
    assert probe(tmp_path) is None
    assert content_hash(tmp_path / "absent") == ""
    # Just written: within the racy window, so a later stat match will not be trusted.
    assert f.racy


def test_index_persists_and_finds_subtrees(tmp_path: Path) -> None:
    db = tmp_path / "state" / "i.sqlite"
    index = HashIndex(db, tmp_path)
    assert not index.persisted
    index.update({"a/b/c": entry(b"1"), "a/d": entry(b"2"), "e": entry(b"3")})
    assert sorted(index.under("a")) == ["a/b/c", "a/d"]
    index.update({"a/b/c": None})
    assert index.under("a/b") == [] and index.under("a") == ["a/d"]
    index.close()
    again = HashIndex(db, tmp_path)
    assert again.persisted
    assert dict(again.items()) == {"a/d": entry(b"2"), "e": entry(b"3")}
    assert sorted(again.under("")) == ["a/d", "e"]
    again.close()
    # An index recorded for another root is not trusted.
    other = HashIndex(db, tmp_path / "elsewhere")
    assert not other.persisted and len(other) == 0
    other.close()


def test_an_lstat_vouches_only_for_the_very_same_file(tmp_path: Path) -> None:
    """What a file changed while the daemon was down can keep, and still be re-read.

    A replacement can keep the size and restore the mtime (``touch -r``); the ctime and
    the inode are what is left to tell, and a racy entry is read whatever its stat says.
    """
    (tmp_path / "f").write_bytes(b"real")
    st = os.lstat(tmp_path / "f")
    recorded = IndexEntry(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, b"d")
    index = HashIndex(tmp_path / "i.sqlite", tmp_path)
    variants = {
        "same": recorded,
        "size": replace(recorded, size=st.st_size + 1),
        "mtime": replace(recorded, mtime_ns=st.st_mtime_ns - 1),
        "ctime": replace(recorded, ctime_ns=st.st_ctime_ns - 1),
        "inode": replace(recorded, inode=st.st_ino + 1),
        "link": replace(recorded, is_link=True),
        "racy": replace(recorded, racy=True),
    }
    index.update(variants)
    index.close()
    again = HashIndex(tmp_path / "i.sqlite", tmp_path)  # the rows as a restart reads them
    seen: set[str] = set()
    paths = [*variants, "new"]
    stale = again.unvouched([(paths, [st] * len(paths))], seen)
    assert [path for path, _ in stale] == ["size", "mtime", "ctime", "inode", "link", "racy", "new"]
    assert seen == {*variants, "new"}
    assert dict(again.items()) == variants
    again.close()


def test_stat_scan_trusts_stat_except_for_racy_entries(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"real")
    st = os.lstat(tmp_path / "f")
    stale = IndexEntry(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, b"stale")
    index = HashIndex(tmp_path / "i.sqlite", tmp_path)
    index.update({"f": stale})
    # Same size, mtime, ctime and inode as recorded: the entry is trusted as is.
    assert stat_scan(index, str(tmp_path), PathFilter(("*.sqlite*",))) == {}
    # The same entry recorded within the racy window must be compared by content.
    index.update(
        {"f": IndexEntry(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, b"x", racy=True)}
    )
    changes = stat_scan(index, str(tmp_path), PathFilter(("*.sqlite*",)))
    assert set(changes) == {"f"}
    after = changes["f"]
    assert after is not None and after.hash == sha(b"real")
    index.close()


def test_a_commits_file_events_are_dropped_up_to_the_next_cookie_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The observer's reading thread drops the named files' events (not a directory's
    at such a name) and stops at the first file made in the cookie directory, or at
    anything that could move that directory, in the kernel's order of events."""
    handled: list[InotifyEvent] = []
    monkeypatch.setattr(InotifyFD, "__init__", lambda self: None)  # events are handed in
    monkeypatch.setattr(InotifyFD, "handle_event", lambda self, event: handled.append(event))
    overflows: list[bool] = []
    fd = _InotifyFD(lambda: overflows.append(True), lambda: None)
    root, parent, cookies, sub = 1, 2, 3, 4
    skipping = _Skipping(
        frozenset({(root, b"a.txt"), (sub, b"b.txt")}),
        cookies,
        frozenset({(root, b".shellward"), (parent, b"cookies"), (root, b""), (parent, b"")}),
    )
    create, delete, isdir = (
        InotifyConstants.IN_CREATE,
        InotifyConstants.IN_DELETE,
        InotifyConstants.IN_ISDIR,
    )

    def feed(*events: InotifyEvent) -> list[InotifyEvent]:
        handled.clear()
        fd.skipping = skipping
        for event in events:
            fd.handle_event(event)
        return list(handled)

    a, b = InotifyEvent(root, create, 0, b"a.txt"), InotifyEvent(sub, create, 0, b"b.txt")
    other = InotifyEvent(root, create, 0, b"c.txt")
    a_dir = InotifyEvent(root, create | isdir, 0, b"a.txt")
    opening_removed = InotifyEvent(cookies, delete, 0, b"open-1")
    closing = InotifyEvent(cookies, create, 0, b"close-1")
    assert feed(a, b, other, a_dir, opening_removed) == [other, a_dir, opening_removed]
    assert fd.skipping is skipping
    assert feed(a, closing, a, b) == [closing, a, b]
    assert fd.skipping is None
    # A new directory's own event (its mode set) is not on the way: it changes nothing.
    attrib = InotifyEvent(5, InotifyConstants.IN_ATTRIB | isdir, 0, b"")
    assert feed(attrib, a) == [attrib]
    for moved in (
        InotifyEvent(root, delete | isdir, 0, b".shellward"),
        InotifyEvent(parent, delete | isdir, 0, b"cookies"),
        InotifyEvent(cookies, InotifyConstants.IN_DELETE_SELF, 0, b""),
        InotifyEvent(parent, InotifyConstants.IN_MOVE_SELF, 0, b""),
    ):
        assert feed(b, moved, b) == [moved, b]
    assert feed(b, InotifyEvent(-1, InotifyConstants.IN_Q_OVERFLOW, 0, b""), b) == [b]
    assert overflows == [True]


def test_stat_scan_finds_a_deletion_behind_as_many_new_files(tmp_path: Path) -> None:
    """The walk sees as many files as the index holds, yet one of them is gone: the new
    file must not stand in for it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("a", "b", "c"):
        (ws / name).write_bytes(name.encode())
    index = HashIndex(tmp_path / "i.sqlite", ws)
    index.update(stat_scan(index, str(ws), PathFilter(())))
    assert sorted(index) == ["a", "b", "c"]
    assert stat_scan(index, str(ws), PathFilter(())) == {}
    (ws / "b").unlink()
    (ws / "d").write_bytes(b"d")
    changes = stat_scan(index, str(ws), PathFilter(()))
    assert set(changes) == {"b", "d"} and changes["b"] is None
    added = changes["d"]
    assert added is not None and added.hash == sha(b"d")
    index.close()
