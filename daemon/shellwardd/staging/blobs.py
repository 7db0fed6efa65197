"""Before-images of the files a commit changes, kept by content (undo restores from them).

Choices, and why
- **Content-addressed.** A blob's name is the SHA-256 of its content, the very hex digest an
  effect's ``sha256:<hex>`` before hash carries: the effect alone finds its before-image,
  and a file committed over a thousand times with the same content is stored once.
- **Atomic.** A blob is written to a temporary file in the store, synced, then renamed to
  its name: a crash leaves either no blob or a whole one, never a short one under a valid
  name. The digest is computed over the bytes actually copied, never trusted from a caller.
- **Synced as a batch.** A commit keeps all its before-images at once
  (:meth:`BlobStore.put_files`): every temporary file is written, then all are fsync'd at
  once from a few threads, then renamed, then every fan-out directory that got a name is
  fsync'd, again at once. The order is the same as one file at a time (a name never
  points at content that is not on disk); issued together, the fsyncs share the file
  system's journal commits (100 files: ~20 ms instead of ~20-600 ms one after another).
  Each fsync covers the store's own files only: ``syncfs`` would be as fast on a quiet
  disk, but would wait for every other writer's dirty data on the file system.
- **Private, and near the workspace.** The store is 0700 in the daemon's state dir (it
  holds copies of the user's files); on the workspace's file system when the state dir is,
  so storing a before-image is a copy within one device.
- **Never follows a link.** The source is opened with ``O_NOFOLLOW``: a symlink's
  before-image is its target, recorded in the effect itself, never a blob. A caller that
  must not resolve a path by name at all (the file tools) opens the file itself and hands
  over its descriptor (:meth:`BlobStore.put_fd`).
- **Files made ahead.** Making a file allocates an inode, which on the ext4 measured costs
  ~0.5 ms of CPU (and more of wall) each, against ~20 µs for writing a small one: a
  commit keeping 100 before-images spent 25-55 ms making their files. After each batch
  the store makes as many empty files (``.spare-*``, 0600, in the store itself) on a
  thread of its own at the lowest priority, off the commit's path, and the next batch
  writes its copies into those (opened ``O_TRUNC``: what one holds is only ever what was
  just copied) before the same sync and rename as ever. A batch that finds none left,
  or a spare gone, makes its own; the spares a stopped daemon left (named by its process
  id) are removed by the next daemon's first refill.
- **One place.** The store lives at :func:`store_path` of the state dir; the stager, the
  file tools and undo all open it there.

Retention, size bounds and garbage collection belong to undo, which reads these blobs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_CHUNK = 1 << 20
# Empty files kept made ahead (see "Files made ahead"): at most this many.
_SPARES_MAX = 256
_SPARE_PREFIX = ".spare-"
# fsyncs in flight at once: enough for the file system to commit them together.
_SYNC_THREADS = 16
_HEX = re.compile(r"[0-9a-f]{64}")


def store_path(state_dir: Path) -> Path:
    """Where the daemon whose state directory is ``state_dir`` keeps its before-images."""
    return state_dir / "blobs"


class BlobError(Exception):
    """A before-image could not be stored; the message says which file and why."""


class BlobStore:
    """Blobs under ``root`` (made 0700), two-level fan-out by digest prefix."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.root, 0o700)
        # Its threads start on the first batch of more than one file.
        self._syncer = ThreadPoolExecutor(_SYNC_THREADS, "shellward-blob-sync")
        self._spares = _Spares(self.root)
        # One thread, at the lowest priority: making spares must not slow the commit
        # that runs meanwhile.
        self._spare_maker = ThreadPoolExecutor(1, "shellward-blob-spares", _lowest_priority)

    def path_of(self, digest: str) -> Path:
        """Where the blob of ``digest`` (64 hex characters, or ``sha256:<hex>``) lives."""
        hexdigest = digest.removeprefix("sha256:")
        if not _HEX.fullmatch(hexdigest):
            raise ValueError(f"not a SHA-256 hex digest: {digest!r}")
        return self.root / hexdigest[:2] / hexdigest

    def has(self, digest: str) -> bool:
        return self.path_of(digest).is_file()

    def put_file(self, path: Path) -> str:
        """Store a copy of the regular file ``path``; return its SHA-256 hex digest."""
        return self.put_files([path])[0]

    def put_fd(self, source: int, name: str) -> str:
        """Store a copy of the regular file open for reading at ``source`` (from where its
        offset is; ``name`` for messages); return its SHA-256 hex digest.

        For a caller that opened the file itself (the file tools, beneath the workspace's
        descriptor): the store never resolves a workspace path by name."""
        return self._store([(name, functools.partial(self._copy_fd, source, name))])[0]

    def put_files(self, paths: Sequence[Path]) -> list[str]:
        """Store a copy of each regular file in ``paths``; their SHA-256 hex digests, in
        order. Every blob is durable when this returns (see "Synced as a batch")."""
        digests = self._store([(str(path), functools.partial(self._copy, path)) for path in paths])
        if len(paths) > 1:
            self._spare_maker.submit(self._spares.refill, len(paths))  # for the next batch
        return digests

    def _store(self, copies: Sequence[tuple[str, Callable[[], tuple[Path, str]]]]) -> list[str]:
        """Make each copy (a source's name, and what copies it to a temporary file), then
        sync them all, name them, and sync the names."""
        temps: list[tuple[Path, str, str]] = []  # (temporary file, digest, source's name)
        try:
            for name, copy in copies:
                temps.append((*copy(), name))
            self._fsync_all([temp for temp, _, _ in temps])  # every copy, then any name
            named: set[Path] = set()
            for temp, hexdigest, name in temps:
                final = self.path_of(hexdigest)
                named.add(final.parent)  # a name found (kept before a crash?) is synced too
                if final.is_file():
                    continue  # deduplicated: the same content is already kept
                try:
                    final.parent.mkdir(mode=0o700, exist_ok=True)
                    os.rename(temp, final)
                except OSError as exc:
                    raise _error(name, self.root, exc) from exc
            self._fsync_all(sorted(named))  # the names
        finally:
            for temp, _, _ in temps:
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    os.unlink(temp)
        return [hexdigest for _, hexdigest, _ in temps]

    def _fsync_all(self, paths: Sequence[Path]) -> None:
        """fsync every file or directory in ``paths``, at once from a few threads."""
        try:
            if len(paths) == 1:
                _fsync(paths[0])
                return
            for _ in self._syncer.map(_fsync, paths):
                pass
        except OSError as exc:
            raise BlobError(
                f"cannot make the before-images durable in {self.root}: {exc.strerror}; "
                "nothing was applied; check the state directory's disk"
            ) from exc

    def _copy(self, path: Path) -> tuple[Path, str]:
        try:
            source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise BlobError(f"cannot read {path} to keep its before-image: {exc.strerror}") from exc
        try:
            return self._copy_fd(source, str(path))
        finally:
            os.close(source)

    def _copy_fd(self, source: int, name: str) -> tuple[Path, str]:
        """Copy the regular file at ``source`` to a new temporary file of the store, not
        yet synced; the file and the digest of the bytes copied."""
        temp = self.root / f".tmp-{secrets.token_hex(8)}"
        digest = hashlib.sha256()
        try:
            if not stat.S_ISREG(os.fstat(source).st_mode):
                raise BlobError(f"{name} is not a regular file; only files have before-images")
            temp, target = self._spares.open() or (temp, _create(temp))
            try:
                while chunk := os.read(source, _CHUNK):
                    digest.update(chunk)
                    os.write(target, chunk)
            finally:
                os.close(target)
        except OSError as exc:
            # Gone already, or never made (a store that is not a directory any more
            # raises ENOTDIR here too); the error that matters is this one.
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(temp)
            raise _error(name, self.root, exc) from exc
        return temp, digest.hexdigest()


class _Spares:
    """Empty files made ahead in the store (see "Files made ahead")."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._ready: list[Path] = []
        self._cleared = False  # the spares of an earlier daemon

    def open(self) -> tuple[Path, int] | None:
        """A spare, taken, and a descriptor of it open for writing (emptied); None if
        there is none left."""
        while True:
            with self._lock:
                if not self._ready:
                    return None
                spare = self._ready.pop()
            flags = os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                return spare, os.open(spare, flags)
            except FileNotFoundError:
                continue  # removed meanwhile (by hand, or a later daemon): the next one

    def refill(self, wanted: int) -> None:
        """Make spares until ``wanted`` (at most :data:`_SPARES_MAX`) are ready."""
        if not self._cleared:
            self._cleared = True
            self._remove_stale()
        with contextlib.suppress(OSError):  # the next batch makes its own
            while True:
                with self._lock:
                    if len(self._ready) >= min(wanted, _SPARES_MAX):
                        return
                spare = self._root / f"{_SPARE_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
                os.close(_create(spare))
                with self._lock:
                    self._ready.append(spare)

    def _remove_stale(self) -> None:
        """Remove the spares of other processes (a stopped daemon's): another store of
        this process may be using its own."""
        ours = f"{_SPARE_PREFIX}{os.getpid()}-"
        with contextlib.suppress(OSError), os.scandir(self._root) as entries:
            for entry in entries:
                if entry.name.startswith(_SPARE_PREFIX) and not entry.name.startswith(ours):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _lowest_priority() -> None:
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _create(path: Path) -> int:
    """A new empty file at ``path`` (0600), open for writing."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)


def _error(name: str, root: Path, exc: OSError) -> BlobError:
    return BlobError(
        f"cannot keep the before-image of {name} in {root}: {exc.strerror}; "
        "free space there or check the state directory's permissions"
    )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
