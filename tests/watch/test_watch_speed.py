"""The mechanisms that make the write detector fast must not change what it records.

Filesystem stamps decide which entries are racy, probes reuse a walk's lstat, large files
are hashed on a thread pool, the index links its directories in bulk and writes in path
order: each is checked here against the plain, slow way of getting the same answer.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

import shellwardd.watch.index as index_module
import shellwardd.watch.scan as scan
from shellwardd.watch import WorkspaceMonitor
from shellwardd.watch.hashing import RACY_WINDOW_NS, IndexEntry, Stamp, fs_stamp, probe
from shellwardd.watch.index import HashIndex
from shellwardd.watch.paths import PathFilter, PathKind
from shellwardd.watch.scan import probe_many, stat_scan, walk

from .conftest import fill, run, sha, summary

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")

NO_DB = PathFilter(("*.sqlite*",))


def test_fs_stamp_reads_the_filesystem_clock(tmp_path: Path) -> None:
    before = time.time_ns()
    stamp = fs_stamp(tmp_path)
    assert stamp is not None
    assert stamp.dev == os.lstat(tmp_path).st_dev
    assert abs(stamp.ns - before) < RACY_WINDOW_NS
    assert os.listdir(tmp_path) == []  # the stamp file is gone
    assert fs_stamp(tmp_path / "absent") is None


def test_racy_is_judged_against_the_stamp(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.write_bytes(b"written before the stamp")
    # Back-date it well past the clock's tick (the ctime stays: it cannot be set).
    past = time.time_ns() - 10 * 10**9
    os.utime(old, ns=(past, past))
    time.sleep(0.05)
    stamp = fs_stamp(tmp_path)
    assert stamp is not None
    new = tmp_path / "new"
    new.write_bytes(b"written after the stamp")

    settled = probe(old, stamp)
    assert settled is not None and not settled.racy
    # Changed at or after the stamp: a later change in the same tick would keep its stat.
    fresh = probe(new, stamp)
    assert fresh is not None and fresh.racy
    # Without a stamp, the wall-clock window still marks both as recent.
    unstamped = probe(old)
    assert unstamped is not None and unstamped.racy
    # A stamp from another device says nothing about this filesystem's clock.
    elsewhere = Stamp(stamp.dev + 1, stamp.ns)
    foreign = probe(old, elsewhere)
    assert foreign is not None and foreign.racy


def test_stamped_scan_trusts_settled_files_and_rehashes_racy_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    fill(tmp_path / "tree", 40)
    time.sleep(0.05)
    index = HashIndex(tmp_path / "i.sqlite", tmp_path)
    index.update(stat_scan(index, root, NO_DB, fs_stamp(tmp_path)))
    assert len(index) == 40 and not any(e.racy for _, e in index.items())
    stamp = fs_stamp(tmp_path)
    late = tmp_path / "late"
    late.write_bytes(b"late")
    index.update(stat_scan(index, root, NO_DB, stamp))
    racy = index.get("late")
    assert racy is not None and racy.racy

    probed: list[str] = []

    def counting_probe(
        path: str, stamp: Stamp | None = None, st: os.stat_result | None = None
    ) -> IndexEntry | None:
        probed.append(path)
        return probe(path, stamp, st)

    monkeypatch.setattr(scan, "probe", counting_probe)
    # A re-validation stats every file and reads only the racy one, which then settles.
    time.sleep(0.05)
    changes = stat_scan(index, root, NO_DB, fs_stamp(tmp_path))
    assert probed == [f"{root}/late"]
    settled = changes.pop("late")
    assert changes == {} and settled is not None and not settled.racy
    assert settled.same_content(racy)
    index.update({"late": settled})
    probed.clear()
    assert stat_scan(index, root, NO_DB, fs_stamp(tmp_path)) == {}
    assert probed == []
    # The racy-mtime case: same size, mtime, ctime and inode, other content. Only a racy
    # entry can be in that state, and it is compared by content.
    st = os.lstat(late)
    index.update(
        {"late": IndexEntry(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, b"x", racy=True)}
    )
    changes = stat_scan(index, root, NO_DB, fs_stamp(tmp_path))
    assert set(changes) == {"late"}
    entry = changes["late"]
    assert entry is not None and entry.hash == sha(b"late")
    index.close()


def test_probe_with_a_walk_lstat_matches_a_plain_probe(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"content")
    os.symlink("f", tmp_path / "link")
    stamp = fs_stamp(tmp_path)
    for path, st in walk(str(tmp_path), PathFilter()):
        assert probe(tmp_path / path, stamp, st) == probe(tmp_path / path, stamp)


def test_probe_with_a_stale_lstat_reads_the_current_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"first")
    stale = os.lstat(f)
    f.write_bytes(b"second, longer")
    entry = probe(f, None, stale)
    assert entry is not None and entry.hash == sha(b"second, longer")
    assert entry.size == os.lstat(f).st_size

    # Replaced since the lstat by something that is not a regular file.
    f.unlink()
    f.mkdir()
    assert probe(f, None, stale) is None
    f.rmdir()
    os.mkfifo(f)
    assert probe(f, None, stale) is None  # and does not block on the FIFO
    f.unlink()
    os.symlink("elsewhere", f)
    link = probe(f, None, stale)
    assert link is not None and link.hash == "symlink:elsewhere"
    f.unlink()
    assert probe(f, None, stale) is None


def test_pool_hashing_gives_the_serial_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = 3 * scan._LARGE_FILE // 2
    for i in range(6):
        (tmp_path / f"large{i}").write_bytes(os.urandom(big))
    fill(tmp_path / "small", 300)
    items: list[tuple[str, os.stat_result | None]] = list(walk(str(tmp_path), PathFilter()))
    items.append(("small/d000/f00000.txt", None))  # no lstat yet: probed like a small one
    stamp = fs_stamp(tmp_path)
    root = str(tmp_path)

    def probed(threads: int) -> tuple[list[IndexEntry | None], int]:
        monkeypatch.setattr(scan, "_HASH_THREADS", threads)
        reported: list[int] = []
        entries = probe_many(root, items, stamp, reported.append)
        return entries, sum(reported)

    pooled, pooled_count = probed(2)
    serial, serial_count = probed(1)
    assert pooled == serial == [probe(tmp_path / p, stamp) for p, _ in items]
    assert pooled_count == serial_count == len(items)

    class Abandon(Exception):
        pass

    def abandon(count: int) -> None:
        raise Abandon  # as the index build does when the monitor stops

    monkeypatch.setattr(scan, "_HASH_THREADS", 2)
    with pytest.raises(Abandon):
        probe_many(root, items, stamp, abandon)


def test_index_links_in_bulk_and_in_any_order(tmp_path: Path) -> None:
    def entry(digest: bytes) -> IndexEntry:
        return IndexEntry(1, 0, 0, 1, digest)

    db = tmp_path / "i.sqlite"
    index = HashIndex(db, tmp_path)
    index.update({"a": entry(b"file a"), "b/c/d": entry(b"1"), "b/e": entry(b"2")})
    # A file replaced by a directory and a directory emptied, in one batch.
    index.update({"b/e": None, "a/x": entry(b"3"), "a": None, "b/c/f": entry(b"4")})
    expected = {"": ["a/x", "b/c/d", "b/c/f"], "a": ["a/x"], "b": ["b/c/d", "b/c/f"]}
    for directory, paths in expected.items():
        assert sorted(index.under(directory)) == paths
    index.close()
    again = HashIndex(db, tmp_path)
    for directory, paths in expected.items():
        assert sorted(again.under(directory)) == paths
    assert dict(again.items()) == {"a/x": entry(b"3"), "b/c/d": entry(b"1"), "b/c/f": entry(b"4")}
    again.close()


def test_restart_after_a_settled_build_still_sees_offline_edits(ws: Path, state_dir: Path) -> None:
    files = fill(ws, 100)
    time.sleep(0.05)
    first = WorkspaceMonitor(ws, state_dir)
    first.start()
    assert first.wait_ready(30)
    assert not any(e.racy for e in first.snapshot().values())
    assert summary(run(first, "mkdir -p n/m && printf 1 > n/m/a && printf 2 > n/b")) == [
        ("created", "n/b"),
        ("created", "n/m/a"),
    ]
    first.stop()
    # Same size, mtime restored: only the ctime and the content tell.
    st = files[7].stat()
    files[7].write_bytes(files[7].read_bytes().upper())
    os.utime(files[7], ns=(st.st_atime_ns, st.st_mtime_ns))
    second = WorkspaceMonitor(ws, state_dir)
    second.start()
    try:
        assert second.wait_ready(30)
        rel = str(files[7].relative_to(ws))
        assert second.snapshot()[rel].hash == sha(files[7].read_bytes())
    finally:
        second.stop()


def _entry(n: int, **fields: object) -> IndexEntry:
    return replace(IndexEntry(n, n * 10, n * 10 + 1, 1000 + n, bytes([n]) * 32), **fields)


def _stored(db: Path) -> tuple[int, int]:
    """(snapshots, journal rows) in the index database."""
    with closing(sqlite3.connect(db)) as conn:
        snapshots = conn.execute("SELECT COUNT(*) FROM snapshot").fetchone()[0]
        journal = conn.execute("SELECT COUNT(*) FROM journal").fetchone()[0]
    return snapshots, journal


def test_snapshot_and_journal_give_back_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart reads the snapshot and applies the journal over it: every write, through
    journal rows, deletions and the fold of the journal into a new snapshot, comes back."""
    monkeypatch.setattr(index_module, "_MIN_JOURNAL", 4)
    db = tmp_path / "i.sqlite"
    expected = {f"d/f{i}": _entry(i) for i in range(40)}
    expected |= {
        "link": IndexEntry(4, 1, 2, 3, b"../a target", is_link=True),
        "unreadable": IndexEntry(5, -7, 6, 7, b""),  # before 1970, and no digest
        "racy": _entry(41, racy=True),
        "caf\u00e9/\u00fcml\u00e4ut": _entry(42),
        "nul\x01and spaces ": _entry(43),
        os.fsdecode(b"not utf-8 \xff"): _entry(44),
    }
    index = HashIndex(db, tmp_path)
    index.update(expected)
    assert _stored(db) == (1, 0)  # one large write: a snapshot, no journal

    def reopen(index: HashIndex) -> HashIndex:
        index.close()
        again = HashIndex(db, tmp_path)
        assert again.persisted and dict(again.items()) == expected
        return again

    index = reopen(index)
    # 46 files: the journal is folded once it holds more than 46 // 8 = 5 rows.
    steps: list[tuple[dict[str, IndexEntry | None], tuple[int, int]]] = [
        ({"d/f1": _entry(50), "new": _entry(51)}, (1, 2)),
        ({"d/f2": None, "racy": _entry(41)}, (1, 4)),
        ({"new": None, "d/f2": _entry(52)}, (1, 0)),  # back again; folded
        ({"d/f3": None, "d/f4": None, "link": _entry(53)}, (1, 3)),
        ({"d/f5": None, "absent": None}, (1, 4)),  # what was not there writes nothing
        ({os.fsdecode(b"\xfe journaled"): _entry(54)}, (1, 5)),
    ]
    for changes, stored in steps:
        index.update(changes)
        assert _stored(db) == stored
        for path, entry in changes.items():
            if entry is None:
                expected.pop(path, None)
            else:
                expected[path] = entry
        # In memory too: a rewritten path's new slot, not its old one, is what is read.
        assert dict(index.items()) == expected and set(index) == set(expected)
        index = reopen(index)
    reopen(index).close()


def test_a_long_running_index_reads_the_latest_entry_and_stays_compact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file rewritten, removed and written again many times without a restart: every
    read gives its latest entry, and the slots it left behind are dropped at each fold."""
    monkeypatch.setattr(index_module, "_MIN_JOURNAL", 4)
    db = tmp_path / "i.sqlite"
    index = HashIndex(db, tmp_path)
    index.update({f"f{i}": _entry(i) for i in range(10)})
    for n in range(100):
        index.update({"f0": None} if n % 7 == 3 else {"f0": _entry(100 + n)})
        latest = None if n % 7 == 3 else _entry(100 + n)
        assert index.get("f0") == latest and ("f0" in index) == (latest is not None)
        assert index.get("f1") == _entry(1) and len(index) == 9 + (latest is not None)
        # Bounded by the journal (folded past 4 rows here), not by the number of writes.
        assert len(index._columns) <= len(index) + 5
    index.close()
    again = HashIndex(db, tmp_path)
    assert again.get("f0") == _entry(199) and len(again) == 10
    again.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-1],
        lambda data: data + b"\0",
        lambda data: b"x" + data[1:],
        lambda data: data[:16] + (10**6).to_bytes(8, "little") + data[24:],
        lambda data: b"",
        lambda data: "text, not a blob",
        lambda data: index_module._pack(["f0"] * 2, [[1] * 2] * 6, [b"d"] * 2),
    ],
    ids=["truncated", "trailing", "magic", "count", "empty", "text", "repeated"],
)
def test_a_damaged_snapshot_is_dropped_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[bytes], object]
) -> None:
    monkeypatch.setattr(index_module, "_MIN_JOURNAL", 1)  # three files: a snapshot
    db = tmp_path / "i.sqlite"
    index = HashIndex(db, tmp_path)
    index.update({f"f{i}": _entry(i) for i in range(3)})
    index.close()
    with closing(sqlite3.connect(db)) as conn, conn:
        (data,) = conn.execute("SELECT data FROM snapshot").fetchone()
        conn.execute("UPDATE snapshot SET data = ?", (damage(data),))
    again = HashIndex(db, tmp_path)
    # Nothing is read from it: the monitor indexes the workspace afresh.
    assert not again.persisted and len(again) == 0
    assert _stored(db) == (0, 0)
    again.close()


def test_bulk_revalidation_reads_exactly_what_changed_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart's walk and comparison in bulk, across batch boundaries, against a
    fresh index of the same tree; and only the files whose lstat changed are read."""
    monkeypatch.setattr(scan, "_BATCH", 7)  # batches end inside directories
    ws = tmp_path / "ws"
    files = fill(ws, 60, per_dir=9)
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref\n")
    (ws / "skip.log").write_text("ignored\n")
    pfilter = PathFilter(("*.log",))
    root = str(ws)
    time.sleep(0.05)
    index = HashIndex(tmp_path / "state" / "i.sqlite", ws)
    index.update(stat_scan(index, root, pfilter, fs_stamp(tmp_path)))
    assert len(index) == 60 and not any(e.racy for _, e in index.items())

    def rel(path: Path) -> str:
        return str(path.relative_to(ws))

    # Size changed, mtime put back: only size and ctime tell.
    st = files[0].stat()
    files[0].write_bytes(files[0].read_bytes() + b"more")
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    # Same size, mtime put back: only the ctime tells.
    st = files[1].stat()
    files[1].write_bytes(files[1].read_bytes().upper())
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    files[2].unlink()  # replaced by a symlink
    os.symlink(files[3].name, files[2])
    files[4].unlink()  # deleted
    files[5].unlink()  # replaced by a directory
    (files[5] / "inner").mkdir(parents=True)
    (files[5] / "inner" / "x").write_text("x\n")
    (ws / "d000" / "new").write_text("new\n")  # added
    for path in files[9:18]:  # a directory replaced by a file
        path.unlink()
    (ws / "d001").rmdir()
    (ws / "d001").write_text("now a file\n")
    # Recorded racy (same stat, other content): read whatever its lstat says.
    racy = rel(files[30])
    recorded = index.get(racy)
    assert recorded is not None
    index.update({racy: replace(recorded, digest=b"stale", racy=True)})

    probed: list[str] = []

    def counting_probe(
        path: str, stamp: Stamp | None = None, st: os.stat_result | None = None
    ) -> IndexEntry | None:
        probed.append(path[len(root) + 1 :])
        return probe(path, stamp, st)

    monkeypatch.setattr(scan, "probe", counting_probe)
    index.update(stat_scan(index, root, pfilter, fs_stamp(tmp_path)))
    read = {rel(files[i]) for i in (0, 1, 2)} | {"d000/new", "d000/f00005.txt/inner/x"}
    assert sorted(probed) == sorted(read | {racy, "d001"})

    fresh = HashIndex(tmp_path / "state" / "fresh.sqlite", ws)
    fresh.update(stat_scan(fresh, root, pfilter, fs_stamp(tmp_path)))

    def recorded_state(idx: HashIndex) -> dict[str, IndexEntry]:
        return {path: replace(entry, racy=False) for path, entry in idx.items()}

    assert recorded_state(index) == recorded_state(fresh)
    link = index.get(rel(files[2]))
    assert link is not None and link.hash == f"symlink:{files[3].name}"
    assert rel(files[4]) not in index and "d001/f00009.txt" not in index
    index.close()
    fresh.close()


def test_walk_in_bulk_keeps_what_the_filter_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    for rel in [
        "a/b/keep.txt",
        "a/b/skip.pyc",
        "node_modules/pkg/index.js",
        "docs/page.tmp",
        "docs/page.md",
        "sub/docs/page.tmp",
        ".git/HEAD",
        "nested/.git/config",
        ".shellward/cookies/open-1",
        ".shellward/rules.toml",
    ]:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(rel)
    os.symlink("a", ws / "dirlink")  # a link, never entered
    os.mkfifo(ws / "fifo")  # neither file nor link
    pfilter = PathFilter(("node_modules", "*.pyc", "docs/*.tmp"))

    def expected() -> list[str]:
        """The slow way: classify every path; keep regular files and links."""
        kept = []
        for directory, dirs, names in os.walk(ws):  # lists links to directories in dirs
            base = os.path.relpath(directory, ws)
            prefix = "" if base == "." else f"{base}/"
            for name in [*names, *dirs]:
                full = f"{directory}/{name}"
                if pfilter.classify(prefix + name) is not PathKind.INDEXED:
                    continue
                if os.path.islink(full) or os.path.isfile(full):
                    kept.append(prefix + name)
            dirs[:] = [d for d in dirs if pfilter.classify(prefix + d) is PathKind.INDEXED]
        return sorted(kept)

    found = sorted(path for path, _ in walk(str(ws), pfilter))
    assert found == expected()
    assert "sub/docs/page.tmp" in found and "dirlink" in found and "a/b/dirlink" not in found

    # An entry that goes away between the listing and its lstat is skipped, not fatal.
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: [*listdir(path), "gone"])
    ghostly = sorted(path for path, _ in walk(str(ws), pfilter))
    monkeypatch.undo()
    assert ghostly == found
