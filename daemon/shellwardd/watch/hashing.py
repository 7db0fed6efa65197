"""Reading one path's state: stat and content hash, without following symlinks.

The hash is SHA-256: with the SHA extensions of current x86 and ARM CPUs it is the
fastest hash in the standard library (measured here: 1.6 GB/s, against 0.9 GB/s for
BLAKE2b), and it is what the rest of shellward already uses for output digests.

Racy entries. Linux stamps mtime and ctime from a coarse clock, so a file changed again
within one tick of the stat we recorded keeps the very same stat; an entry whose stat
cannot rule that out is "racy" and is compared by content, never by stat (git's
racy-git rule, per entry). Which entries are racy is decided against a :class:`Stamp`:
the ctime of a file created in the workspace *before* the files are stat'ed and read,
i.e. "now" on the filesystem's own clock and at its own granularity. A later change of a
file on that filesystem is stamped at or after it, so a file whose mtime and ctime are
both older than the stamp cannot change again without its stat changing: it is not racy.
Files on another device (another clock), and probes without a stamp, fall back to a
window of :data:`RACY_WINDOW_NS` against the wall clock, wide enough for FAT's two-second
granularity.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import time
from dataclasses import dataclass, replace

HASH_PREFIX = "sha256:"
LINK_PREFIX = "symlink:"
# What a directory effect records as its hash: a directory is there or not.
DIR_HASH = "directory"

# Without a usable stamp: a file changed less than this long before it was hashed is racy.
# Linux's coarse clock ticks every 1-10 ms and FAT keeps two seconds.
RACY_WINDOW_NS = 2_000_000_000

_READ_CHUNK = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_RETRIES = 3


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """The recorded state of one regular file or symlink.

    ``digest`` is the raw SHA-256 of a file's content, or the raw target of a symlink
    (links are recorded, never followed). An unreadable file has an empty digest.
    """

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    digest: bytes
    is_link: bool = False
    racy: bool = False

    @property
    def hash(self) -> str:
        """The form effects carry: ``sha256:<hex>``, or ``symlink:<target>`` for a link."""
        if self.is_link:
            return LINK_PREFIX + os.fsdecode(self.digest)
        return HASH_PREFIX + self.digest.hex() if self.digest else ""

    def same_content(self, other: IndexEntry) -> bool:
        return self.is_link == other.is_link and self.digest == other.digest


@dataclass(frozen=True, slots=True)
class Stamp:
    """The "now" of one filesystem's clock, taken before a pass stats and reads files."""

    dev: int
    ns: int


def fs_stamp(directory: str | os.PathLike[str]) -> Stamp | None:
    """The ctime of a file created (and removed) in ``directory``; None if none can be.

    A filesystem whose clock disagrees with the wall clock by a whole racy window (a
    network or FUSE filesystem with its own notion of time) gets None: its files are
    then judged by the window rule, as if no stamp had been taken.
    """
    path = os.path.join(directory, f"stamp-{secrets.token_hex(8)}")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
    return stamp_of(st)


def stamp_of(st: os.stat_result) -> Stamp | None:
    """The stamp of a file just created (its ctime), or None (see :func:`fs_stamp`)."""
    if abs(st.st_ctime_ns - time.time_ns()) >= RACY_WINDOW_NS:
        return None
    return Stamp(st.st_dev, st.st_ctime_ns)


def _is_racy(st: os.stat_result, stamp: Stamp | None) -> bool:
    changed = max(st.st_mtime_ns, st.st_ctime_ns)
    if stamp is not None and st.st_dev == stamp.dev:
        # Equal counts as racy: a change in the stamp's own tick gets the stamp's time.
        return changed >= stamp.ns
    return changed > time.time_ns() - RACY_WINDOW_NS


def _entry(
    st: os.stat_result, digest: bytes, stamp: Stamp | None, *, is_link: bool = False
) -> IndexEntry:
    return IndexEntry(
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        inode=st.st_ino,
        digest=digest,
        is_link=is_link,
        racy=_is_racy(st, stamp),
    )


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_ino, a.st_dev, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == (
        b.st_ino,
        b.st_dev,
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
    )


def _hash_fd(fd: int, size: int) -> bytes:
    h = hashlib.sha256()
    # Ask for one byte more than the stat size so a small file is read in one call and
    # its EOF seen in the next, without allocating a large buffer per file.
    want = min(size + 1, _READ_CHUNK)
    while chunk := os.read(fd, want):
        h.update(chunk)
        want = _READ_CHUNK
    return h.digest()


def probe(
    path: str | os.PathLike[str],
    stamp: Stamp | None = None,
    st: os.stat_result | None = None,
) -> IndexEntry | None:
    """The current state of ``path``: None if absent or neither a regular file nor a link.

    ``st`` is an lstat of ``path`` already taken (by a walk) after ``stamp``; it saves
    one. The stat recorded is the fstat of the open file after reading it, and only if
    it is still the lstat taken before opening it (same inode, size, mtime and ctime);
    a file that changed in between is read again, so content and stat always agree.
    """
    last: IndexEntry | None = None
    for _ in range(_RETRIES):
        if st is None:
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
        before, st = st, None  # a retry stats afresh
        if stat.S_ISLNK(before.st_mode):
            try:
                return _entry(before, os.fsencode(os.readlink(path)), stamp, is_link=True)
            except (FileNotFoundError, NotADirectoryError, OSError):
                continue  # replaced by something else between lstat and readlink
        if not stat.S_ISREG(before.st_mode):
            return None
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except PermissionError:
            return _entry(before, b"", stamp)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue  # became a symlink since the lstat
            raise
        try:
            try:
                digest = _hash_fd(fd, before.st_size)
            except OSError:
                # The path was replaced since the lstat by a directory, a FIFO without
                # data (O_NONBLOCK) or the like: look again. A regular file's error is real.
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    raise
                continue
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if _same_file(before, after):
            return _entry(after, digest, stamp)
        if stat.S_ISREG(after.st_mode):
            last = replace(_entry(after, digest, stamp), racy=True)
    # Still changing after several reads: keep the last read, marked racy so the next
    # stat comparison rehashes it instead of trusting it.
    return last


def bytes_hash(data: bytes) -> str:
    """The hash string a regular file holding exactly ``data`` has (see :func:`content_hash`).

    For callers that know a file's content before it is written (the file tools' plans).
    """
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def content_hash(path: str | os.PathLike[str]) -> str:
    """The hash string an effect would record for ``path`` now ("" if absent, DIR_HASH for
    a directory).

    For callers that check recorded effects against the workspace (the replay engine, a
    commit's conflict check: one lstat for a path that is absent or a directory).
    """
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return ""
    if stat.S_ISDIR(st.st_mode):
        return DIR_HASH
    entry = probe(path, st=st)
    if entry is not None:
        return entry.hash
    try:
        return DIR_HASH if stat.S_ISDIR(os.lstat(path).st_mode) else ""
    except OSError:
        return ""


def as_written(
    st: os.stat_result, written: IndexEntry, since: Stamp | None, stamp: Stamp | None
) -> IndexEntry | None:
    """``written``'s content for the file whose lstat is ``st``, without reading it; None
    when that cannot be vouched for (read the file then).

    ``written`` was hashed before ``since`` and the file then moved in place by a rename,
    which keeps the inode, size and mtime (and changes the ctime). A write after ``since``
    gives the file an mtime at or after it, so the same inode, size and mtime, with that
    mtime older than ``since`` (in another tick), mean that nothing wrote it since.
    """
    if since is None or written.is_link or not stat.S_ISREG(st.st_mode):
        return None
    if st.st_dev != since.dev or written.mtime_ns >= since.ns:
        return None
    if (st.st_ino, st.st_size, st.st_mtime_ns) != (written.inode, written.size, written.mtime_ns):
        return None
    return _entry(st, written.digest, stamp)
