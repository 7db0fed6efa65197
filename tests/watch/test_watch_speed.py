"""The mechanisms that make the write detector fast must not change what it records.

Filesystem stamps decide which entries are racy, probes reuse a walk's lstat, large files
are hashed on a thread pool, the index links its directories in bulk and writes in path
order: each is checked here against the plain, slow way of getting the same answer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import shellwardd.watch.scan as scan
from shellwardd.watch import WorkspaceMonitor
from shellwardd.watch.hashing import RACY_WINDOW_NS, IndexEntry, Stamp, fs_stamp, probe
from shellwardd.watch.index import HashIndex
from shellwardd.watch.paths import PathFilter
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
