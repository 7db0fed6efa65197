"""Reading one path's state: stat and content hash, without following symlinks.

The hash is SHA-256: with the SHA extensions of current x86 and ARM CPUs it is the
fastest hash in the standard library (measured here: 1.6 GB/s, against 0.9 GB/s for
BLAKE2b), and it is what the rest of shellward already uses for output digests.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from dataclasses import dataclass, replace

HASH_PREFIX = "sha256:"
LINK_PREFIX = "symlink:"

# Linux stamps mtime and ctime from a coarse clock (one tick: 1-10 ms) and FAT keeps two
# seconds. A file hashed less than this long after its last change may change again with
# the very same stat, so its entry is "racy": a later stat comparison cannot vouch for it
# and it is compared by content instead (git's racy-git rule, per entry).
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

    def same_stat(self, st: os.stat_result) -> bool:
        """True if ``st`` vouches for this entry's content without reading it."""
        return (
            not self.racy
            and self.size == st.st_size
            and self.mtime_ns == st.st_mtime_ns
            and self.ctime_ns == st.st_ctime_ns
            and self.inode == st.st_ino
        )


def _is_racy(st: os.stat_result) -> bool:
    return max(st.st_mtime_ns, st.st_ctime_ns) > time.time_ns() - RACY_WINDOW_NS


def _entry(st: os.stat_result, digest: bytes, *, is_link: bool = False) -> IndexEntry:
    return IndexEntry(
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        inode=st.st_ino,
        digest=digest,
        is_link=is_link,
        racy=_is_racy(st),
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


def probe(path: str | os.PathLike[str]) -> IndexEntry | None:
    """The current state of ``path``: None if absent or neither a regular file nor a link.

    The stat recorded is the one taken on the open file before and after reading it; a
    file that changes while it is read is read again, so content and stat always agree.
    """
    last: IndexEntry | None = None
    for _ in range(_RETRIES):
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            try:
                return _entry(st, os.fsencode(os.readlink(path)), is_link=True)
            except (FileNotFoundError, NotADirectoryError, OSError):
                continue  # replaced by something else between lstat and readlink
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except PermissionError:
            return _entry(st, b"")
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue  # became a symlink since the lstat
            raise
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                return None
            digest = _hash_fd(fd, before.st_size)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if (before.st_size, before.st_mtime_ns, before.st_ctime_ns) == (
            after.st_size,
            after.st_mtime_ns,
            after.st_ctime_ns,
        ):
            return _entry(after, digest)
        last = replace(_entry(after, digest), racy=True)
    # Still changing after several reads: keep the last read, marked racy so the next
    # stat comparison rehashes it instead of trusting it.
    return last


def bytes_hash(data: bytes) -> str:
    """The hash string a regular file holding exactly ``data`` has (see :func:`content_hash`).

    For callers that know a file's content before it is written (the file tools' plans).
    """
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def content_hash(path: str | os.PathLike[str]) -> str:
    """The hash string an effect would record for ``path`` now ("" if absent).

    For callers that check recorded effects against the workspace (the replay engine).
    """
    entry = probe(path)
    return entry.hash if entry is not None else ""
