"""Whole-tree passes: the walk, and the stat scan that brings the index in line with disk.

The stat scan is what the cold build, the restart re-validation and the fallback after
lost events share: walk the tree, lstat every indexed path, re-hash only the files whose
stat no longer vouches for their entry (changed, new, or racy), and drop the entries of
files that are gone. These are the only code paths whose cost grows with the size of the
workspace; the per-call path never calls them unless events were lost.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from .hashing import IndexEntry, probe
from .index import HashIndex
from .paths import PathFilter, PathKind

Changes = dict[str, IndexEntry | None]
ProgressFn = Callable[[int, int], None]

# hashlib and os.read release the GIL, so a few threads hash in parallel; a batch per
# task keeps the executor's per-task overhead small against ~15 µs of work per file.
_HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
_BATCH = 256


def join(root: str, path: str) -> str:
    return f"{root}/{path}" if path else root


def walk(root: str, pfilter: PathFilter, start: str = "") -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every INDEXED regular file and symlink at or below ``start``.

    Symlinked directories are recorded as links, never entered. ``start`` must itself
    classify as INDEXED; if it is a file, only that file is yielded.
    """
    stack = [start]
    while stack:
        directory = stack.pop()
        try:
            entries = os.scandir(join(root, directory))
        except NotADirectoryError:
            try:
                st = os.lstat(join(root, directory))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                yield directory, st
            continue
        except (FileNotFoundError, PermissionError):
            continue
        with entries:
            for entry in entries:
                path = f"{directory}/{entry.name}" if directory else entry.name
                if pfilter.child_kind(path, entry.name) is not PathKind.INDEXED:
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(path)
                    elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                        yield path, entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while we walked: the scan counts it as gone


def probe_many(
    root: str, paths: list[str], on_progress: Callable[[int], None] | None = None
) -> list[IndexEntry | None]:
    """probe() every path, in parallel batches; results in the order of ``paths``."""
    results: list[IndexEntry | None] = [None] * len(paths)

    def run(start: int) -> int:
        stop = min(start + _BATCH, len(paths))
        for i in range(start, stop):
            results[i] = probe(join(root, paths[i]))
        return stop - start

    if len(paths) <= _BATCH:
        run(0)
        if on_progress is not None:
            on_progress(len(paths))
        return results
    with ThreadPoolExecutor(_HASH_THREADS, thread_name_prefix="shellward-hash") as pool:
        for done in pool.map(run, range(0, len(paths), _BATCH)):
            if on_progress is not None:
                on_progress(done)
    return results


def stat_scan(
    index: HashIndex,
    root: str,
    pfilter: PathFilter,
    start: str = "",
    on_progress: ProgressFn | None = None,
) -> Changes:
    """What must change in ``index`` for the subtree at ``start`` to match the disk.

    ``on_progress(done, total)`` is called as files are checked; ``total`` is known once
    the walk has finished.
    """
    changes: Changes = {}
    seen: set[str] = set()
    stale: list[str] = []
    for path, st in walk(root, pfilter, start):
        seen.add(path)
        old = index.get(path)
        if old is None or old.is_link != stat.S_ISLNK(st.st_mode) or not old.same_stat(st):
            stale.append(path)
    total = len(seen)
    done = total - len(stale)

    def advance(count: int) -> None:
        nonlocal done
        done += count
        if on_progress is not None:
            on_progress(done, total)

    advance(0)
    for path, new in zip(stale, probe_many(root, stale, advance), strict=True):
        if new != index.get(path):
            changes[path] = new
    for path in index.under(start) if start else list(index):
        if path not in seen:
            changes[path] = None
    if start and start not in seen and start in index:
        changes[start] = None
    return changes
