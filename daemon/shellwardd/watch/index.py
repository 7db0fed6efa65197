"""The persisted hash index of one workspace: path → IndexEntry for every indexed file.

The working copy lives in memory (a dict, plus a directory → children map so that the
files under a deleted or moved directory are found without scanning every key); every
change is written through to SQLite in the same step, so a restart only has to load the
rows and re-stat the tree. The database uses WAL with ``synchronous=NORMAL``: a power
loss may lose the last few updates, never consistency, and the restart re-validation
against the disk repairs whatever was lost.

Choices, and why:

- **Rows, not entries, in memory.** The dict holds each file's row exactly as SQLite
  returns it (a plain tuple); an :class:`~.hashing.IndexEntry` is built only when one is
  asked for. A restart loads every row but reads only a few hundred entries after it, and
  building 100k frozen dataclasses took longer than fetching the rows (measured at 100k
  files: 0.2-0.7 s against 0.03-0.05 s for the dict of rows).
- **The stat rule lives here** (:meth:`HashIndex.unvouched`): a re-validation compares
  every file's lstat with its row in one loop, without building anything per file.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .hashing import IndexEntry

# Bump when the meaning of a column changes; an index in another format is rebuilt.
SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    digest BLOB NOT NULL,
    is_link INTEGER NOT NULL,
    racy INTEGER NOT NULL
) WITHOUT ROWID;
"""


def index_db_path(state_dir: Path, root: Path) -> Path:
    """One database per workspace, named after its root, so workspaces share a state dir."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return state_dir / f"watch-index-{digest}.sqlite"


# One row of the files table, in its column order: path, size, mtime_ns, ctime_ns,
# inode, digest, is_link, racy (the last two 0 or 1).
_Row = tuple[str, int, int, int, int, bytes, int, int]


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _entry(row: _Row) -> IndexEntry:
    _, size, mtime_ns, ctime_ns, inode, digest, is_link, racy = row
    return IndexEntry(size, mtime_ns, ctime_ns, inode, digest, bool(is_link), bool(racy))


def _row(path: str, entry: IndexEntry) -> _Row:
    return (
        path,
        entry.size,
        entry.mtime_ns,
        entry.ctime_ns,
        entry.inode,
        entry.digest,
        int(entry.is_link),
        int(entry.racy),
    )


class HashIndex:
    """path → IndexEntry, in memory and in SQLite. Not thread-safe: the monitor locks."""

    def __init__(self, db_path: Path, root: Path) -> None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._children: dict[str, set[str]] = {}
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        expected = {"schema": SCHEMA_VERSION, "root": str(root)}
        if meta != expected:
            with self._db:
                self._db.execute("BEGIN")
                self._db.execute("DELETE FROM files")
                self._db.execute("DELETE FROM meta")
                self._db.executemany("INSERT INTO meta VALUES (?, ?)", expected.items())
        self.persisted = meta == expected
        rows: Any = self._db.execute("SELECT * FROM files")
        self._rows: dict[str, _Row] = {row[0]: row for row in rows}
        self._link(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, path: object) -> bool:
        return path in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def get(self, path: str) -> IndexEntry | None:
        row = self._rows.get(path)
        return None if row is None else _entry(row)

    def items(self) -> Iterator[tuple[str, IndexEntry]]:
        return ((path, _entry(row)) for path, row in self._rows.items())

    def unvouched(
        self, found: Iterable[tuple[str, os.stat_result]], seen: set[str]
    ) -> list[tuple[str, os.stat_result]]:
        """The (path, lstat) pairs of ``found`` whose lstat does not vouch for the path's
        entry, so that its content must be read; every path of ``found`` goes into ``seen``.

        An lstat vouches for an entry that is not racy (see :mod:`.hashing`) and has the
        same kind (file or link), size, mtime, ctime and inode: git's rule for trusting its
        index. Runs once per file of the tree on a restart, so it reads the rows directly.
        """
        rows = self._rows
        islink = stat.S_ISLNK
        stale = []
        for path, st in found:
            seen.add(path)
            row = rows.get(path)
            if (
                row is None
                or row[7]
                or row[1] != st.st_size
                or row[2] != st.st_mtime_ns
                or row[3] != st.st_ctime_ns
                or row[4] != st.st_ino
                or row[6] != islink(st.st_mode)
            ):
                stale.append((path, st))
        return stale

    def under(self, directory: str) -> list[str]:
        """Every indexed path strictly below ``directory`` ("" is the root)."""
        found: list[str] = []
        stack = [directory]
        while stack:
            for child in self._children.get(stack.pop(), ()):
                if child in self._rows:
                    found.append(child)
                if child in self._children:
                    stack.append(child)
        return found

    def update(self, changes: Mapping[str, IndexEntry | None]) -> None:
        """Apply ``changes`` (None removes a path) in memory and in one SQLite transaction."""
        if not changes:
            return
        rows = []
        gone = []
        added = []
        # In path order: SQLite's B-tree takes sorted keys several times faster.
        for path in sorted(changes):
            entry = changes[path]
            if entry is None:
                if path in self._rows:
                    self._drop(path)
                    gone.append((path,))
            else:
                if path not in self._rows:
                    added.append(path)
                row = self._rows[path] = _row(path, entry)
                rows.append(row)
        self._link(added)
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?)", rows)
            self._db.executemany("DELETE FROM files WHERE path = ?", gone)

    def close(self) -> None:
        self._db.close()

    def _link(self, paths: Iterable[str]) -> None:
        """Enter newly indexed ``paths`` into the directory → children map.

        One pass files each path under its parent; only the directories that pass
        creates are then linked upwards, so a bulk load costs one dict step per file.
        """
        children = self._children
        new_dirs = []
        for path in paths:
            parent = path.rpartition("/")[0]
            siblings = children.get(parent)
            if siblings is None:
                children[parent] = {path}
                new_dirs.append(parent)
            else:
                siblings.add(path)
        for directory in new_dirs:
            child = directory
            while child:
                parent = _parent(child)
                siblings = children.get(parent)
                if siblings is None:
                    children[parent] = {child}
                elif child in siblings:
                    break
                else:
                    siblings.add(child)
                child = parent

    def _drop(self, path: str) -> None:
        del self._rows[path]
        child = path
        # Prune directories left without indexed files, so that `under` stays exact. A
        # name can briefly be both a file and a directory within one batch of changes
        # (a file replaced by a directory): it stays linked while either is still there.
        while child and child not in self._rows and not self._children.get(child):
            self._children.pop(child, None)
            self._children[_parent(child)].discard(child)
            child = _parent(child)
