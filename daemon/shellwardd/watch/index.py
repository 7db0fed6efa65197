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
  blob of packed columns (:func:`_pack`) and unpacking it takes a fraction of that
  (see "Columns" below). Changes are written as journal rows (a deletion is
  a row of NULLs) in the transaction that makes them, so a call's update stays small;
  when the journal has grown past an eighth of the index (:data:`_MIN_JOURNAL` at
  least), or one update is that large (a cold build), the same transaction writes a
  fresh snapshot and empties the journal instead. Loading applies the journal over the
  snapshot. A snapshot that does not unpack whole (truncated, trailing bytes, a path
  twice, another format) is dropped and the workspace indexed afresh: nothing is
  trusted from it.
- **Columns, not rows, in memory.** The index keeps the snapshot's columns as it loaded
  them: a dict path → slot, one list per stat field, and the digests in the snapshot's
  blob, sliced out when one is asked for; an :class:`~.hashing.IndexEntry` is built
  only when one is asked for. A restart reads every file's stat fields but only a few
  hundred entries after it: building a row tuple per file (and a digest per file) took
  0.07 s or more of a 0.12-0.18 s load of 100k files, which now takes 0.06-0.08 s;
  100k frozen dataclasses took 0.2-0.7 s. A
  changed file gets a new slot at the end of the columns; the slot it had stays unused
  until the next snapshot, which is written from the live slots and then loaded back
  in their place (unused slots are bounded by the journal, which is folded at an eighth
  of the index).
- **The directory map is built on first use.** A restart never asks for a subtree; the
  first call that does pays for it (about 0.04 s at 100k files), once.
- **The stat rule lives here** (:meth:`HashIndex.unvouched`): a re-validation compares
  every file's lstat with its columns in one plain loop, without building anything per
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
from operator import attrgetter
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


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


# An entry's fields in row order, without the path (is_link and racy as bools, which
# SQLite and the snapshot store as 0 and 1).
_ENTRY_FIELDS = attrgetter("size", "mtime_ns", "ctime_ns", "inode", "digest", "is_link", "racy")


class _Columns:
    """Every file's fields, one list per field, addressed by slot (see "Columns")."""

    def __init__(self, fields: list[list[int]], blob: bytes, ends: list[int]) -> None:
        # size, mtime_ns, ctime_ns, inode, is_link, racy: the order of _COLUMNS.
        self.fields = fields
        # The digests of the snapshot's slots lie in ``blob``: slot i's from ends[i] to
        # ends[i + 1]; those of slots added since are kept one by one.
        self._blob = blob
        self._ends = ends
        self._base = len(ends) - 1
        self._added: list[bytes] = []

    def __len__(self) -> int:
        return len(self.fields[0])

    def digest(self, slot: int) -> bytes:
        if slot < self._base:
            return self._blob[self._ends[slot] : self._ends[slot + 1]]
        return self._added[slot - self._base]

    def entry(self, slot: int) -> IndexEntry:
        size, mtime_ns, ctime_ns, inode, is_link, racy = (column[slot] for column in self.fields)
        return IndexEntry(
            size, mtime_ns, ctime_ns, inode, self.digest(slot), bool(is_link), bool(racy)
        )

    def extend(self, values: Collection[tuple[Any, ...]]) -> range:
        """Add rows of (size, mtime_ns, ctime_ns, inode, digest, is_link, racy); their slots."""
        first = len(self)
        if values:
            size, mtime_ns, ctime_ns, inode, digest, is_link, racy = zip(*values, strict=True)
            for column, added in zip(
                self.fields, (size, mtime_ns, ctime_ns, inode, is_link, racy), strict=True
            ):
                column.extend(added)
            self._added.extend(digest)
        return range(first, len(self))

    def pack(self, slots: Mapping[str, int]) -> bytes:
        """The snapshot of the files in ``slots`` (path → slot)."""
        if len(slots) == len(self):
            # No slot was overwritten or dropped since the columns were built, so the
            # paths are in slot order and the columns are the snapshot's as they are.
            fields: Iterable[Iterable[int]] = self.fields
            digests = self._digests()
        else:
            order = list(slots.values())
            fields = [list(map(column.__getitem__, order)) for column in self.fields]
            digests = list(map(self._digests().__getitem__, order))
        return _pack(list(slots), fields, digests)

    def _digests(self) -> list[bytes]:
        """Every slot's digest, in slot order."""
        blob = self._blob
        return [blob[start:end] for start, end in itertools.pairwise(self._ends)] + self._added


def _pack(paths: Collection[str], fields: Iterable[Iterable[int]], digests: list[bytes]) -> bytes:
    """The snapshot of ``paths`` with their ``fields`` (in :data:`_COLUMNS` order) and
    ``digests`` (see :data:`_MAGIC` for the layout)."""
    names = os.fsencode("\0".join(paths))
    return b"".join(
        (
            _HEADER.pack(_MAGIC, len(paths), len(names)),
            names,
            *(array(code, values).tobytes() for code, values in zip(_COLUMNS, fields, strict=True)),
            array(_LENGTHS, map(len, digests)).tobytes(),
            *digests,
        )
    )


def _unpack(data: bytes) -> tuple[dict[str, int], _Columns]:
    """The path → slot map and the columns of a snapshot; ValueError if it is not one,
    whole and consistent."""
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
    fields = [column(code).tolist() for code in _COLUMNS]
    ends = [0, *itertools.accumulate(column(_LENGTHS))]
    blob = bytes(take(ends[-1]))
    if offset != len(data):
        raise ValueError("snapshot has trailing bytes")
    slots = dict(zip(paths, range(count), strict=True))
    if len(slots) != count:
        raise ValueError("snapshot repeats a path")
    return slots, _Columns(fields, blob, ends)


def _empty() -> tuple[dict[str, int], _Columns]:
    return {}, _Columns([[] for _ in _COLUMNS], b"", [0])


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
        self._slots, self._columns = _empty()
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
            slots, columns = _empty() if found is None else _unpack(found[0])
        except (ValueError, TypeError):
            return False
        journal: Any = self._db.execute("SELECT * FROM journal")
        paths, values = [], []
        for row in journal:
            self._journaled += 1
            path = os.fsdecode(row[0])
            if row[1] is None:
                slots.pop(path, None)
            else:
                paths.append(path)
                values.append(row[1:])
        # One journal row per path (its key), so the order between them does not matter.
        slots.update(zip(paths, columns.extend(values), strict=True))
        self._slots, self._columns = slots, columns
        return True

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, path: object) -> bool:
        return path in self._slots

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def get(self, path: str) -> IndexEntry | None:
        slot = self._slots.get(path)
        return None if slot is None else self._columns.entry(slot)

    def items(self) -> Iterator[tuple[str, IndexEntry]]:
        entry = self._columns.entry
        return ((path, entry(slot)) for path, slot in self._slots.items())

    def unvouched(
        self, found: Iterable[tuple[list[str], list[os.stat_result]]], seen: set[str]
    ) -> list[tuple[str, os.stat_result]]:
        """The (path, lstat) pairs of ``found`` (batches of paths and their lstats) whose
        lstat does not vouch for the path's entry, so that its content must be read;
        every path of ``found`` goes into ``seen``.

        An lstat vouches for an entry that is not racy (see :mod:`.hashing`) and has the
        same kind (file or link), size, mtime, ctime and inode: git's rule for trusting its
        index. Runs once per file of the tree on a restart, so it reads the columns
        directly.
        """
        slots = self._slots
        size, mtime_ns, ctime_ns, inode, is_link, racy = self._columns.fields
        islink = stat.S_ISLNK
        stale = []
        for paths, sts in found:
            seen.update(paths)
            for path, st in zip(paths, sts, strict=True):
                slot = slots.get(path)
                if (
                    slot is None
                    or racy[slot]
                    or size[slot] != st.st_size
                    or mtime_ns[slot] != st.st_mtime_ns
                    or ctime_ns[slot] != st.st_ctime_ns
                    or inode[slot] != st.st_ino
                    or is_link[slot] != islink(st.st_mode)
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
                if child in self._slots:
                    found.append(child)
                if child in children:
                    stack.append(child)
        return found

    def update(self, changes: Mapping[str, IndexEntry | None]) -> None:
        """Apply ``changes`` (None removes a path) in memory and in one SQLite transaction."""
        if not changes:
            return
        gone = [path for path, entry in changes.items() if entry is None and path in self._slots]
        paths = [path for path, entry in changes.items() if entry is not None]
        values = [_ENTRY_FIELDS(changes[path]) for path in paths]
        for path in gone:
            self._drop(path)
        if self._children is not None:
            self._link(self._children, [path for path in paths if path not in self._slots])
        # A written path gets a new slot; the one it had stays unused until the next
        # snapshot (see "Columns" above).
        self._slots.update(zip(paths, self._columns.extend(values), strict=True))
        self._journaled += len(values) + len(gone)
        with self._db:
            self._db.execute("BEGIN")
            if self._journaled > max(_MIN_JOURNAL, len(self._slots) // 8):
                packed = self._columns.pack(self._slots)
                self._db.execute("DELETE FROM journal")
                self._db.execute("INSERT OR REPLACE INTO snapshot VALUES (0, ?)", (packed,))
                self._journaled = 0
                if len(self._columns) != len(self._slots):
                    self._slots, self._columns = _unpack(packed)  # drops the unused slots
            else:
                # Paths as bytes: a file name need not be UTF-8, and SQLite's TEXT would
                # refuse it. In path order: the B-tree takes sorted keys several times faster.
                journal = sorted(
                    (os.fsencode(path), *row) for path, row in zip(paths, values, strict=True)
                )
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
            self._link(self._children, self._slots)
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
        del self._slots[path]
        children = self._children
        if children is None:
            return
        child = path
        # Prune directories left without indexed files, so that `under` stays exact. A
        # name can briefly be both a file and a directory within one batch of changes
        # (a file replaced by a directory): it stays linked while either is still there.
        while child and child not in self._slots and not children.get(child):
            children.pop(child, None)
            children[_parent(child)].discard(child)
            child = _parent(child)
