"""The persisted hash index of one workspace: path → IndexEntry for every indexed file.

The working copy lives in memory (a dict, plus a directory → children map so that the
files under a deleted or moved directory are found without scanning every key); every
change is written through to SQLite in the same step, so a restart only has to load the
rows and re-stat the tree. The database uses WAL with ``synchronous=NORMAL``: a power
loss may lose the last few updates, never consistency, and the restart re-validation
against the disk repairs whatever was lost.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

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


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


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
        self._entries: dict[str, IndexEntry] = {
            path: IndexEntry(size, mtime_ns, ctime_ns, inode, digest, bool(is_link), bool(racy))
            for path, size, mtime_ns, ctime_ns, inode, digest, is_link, racy in self._db.execute(
                "SELECT * FROM files"
            )
        }
        self._link(self._entries)
        self._view = MappingProxyType(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: object) -> bool:
        return path in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    @property
    def entries(self) -> Mapping[str, IndexEntry]:
        """A read-only view of the entries, live (it changes only through ``update``)."""
        return self._view

    def get(self, path: str) -> IndexEntry | None:
        return self._entries.get(path)

    def items(self) -> Iterator[tuple[str, IndexEntry]]:
        return iter(self._entries.items())

    def under(self, directory: str) -> list[str]:
        """Every indexed path strictly below ``directory`` ("" is the root)."""
        found: list[str] = []
        stack = [directory]
        while stack:
            for child in self._children.get(stack.pop(), ()):
                if child in self._entries:
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
                if path in self._entries:
                    self._drop(path)
                    gone.append((path,))
            else:
                if path not in self._entries:
                    added.append(path)
                self._entries[path] = entry
                rows.append(
                    (
                        path,
                        entry.size,
                        entry.mtime_ns,
                        entry.ctime_ns,
                        entry.inode,
                        entry.digest,
                        int(entry.is_link),
                        int(entry.racy),
                    )
                )
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
        del self._entries[path]
        child = path
        # Prune directories left without indexed files, so that `under` stays exact. A
        # name can briefly be both a file and a directory within one batch of changes
        # (a file replaced by a directory): it stays linked while either is still there.
        while child and child not in self._entries and not self._children.get(child):
            self._children.pop(child, None)
            self._children[_parent(child)].discard(child)
            child = _parent(child)
