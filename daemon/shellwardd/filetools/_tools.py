"""The file tools themselves: read, list, plan a write or a patch, apply, check.

Each call opens the workspace root once and reaches files only through descriptors (see
:mod:`._beneath` for why): a file is checked through an ``O_PATH`` descriptor (which opens
no FIFO or device) and read and hashed through that same inode reopened; a write creates
its temporary file in, renames within, and fsyncs the directory descriptor it walked to.
What a tool refuses on the way (a symlink, a file with more than one hard link, anything
but a regular file) it refuses whenever it meets it, before a call starts and again when
it runs.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fnmatch
import hashlib
import itertools
import os
import re
import secrets
import shlex
import stat
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from shellwardd.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from shellwardd.staging.blobs import BlobError, BlobStore
from shellwardd.watch.hashing import HASH_PREFIX, bytes_hash
from shellwardd.watch.paths import COOKIE_DIR

from ._beneath import DIR_FLAGS, closing_fd, make_dirs, open_beneath, open_root
from ._patch import parse_patch
from ._paths import Location, is_git, locate, refusal, symlink_refusal

# apply_write's temporary files: ".<name>.<random><suffix>" beside the target.
TEMP_SUFFIX = ".shellward-tmp"
# A patch is applied in memory; past this size a file is rewritten with write_file instead.
MAX_PATCH_BYTES = 64 << 20
# The most entries one listing returns: its JSON answer is kept whole in the ledger.
MAX_LIST_ENTRIES = 10_000

_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
_READ_CHUNK = 1 << 20
_READ_ATTEMPTS = 3


@dataclass(frozen=True)
class FileRead:
    """A file's first ``max_bytes``; ``hash`` and ``size`` are those of the whole file."""

    path: str
    content: bytes = field(repr=False)
    hash: str
    size: int
    truncated: bool


class EntryKind(enum.Enum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"


@dataclass(frozen=True)
class FileEntry:
    path: str
    kind: EntryKind
    size: int


@dataclass(frozen=True)
class FileListing:
    path: str
    entries: tuple[FileEntry, ...]
    truncated: bool


@dataclass(frozen=True)
class FileWritePlan:
    """One file write, decided but not done: ``before_hash`` is "" for a new file;
    ``base_hash`` what the caller required the file to be at (None: whatever is there),
    checked again right before the write."""

    path: str
    before_hash: str
    after_hash: str
    content: bytes = field(repr=False)
    base_hash: str | None = None


# --- opening -----------------------------------------------------------------------------


def _refuse_unless_single_file(location: Location, st: os.stat_result) -> None:
    rel = location.rel
    if stat.S_ISDIR(st.st_mode):
        raise InvalidArgument(
            f"{rel!r} is a directory: file tools read and write files; use list_files to see"
            " inside."
        )
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArgument(
            f"{rel!r} is not a regular file (a device, socket or pipe): file tools only read"
            " and write regular files."
        )
    if st.st_nlink > 1:
        # The other name may be outside the workspace: a hard link to a secret reads it.
        quoted = shlex.quote(rel)
        raise PermissionDenied(
            f"{rel!r} has {st.st_nlink} hard links: file tools do not read or write a file"
            " that is also reachable under another name, which may be outside the workspace."
            f" If the content is yours, give it a single name first with run_command"
            f" (cp {quoted} {quoted}.copy && mv {quoted}.copy {quoted})."
        )


def _raise_for(root: int, location: Location, exc: OSError) -> NoReturn:
    problem = refusal(root, location, exc)
    if problem is None:
        raise exc
    raise problem from exc


def _open_regular(root: int, location: Location) -> tuple[int, os.stat_result] | None:
    """A descriptor of the single-link regular file at ``location``, and its fstat.

    None if there is no such file; a symlink on the way, a directory, a FIFO or device,
    or a file with more than one hard link is refused with a sentence for the model.
    """
    # O_PATH first: it opens nothing for I/O, so a FIFO cannot block the daemon and a
    # device cannot act on being opened (a watchdog device starts its timer).
    try:
        handle = open_beneath(root, location.parts, os.O_PATH)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _raise_for(root, location, exc)
    with closing_fd(handle):
        st = os.fstat(handle)
        if stat.S_ISLNK(st.st_mode):  # O_PATH | O_NOFOLLOW opens a final symlink itself
            _raise_for(root, location, OSError(errno.ELOOP, os.strerror(errno.ELOOP)))
        _refuse_unless_single_file(location, st)
        return _reopen(handle), st


def _reopen(handle: int) -> int:
    """The inode of the ``O_PATH`` descriptor ``handle``, now open for reading: through the
    daemon's own descriptor table, so nothing on the way can have changed."""
    try:
        return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Unavailable(
            "shellward cannot reopen files safely without /proc: mount /proc in the"
            " daemon's environment and restart it."
        ) from None


# --- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Snapshot:
    content: bytes
    hash: str
    size: int
    truncated: bool


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _snapshot(fd: int, before: os.stat_result, limit: int) -> _Snapshot | None:
    """The first ``limit`` bytes, and the hash and size of the whole file, in one pass
    over one descriptor; None if the file changed while it was read."""
    digest = hashlib.sha256()
    kept = bytearray()
    size = 0
    while chunk := os.read(fd, _READ_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    if size != before.st_size or _stamp(os.fstat(fd)) != _stamp(before):
        return None
    return _Snapshot(bytes(kept), HASH_PREFIX + digest.hexdigest(), size, size > limit)


def _read(root: int, location: Location, limit: int) -> _Snapshot | None:
    """Up to ``limit`` bytes of the file at ``location``, with the hash and size of that
    same version; None when there is no file.

    The hash is of the bytes read, so a model never gets a base hash for content it has
    not seen; a file whose stat moved during the read is read again.
    """
    for _ in range(_READ_ATTEMPTS):
        opened = _open_regular(root, location)
        if opened is None:
            return None
        fd, before = opened
        with closing_fd(fd):
            snapshot = _snapshot(fd, before, limit)
        if snapshot is not None:
            return snapshot
    raise Unavailable(
        f"{location.rel!r} kept changing while shellward read it: wait until whatever writes"
        " it has finished, then read it again."
    )


def read_file(workspace: Path, path: str, *, max_bytes: int = 1 << 20) -> FileRead:
    """The file at ``path``: its first ``max_bytes`` and the hash to base an edit on."""
    if max_bytes < 1:
        raise InvalidArgument(f"max_bytes is {max_bytes}: ask for at least one byte.")
    location = locate(workspace, path)
    with closing_fd(open_root(workspace)) as root:
        snapshot = _read(root, location, max_bytes)
    if snapshot is None:
        raise NotFound(
            f"There is no file {location.rel!r} in the workspace: check the path with list_files."
        )
    return FileRead(
        location.rel, snapshot.content, snapshot.hash, snapshot.size, snapshot.truncated
    )


def list_files(
    workspace: Path,
    path: str = ".",
    *,
    pattern: str = "*",
    recursive: bool = False,
    limit: int = 1000,
) -> FileListing:
    """The entries of a directory whose names match ``pattern`` (fnmatch), sorted by path.

    A recursive listing walks depth first and follows no symlink; it shows a ``.git``
    directory but not what is inside, and never shows shellward's cookie directory.
    """
    if not 1 <= limit <= MAX_LIST_ENTRIES:
        raise InvalidArgument(
            f"limit is {limit}: ask for 1 to {MAX_LIST_ENTRIES} entries, and narrow a larger"
            " listing with path and pattern."
        )
    if not pattern:
        raise InvalidArgument("The pattern is empty: use '*' to list every entry.")
    location = locate(workspace, path)
    with (
        closing_fd(open_root(workspace)) as root,
        closing_fd(_open_dir(root, location)) as fd,
        # Closed, not left to the garbage collector: the walk holds directory descriptors.
        contextlib.closing(_walk(fd, location.parts, recursive)) as walk,
    ):
        matches = (e for e in walk if fnmatch.fnmatchcase(_name(e), pattern))
        entries = list(itertools.islice(matches, limit + 1))
    return FileListing(location.rel, tuple(entries[:limit]), truncated=len(entries) > limit)


def _open_dir(root: int, location: Location) -> int:
    try:
        return open_beneath(root, location.parts, DIR_FLAGS)
    except FileNotFoundError:
        raise NotFound(
            f"There is no directory {location.rel!r} in the workspace: list its parent first."
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR and _is_file(root, location):
            raise InvalidArgument(
                f"{location.rel!r} is a file, not a directory: use read_file for it."
            ) from exc
        _raise_for(root, location, exc)


def _is_file(root: int, location: Location) -> bool:
    """Whether ``location`` names something other than a directory or symlink now (a
    message's choice only)."""
    try:
        handle = open_beneath(root, location.parts, os.O_PATH)
    except OSError:
        return False
    with closing_fd(handle):
        mode = os.fstat(handle).st_mode
    return not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


def _name(entry: FileEntry) -> str:
    return entry.path.rsplit("/", 1)[-1]


def _walk(
    directory: int, parts: tuple[str, ...], recursive: bool
) -> Generator[FileEntry, None, None]:
    with os.scandir(directory) as it:
        children = sorted(it, key=lambda c: c.name)
    for child in children:
        rel = "/".join((*parts, child.name))
        if rel == COOKIE_DIR:
            continue
        try:
            st = child.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            yield FileEntry(rel, EntryKind.SYMLINK, st.st_size)
        elif stat.S_ISDIR(st.st_mode):
            yield FileEntry(rel, EntryKind.DIR, 0)
            if recursive and not is_git(child.name):
                try:
                    sub = open_beneath(directory, (child.name,), DIR_FLAGS)
                except OSError:
                    continue  # vanished, or replaced (by a symlink too) since: left out
                with closing_fd(sub):
                    yield from _walk(sub, (*parts, child.name), recursive)
        elif stat.S_ISREG(st.st_mode):
            yield FileEntry(rel, EntryKind.FILE, st.st_size)


# --- planning writes ---------------------------------------------------------------------


def _hash_now(workspace: Path, location: Location) -> str:
    """The hash of the file at ``location`` now ("" when absent); refuses what a write
    may not replace."""
    with closing_fd(open_root(workspace)) as root:
        snapshot = _read(root, location, 0)
    return snapshot.hash if snapshot else ""


def _check_base(rel: str, base_hash: str | None, current: str) -> None:
    if base_hash is None or base_hash == current:
        return
    if base_hash and not _HASH_RE.fullmatch(base_hash):
        raise InvalidArgument(
            f"base_hash {base_hash!r} is not a file hash: pass the hash read_file returned"
            ' (sha256:<64 hex digits>), "" for a file that must not exist yet, or nothing'
            " to replace whatever is there."
        )
    if not base_hash:
        raise Conflict(
            f"{rel!r} already exists (hash {current}) but base_hash says it must not: read it"
            " and pass its hash as base_hash to replace it, or choose another path."
        )
    actual = current or "none: the file does not exist"
    raise Conflict(
        f"{rel!r} is not at the hash your edit is based on (expected {base_hash}, actual"
        f" {actual}): the file changed since you read it: read it again and redo the edit."
    )


def plan_write(workspace: Path, path: str, content: bytes, base_hash: str | None) -> FileWritePlan:
    """Plan replacing (or creating) ``path`` with ``content``; nothing is written."""
    location = locate(workspace, path)
    current = _hash_now(workspace, location)
    _check_base(location.rel, base_hash, current)
    return FileWritePlan(location.rel, current, bytes_hash(content), content, base_hash)


def plan_patch(workspace: Path, path: str, patch: str, base_hash: str | None) -> FileWritePlan:
    """Plan applying a one-file unified diff to ``path``; nothing is written.

    Context and removed lines must match the file exactly (see :mod:`._patch`).
    """
    location = locate(workspace, path)
    rel = location.rel
    parsed = parse_patch(patch)
    with closing_fd(open_root(workspace)) as root:
        snapshot = _read(root, location, MAX_PATCH_BYTES)
    current = snapshot.hash if snapshot else ""
    _check_base(rel, base_hash, current)
    if snapshot is None:
        if not parsed.creates:
            raise NotFound(
                f"There is no file {rel!r} to patch: to create it, send a patch from"
                " /dev/null or use write_file."
            )
    elif parsed.creates:
        raise Conflict(
            f"The patch creates {rel!r} (--- /dev/null), but it already exists: read it and"
            " make the patch against its content."
        )
    elif snapshot.truncated:
        raise InvalidArgument(
            f"{rel!r} is {snapshot.size} bytes, more than the {MAX_PATCH_BYTES} a patch may"
            " change: use write_file with the whole new content."
        )
    new = parsed.apply(snapshot.content if snapshot else b"", rel)
    return FileWritePlan(rel, current, bytes_hash(new), new, base_hash)


# --- applying writes ---------------------------------------------------------------------


def apply_write(workspace: Path, plan: FileWritePlan, blobs: BlobStore) -> str:
    """Write ``plan.content`` to its path atomically: the old file or the new, never half.

    The path is located again, so a plan read back from the ledger is held to the same
    rules, and a ``base_hash`` is checked again against the file it replaces. That file is
    first kept in ``blobs`` (its before-image, so an undo can put it back); if it cannot be
    kept, nothing is written. A file that existed
    keeps its permission bits (never set-uid, set-gid or sticky); a new one gets the usual
    0o666 less umask. Returns the hash of the content replaced ("" for a new file).
    """
    location = locate(workspace, plan.path)
    if not location.parts:
        raise InvalidArgument("The path is the workspace root, a directory: name a file in it.")
    *directories, name = location.parts
    with closing_fd(open_root(workspace)) as root:
        try:
            parent = make_dirs(root, directories)
        except OSError as exc:
            _raise_for(root, location, exc)
    with closing_fd(parent):
        replaced = _open_replaced(parent, name, location)
        if replaced is None:
            # The base hash again: another writer may have gone first since the plan.
            _check_base(location.rel, plan.base_hash, "")
            _replace(parent, name, plan.content, None)
            return ""
        fd, st = replaced
        with closing_fd(fd):
            before = _keep_before_image(fd, st, location, blobs)
        _check_base(location.rel, plan.base_hash, before)
        # Permission bits only: a set-uid bit a sandboxed process put on its own file must
        # not end up on the file the daemon (perhaps root) writes in its place.
        _replace(parent, name, plan.content, stat.S_IMODE(st.st_mode) & 0o777)
        return before


def _open_replaced(parent: int, name: str, location: Location) -> tuple[int, os.stat_result] | None:
    """The file a write to ``name`` in ``parent`` replaces, open for reading, and its fstat
    (None: there is none), once it is known to be one the tools may replace.

    Opened beneath ``parent`` (the directory the rename happens in) with ``O_PATH`` and
    no link followed, then reopened for reading as the same inode: its before-image and
    mode are those of the very file the rename replaces, and a FIFO or device is never
    opened for I/O."""
    try:
        handle = open_beneath(parent, (name,), os.O_PATH)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
            raise PermissionDenied(
                f"{location.rel!r} went through a symlink while shellward opened it"
                " (something is renaming files in the workspace right now): file tools"
                " follow no symlink. Nothing was written; retry once nothing else changes"
                " that directory."
            ) from exc
        raise
    with closing_fd(handle):
        st = os.fstat(handle)
        if stat.S_ISLNK(st.st_mode):  # O_PATH | O_NOFOLLOW opens a final symlink itself
            raise symlink_refusal(location, location.rel, os.readlink(name, dir_fd=parent))
        _refuse_unless_single_file(location, st)
        return _reopen(handle), st


def _keep_before_image(fd: int, st: os.stat_result, location: Location, blobs: BlobStore) -> str:
    """Keep the content at ``fd`` in ``blobs``; its hash. Refuses (nothing written) when it
    cannot be kept, or changed while it was copied (the copy would not be what is replaced)."""
    try:
        digest = HASH_PREFIX + blobs.put_fd(fd, location.rel)
    except BlobError as exc:
        raise Unavailable(
            f"{location.rel!r} was not written: shellward keeps the content a write replaces"
            f" so the write can be undone, and {exc}. Nothing was written; the operator must"
            " fix the daemon's state directory, then retry."
        ) from exc
    if _stamp(os.fstat(fd)) != _stamp(st):
        raise Unavailable(
            f"{location.rel!r} changed while shellward kept its old content (something else"
            " writes it right now). Nothing was written: wait until it has finished, read"
            " the file again and redo the edit."
        )
    return digest


def _replace(parent: int, name: str, content: bytes, mode: int | None) -> None:
    # The rename replaces whatever the name holds by then (a file, or a symlink swapped in
    # since the stat): a rename never writes through a link, and never leaves ``parent``.
    temp = f".{name[:200]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o666, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=parent)
        raise
    os.fsync(parent)
