"""Whole-tree passes: the walk, and the stat scan that brings the index in line with disk.

The stat scan is what the cold build, the restart re-validation and the fallback after
lost events share: walk the tree, lstat every indexed path, re-hash only the files whose
stat no longer vouches for their entry (changed, new, or racy), and drop the entries of
files that are gone. The walk's lstat is handed on to the hash, which then needs no
other stat than the fstat after reading. These are the only code paths whose cost grows
with the size of the workspace; the per-call path never calls them unless events were
lost.

Choices, and why: the walk works a directory at a time (``os.listdir``, then ``os.lstat``
over every entry through ``map``), not an entry at a time through ``os.scandir``: no
``DirEntry`` and no Python step per file (100k files: 0.27 s against 0.30 s). The lstat
calls themselves are most of what is left (0.18-0.20 s). Threads do not help on 2
cores: 100k lstats took 0.18 s on one thread and 0.20-0.22 s on 2-4 (the GIL changes
hands at every call). Neither does a walker in native code (``scandir-rs`` with full
stats: 0.32 s; its times are float seconds, too coarse to compare, and its ``ctime``
is the birth time, not the inode change time the stat rule needs), nor ``lstat``
relative to a directory descriptor (within noise).
"""

from __future__ import annotations

import operator
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from itertools import compress
from typing import Protocol

from .hashing import IndexEntry, Stamp, probe
from .index import HashIndex
from .paths import PathFilter, PathKind

Changes = dict[str, IndexEntry | None]
ProgressFn = Callable[[int, int], None]

# hashlib and os.read release the GIL, but a small file costs more in Python (open, fstat,
# bookkeeping: ~10 µs) than in hashing (~6 µs for 10 KB), and threads hashing small files
# mostly pass the GIL back and forth: measured on 2 cores, 10,000 files of 10 KB took 12%
# longer on 2 threads than on one. A large file is hashed GIL-free most of the time, so
# files from this size on go to a pool while the calling thread does the small ones
# (40 files of 4 MB: 148 ms on one thread, 62 ms on 2).
_HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
_LARGE_FILE = 256 * 1024
# How many small files between two progress reports.
_PROGRESS_EVERY = 256
# How many files a re-validation compares with the index at once: large enough that the
# bulk comparison's fixed cost vanishes, small enough to hold few lstats at a time.
_BATCH = 4096
_MODE = operator.attrgetter("st_mode")
_FILE_KINDS = frozenset((stat.S_IFREG, stat.S_IFLNK))


class TreeWatch(Protocol):
    """Watches that a walk adds as it goes (see :mod:`.observer`, "A second walk")."""

    def watch_dir(self, path: str) -> None:
        """Watch the directory ``path``; called just before the walk lists it."""

    def watch_tree(self, path: str) -> None:
        """Watch the subtree at ``path``, a child the walk does not enter."""


def join(root: str, path: str) -> str:
    return f"{root}/{path}" if path else root


def walk_dirs(
    root: str,
    pfilter: PathFilter,
    start: str = "",
    listed: set[str] | None = None,
    watch: TreeWatch | None = None,
) -> Iterator[tuple[list[str], list[os.stat_result]]]:
    """The paths and lstats of every INDEXED regular file and symlink at or below
    ``start``, one directory at a time.

    Symlinked directories are recorded as links, never entered. ``start`` must itself
    classify as INDEXED; if it is a file, only that file is yielded. Every directory
    listed on the way is added to ``listed``: a walk from one of them would find nothing
    more. A directory's entries are filtered, lstat'ed and sorted by kind in bulk (``map``
    runs the loop in C; ``os.lstat`` needs no ``DirEntry``), so the cost per file is
    little more than its lstat. With ``watch``, each directory is watched before it is
    listed, and each child left out by ``pfilter`` is handed to ``watch.watch_tree``.
    """
    stack = [start]
    while stack:
        directory = stack.pop()
        base = join(root, directory)
        if watch is not None:
            watch.watch_dir(directory)
        try:
            names = os.listdir(base)
        except NotADirectoryError:
            try:
                st = os.lstat(base)
            except FileNotFoundError:
                continue
            if stat.S_IFMT(st.st_mode) in _FILE_KINDS:
                yield [directory], [st]
            continue
        except (FileNotFoundError, PermissionError):
            continue
        if listed is not None:
            listed.add(directory)
        prefix = f"{directory}/" if directory else ""
        paths = list(map(prefix.__add__, names))
        if not pfilter.all_indexed(directory, paths, names):
            kept = [
                pfilter.child_kind(path, name) is PathKind.INDEXED
                for path, name in zip(paths, names, strict=True)
            ]
            if watch is not None:
                for path in compress(paths, map(operator.not_, kept)):
                    watch.watch_tree(path)
            paths, names = list(compress(paths, kept)), list(compress(names, kept))
        try:
            sts = list(map(os.lstat, map(f"{base}/".__add__, names)))
        except (FileNotFoundError, NotADirectoryError):
            paths, sts = _lstat_each(base, paths, names)
        kinds = list(map(stat.S_IFMT, map(_MODE, sts)))
        if kinds.count(stat.S_IFREG) == len(kinds):
            # Only regular files, as in most directories: nothing to sort out (4-10% of the
            # walk's CPU time at 100k files).
            yield paths, sts
            continue
        stack.extend(compress(paths, map(stat.S_IFDIR.__eq__, kinds)))
        files = list(map(_FILE_KINDS.__contains__, kinds))
        yield list(compress(paths, files)), list(compress(sts, files))


def _lstat_each(
    base: str, paths: list[str], names: list[str]
) -> tuple[list[str], list[os.stat_result]]:
    """The lstats of the entries of one directory that are still there."""
    found, sts = [], []
    for path, name in zip(paths, names, strict=True):
        try:
            sts.append(os.lstat(f"{base}/{name}"))
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed while we walked (or its directory was): the scan counts it as gone
        found.append(path)
    return found, sts


def walk(
    root: str, pfilter: PathFilter, start: str = "", listed: set[str] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every file :func:`walk_dirs` finds, one at a time."""
    for paths, sts in walk_dirs(root, pfilter, start, listed):
        yield from zip(paths, sts, strict=True)


def _batches(
    found: Iterable[tuple[list[str], list[os.stat_result]]],
) -> Iterator[tuple[list[str], list[os.stat_result]]]:
    """``found`` joined into batches of at least :data:`_BATCH` files (but the last)."""
    paths: list[str] = []
    sts: list[os.stat_result] = []
    for more_paths, more_sts in found:
        paths += more_paths
        sts += more_sts
        if len(paths) >= _BATCH:
            yield paths, sts
            paths, sts = [], []
    if paths:
        yield paths, sts


def probe_many(
    root: str,
    items: list[tuple[str, os.stat_result | None]],
    stamp: Stamp | None,
    on_progress: Callable[[int], None] | None = None,
) -> list[IndexEntry | None]:
    """probe() every (path, lstat or None); results in their order.

    ``on_progress(count)`` is called on the calling thread only, so that it may raise to
    abandon the work.
    """
    results: list[IndexEntry | None] = [None] * len(items)

    def run(i: int) -> None:
        path, st = items[i]
        results[i] = probe(join(root, path), stamp, st)

    def serial(indices: Iterable[int]) -> None:
        done = 0
        for i in indices:
            run(i)
            done += 1
            if on_progress is not None and done % _PROGRESS_EVERY == 0:
                on_progress(_PROGRESS_EVERY)
        if on_progress is not None and done % _PROGRESS_EVERY:
            on_progress(done % _PROGRESS_EVERY)

    large = [i for i, (_, st) in enumerate(items) if st is not None and st.st_size >= _LARGE_FILE]
    if len(large) < 2 or _HASH_THREADS < 2:
        serial(range(len(items)))
        return results
    on_pool = set(large)
    with ThreadPoolExecutor(_HASH_THREADS, thread_name_prefix="shellward-hash") as pool:
        futures = [pool.submit(run, i) for i in large]
        try:
            serial(i for i in range(len(items)) if i not in on_pool)
            for future in as_completed(futures):
                future.result()
                if on_progress is not None:
                    on_progress(1)
        finally:
            for future in futures:  # abandoned (on_progress raised): hash no more
                future.cancel()
    return results


def stat_scan(
    index: HashIndex,
    root: str,
    pfilter: PathFilter,
    stamp: Stamp | None = None,
    start: str = "",
    on_progress: ProgressFn | None = None,
    listed: set[str] | None = None,
    watch: TreeWatch | None = None,
) -> Changes:
    """What must change in ``index`` for the subtree at ``start`` to match the disk.

    Every directory the walk lists is added to ``listed`` (the index holds no directories:
    the detector keeps them apart, see :mod:`.detector`); with ``watch``, the walk adds
    the observer's watches as it goes (see :func:`walk_dirs`).

    ``stamp`` must have been taken before this call (see :mod:`.hashing`); without
    one, new entries are judged racy by the wall-clock window.
    ``on_progress(done, total)`` is called as files are checked; ``total`` is known once
    the walk has finished.
    """
    changes: Changes = {}
    seen: set[str] = set()
    stale: list[tuple[str, os.stat_result | None]] = []
    stale.extend(index.unvouched(_batches(walk_dirs(root, pfilter, start, listed, watch)), seen))
    total = len(seen)
    done = total - len(stale)

    def advance(count: int) -> None:
        nonlocal done
        done += count
        if on_progress is not None:
            on_progress(done, total)

    advance(0)
    for (path, _), new in zip(stale, probe_many(root, stale, stamp, advance), strict=True):
        if new != index.get(path):
            changes[path] = new
    # Whether every indexed path was seen is a look-up per path, in C and without building
    # a set: 4-6 ms at 100k files, where the set difference below takes 14-17 ms.
    if start or not seen.issuperset(index):
        for path in set(index.under(start) if start else index).difference(seen):
            changes[path] = None
    if start and start not in seen and start in index:
        changes[start] = None
    return changes
