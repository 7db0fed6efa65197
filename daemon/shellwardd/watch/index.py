"""The persisted hash index of one workspace: path → IndexEntry for every indexed file.

The working copy lives in memory (a dict, plus a directory → children map so that the
files under a deleted or moved directory are found without scanning every key); every
change is written through to SQLite in the same step, so a restart only has to load the
index and re-stat the tree. The database uses WAL with ``synchronous=NORMAL``: a power
loss may lose the last few updates, never consistency, and the restart re-validation
against the disk repairs whatever was lost.

Choices, and why:

- **One snapshot blob and a journal, not a table of rows.** Loading 100k rows from
  SQLite took 0.24-0.31 s, longer than ``git status`` on the whole tree; reading one
  blob of packed columns (:func:`_pack`) and unpacking it takes 0.12-0.16 s, most of it
  building the rows kept in memory. Changes are written as journal rows (a deletion is
  a row of NULLs) in the transaction that makes them, so a call's update stays small;
  when the journal has grown past an eighth of the index (:data:`_MIN_JOURNAL` at
  least), or one update is that large (a cold build), the same transaction writes a
  fresh snapshot and empties the journal instead. Loading applies the journal over the
  snapshot. A snapshot that does not unpack whole (truncated, trailing bytes, a path
  twice, another format) is dropped and the workspace indexed afresh: nothing is
  trusted from it.
- **Rows, not entries, in memory.** The dict holds each file's row as a plain tuple; an
  :class:`~.hashing.IndexEntry` is built only when one is asked for. A restart loads
  every row but reads only a few hundred entries after it, and building 100k frozen
  dataclasses took longer than loading the rows (0.2-0.7 s against 0.03-0.05 s).
- **The directory map is built on first use.** A restart never asks for a subtree; the
  first call that does pays for it (about 0.04 s at 100k files), once.
- **The stat rule lives here** (:meth:`HashIndex.unvouched`): a re-validation compares
  every file's lstat with its row in one plain loop, without building anything per
  file (0.07-0.08 s for 100k files). The same rule in bulk, with ``map`` and
  ``compress`` over a batch, measured slower (0.09-0.13 s): it builds a tuple of
  fields per file on both sides before comparing them.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sqlite3
import stat
import struct
import sys
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

from .hashing import IndexEntry

# Bump when the meaning of a column or the snapshot's layout changes; an index in another
# format is rebuilt.
SCHEMA_VERSION = "2"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 0), data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
    path BLOB PRIMARY KEY,
    size INTEGER,
    mtime_ns INTEGER,
    ctime_ns INTEGER,
    inode INTEGER,
    digest BLOB,
    is_link INTEGER,
    racy INTEGER
) WITHOUT ROWID;
"""

# The journal is folded into a new snapshot once it holds more rows than an eighth of the
# index, and never below this many: a snapshot of 100k files is 9 MB to pack and write
# (0.1-0.15 s).
_MIN_JOURNAL = 4096

# The snapshot: a header (magic, file count, byte length of the paths), then the paths
# (file-system encoded, NUL-separated: a path cannot hold NUL), then one packed column per
# field in machine byte order (the meta table records it), the digests last, with their
# lengths before them (a symlink's digest is its target, an unreadable file's is empty).
_MAGIC = b"shellward-index\0"
_HEADER = struct.Struct("<16sQQ")
_COLUMNS = ("q", "q", "q", "Q", "B", "B")  # size, mtime_ns, ctime_ns, inode, is_link, racy
_LENGTHS = "I"


def index_db_path(state_dir: Path, root: Path) -> Path:
    """One database per workspace, named after its root, so workspaces share a state dir."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return state_dir / f"watch-index-{digest}.sqlite"


# One row of the files table, in its column order: path, size, mtime_ns, ctime_ns,
# inode, digest, is_link, racy (the last two 0 or 1).
_Row = tuple[str, int, int, int, int, bytes, int, int]


_ROW_PATH = itemgetter(0)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _entry(row: _Row) -> IndexEntry:
    _, size, mtime_ns, ctime_ns, inode, digest, is_link, racy = row
    return IndexEntry(size, mtime_ns, ctime_ns, inode, digest, bool(is_link), bool(racy))


# An entry's fields in row order (is_link and racy as bools, which SQLite and the
# snapshot store as 0 and 1).
_ENTRY_FIELDS = attrgetter("size", "mtime_ns", "ctime_ns", "inode", "digest", "is_link", "racy")


def _pack(rows: Collection[_Row]) -> bytes:
    """The snapshot of ``rows`` (see :data:`_MAGIC` for the layout)."""
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * 8
    paths, digests = columns[0], columns[5]
    names = os.fsencode("\0".join(paths))
    fields = (*columns[1:5], *columns[6:8])
    return b"".join(
        (
            _HEADER.pack(_MAGIC, len(paths), len(names)),
            names,
            *(array(code, values).tobytes() for code, values in zip(_COLUMNS, fields, strict=True)),
            array(_LENGTHS, map(len, digests)).tobytes(),
            *digests,
        )
    )


def _unpack(data: bytes) -> dict[str, _Row]:
    """The rows of a snapshot; ValueError if it is not one, whole and consistent."""
    if len(data) < _HEADER.size:
        raise ValueError("snapshot shorter than its header")
    magic, count, names_size = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not a snapshot of this format")
    view = memoryview(data)
    offset = _HEADER.size

    def take(size: int) -> memoryview:
        nonlocal offset
        chunk = view[offset : offset + size]
        if len(chunk) != size:
            raise ValueError("snapshot truncated")
        offset += size
        return chunk

    def column(code: str) -> array[int]:
        values = array(code)
        values.frombytes(take(count * values.itemsize))
        return values

    names = os.fsdecode(bytes(take(names_size)))
    paths = names.split("\0") if count else []
    if len(paths) != count:
        raise ValueError("snapshot paths do not match its file count")
    fields = [column(code) for code in _COLUMNS]
    ends = list(itertools.accumulate(column(_LENGTHS)))
    blob = bytes(take(ends[-1] if ends else 0))
    if offset != len(data):
        raise ValueError("snapshot has trailing bytes")
    digests = [blob[start:end] for start, end in itertools.pairwise([0, *ends])]
    rows = zip(paths, *fields[:4], digests, *fields[4:], strict=True)
    loaded: dict[str, _Row] = dict(zip(paths, rows, strict=True))
    if len(loaded) != count:
        raise ValueError("snapshot repeats a path")
    return loaded


class HashIndex:
    """path → IndexEntry, in memory and in SQLite. Not thread-safe: the monitor locks."""

    def __init__(self, db_path: Path, root: Path) -> None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        # Built on first use (see the module docstring); None until then.
        self._children: dict[str, set[str]] | None = None
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        expected = {"schema": SCHEMA_VERSION, "root": str(root), "byteorder": sys.byteorder}
        self._rows: dict[str, _Row] = {}
        # Journal rows written since the last snapshot (an upper bound: a path written
        # twice counts twice).
        self._journaled = 0
        self.persisted = meta == expected and self._load()
        if not self.persisted:
            with self._db:
                self._db.execute("BEGIN")
                self._db.execute("DROP TABLE IF EXISTS files")  # schema 1
                self._db.execute("DELETE FROM snapshot")
                self._db.execute("DELETE FROM journal")
                self._db.execute("DELETE FROM meta")
                self._db.executemany("INSERT INTO meta VALUES (?, ?)", expected.items())

    def _load(self) -> bool:
        """Read the snapshot and apply the journal; False if the snapshot is unusable."""
        found = self._db.execute("SELECT data FROM snapshot").fetchone()
        try:
            rows = {} if found is None else _unpack(found[0])
        except (ValueError, TypeError):
            return False
        journal: Any = self._db.execute("SELECT * FROM journal")
        for row in journal:
            self._journaled += 1
            path = os.fsdecode(row[0])
            if row[1] is None:
                rows.pop(path, None)
            else:
                rows[path] = (path, *row[1:])
        self._rows = rows
        return True

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
        self, found: Iterable[tuple[list[str], list[os.stat_result]]], seen: set[str]
    ) -> list[tuple[str, os.stat_result]]:
        """The (path, lstat) pairs of ``found`` (batches of paths and their lstats) whose
        lstat does not vouch for the path's entry, so that its content must be read;
        every path of ``found`` goes into ``seen``.

        An lstat vouches for an entry that is not racy (see :mod:`.hashing`) and has the
        same kind (file or link), size, mtime, ctime and inode: git's rule for trusting its
        index. Runs once per file of the tree on a restart, so it reads the rows directly.
        """
        rows = self._rows
        islink = stat.S_ISLNK
        stale = []
        for paths, sts in found:
            seen.update(paths)
            for path, st in zip(paths, sts, strict=True):
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
        children = self._tree()
        found: list[str] = []
        stack = [directory]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child in self._rows:
                    found.append(child)
                if child in children:
                    stack.append(child)
        return found

    def update(self, changes: Mapping[str, IndexEntry | None]) -> None:
        """Apply ``changes`` (None removes a path) in memory and in one SQLite transaction."""
        if not changes:
            return
        gone = [path for path, entry in changes.items() if entry is None and path in self._rows]
        written: list[_Row] = [
            (path, *_ENTRY_FIELDS(entry)) for path, entry in changes.items() if entry is not None
        ]
        for path in gone:
            self._drop(path)
        if self._children is not None:
            self._link(self._children, [row[0] for row in written if row[0] not in self._rows])
        self._rows.update(zip(map(_ROW_PATH, written), written, strict=True))
        self._journaled += len(written) + len(gone)
        with self._db:
            self._db.execute("BEGIN")
            if self._journaled > max(_MIN_JOURNAL, len(self._rows) // 8):
                self._db.execute("DELETE FROM journal")
                self._db.execute(
                    "INSERT OR REPLACE INTO snapshot VALUES (0, ?)", (_pack(self._rows.values()),)
                )
                self._journaled = 0
            else:
                # Paths as bytes: a file name need not be UTF-8, and SQLite's TEXT would
                # refuse it. In path order: the B-tree takes sorted keys several times faster.
                journal = sorted((os.fsencode(row[0]), *row[1:]) for row in written)
                deleted = sorted((os.fsencode(path),) for path in gone)
                self._db.executemany(
                    "INSERT OR REPLACE INTO journal VALUES (?,?,?,?,?,?,?,?)", journal
                )
                self._db.executemany("INSERT OR REPLACE INTO journal (path) VALUES (?)", deleted)

    def close(self) -> None:
        self._db.close()

    def _tree(self) -> dict[str, set[str]]:
        if self._children is None:
            self._children = {}
            self._link(self._children, self._rows)
        return self._children

    @staticmethod
    def _link(children: dict[str, set[str]], paths: Iterable[str]) -> None:
        """Enter newly indexed ``paths`` into the directory → ``children`` map.

        One pass files each path under its parent; only the directories that pass
        creates are then linked upwards, so a bulk load costs one dict step per file.
        """
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
        children = self._children
        if children is None:
            return
        child = path
        # Prune directories left without indexed files, so that `under` stays exact. A
        # name can briefly be both a file and a directory within one batch of changes
        # (a file replaced by a directory): it stays linked while either is still there.
        while child and child not in self._rows and not children.get(child):
            children.pop(child, None)
            children[_parent(child)].discard(child)
            child = _parent(child)
