"""The file tools themselves: read, list, plan a write or a patch, apply, check."""

from __future__ import annotations

import contextlib
import enum
import errno
import fnmatch
import itertools
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shellwardd.errors import Conflict, InvalidArgument, NotFound, PermissionDenied, Unavailable
from shellwardd.watch.hashing import bytes_hash, content_hash
from shellwardd.watch.paths import COOKIE_DIR

from ._patch import parse_patch
from ._paths import is_git, relative, resolve_path

# apply_write's temporary files: ".<name>.<random><suffix>" beside the target.
TEMP_SUFFIX = ".shellward-tmp"
# A patch is applied in memory; past this size a file is rewritten with write_file instead.
MAX_PATCH_BYTES = 64 << 20

_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
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
    """One file write, decided but not done: ``before_hash`` is "" for a new file."""

    path: str
    before_hash: str
    after_hash: str
    content: bytes = field(repr=False)


def _locate(workspace: Path, path: str) -> tuple[Path, str]:
    target = resolve_path(workspace, path)
    return target, relative(workspace, target)


# --- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Snapshot:
    content: bytes
    hash: str
    size: int
    truncated: bool


def _read_up_to(fd: int, count: int) -> bytes:
    chunks = []
    while count > 0 and (chunk := os.read(fd, min(count, 1 << 20))):
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _read(target: Path, rel: str, limit: int) -> _Snapshot | None:
    """Up to ``limit`` bytes of ``target``, with the hash and size of that same version.

    None when there is no file. The content is read here and hashed by ``content_hash``
    (a second read), so the two are compared and the read repeated if the file changed in
    between: a model must never get a base hash for content it has not seen.
    """
    for _ in range(_READ_ATTEMPTS):
        try:
            fd = os.open(target, _OPEN_FLAGS)  # O_NONBLOCK: a FIFO must not hang the daemon
        except FileNotFoundError:
            return None
        except NotADirectoryError as exc:
            raise InvalidArgument(
                f"{rel!r} cannot exist: one of its parent directories is a file."
            ) from exc
        except PermissionError as exc:
            raise PermissionDenied(
                f"{rel!r} is not readable by shellward (file permissions): fix its permissions"
                " or leave it alone."
            ) from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue  # replaced by a symlink since it was resolved
            raise
        try:
            before = os.fstat(fd)
            if stat.S_ISDIR(before.st_mode):
                raise InvalidArgument(f"{rel!r} is a directory: use list_files to see inside.")
            if not stat.S_ISREG(before.st_mode):
                raise InvalidArgument(
                    f"{rel!r} is not a regular file (a device, socket or pipe): file tools"
                    " only read and write regular files."
                )
            content = _read_up_to(fd, limit + 1)
        finally:
            os.close(fd)
        current = content_hash(target)
        if len(content) <= limit:
            if bytes_hash(content) == current:
                return _Snapshot(content, current, len(content), truncated=False)
            continue
        # Too large to compare by content: the same inode, size and times vouch for it.
        after = os.stat(target)
        if _stamp(before) == _stamp(after):
            return _Snapshot(content[:limit], current, after.st_size, truncated=True)
    raise Unavailable(
        f"{rel!r} kept changing while shellward read it: wait until whatever writes it has"
        " finished, then read it again."
    )


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def read_file(workspace: Path, path: str, *, max_bytes: int = 1 << 20) -> FileRead:
    """The file at ``path``: its first ``max_bytes`` and the hash to base an edit on."""
    if max_bytes < 1:
        raise InvalidArgument(f"max_bytes is {max_bytes}: ask for at least one byte.")
    target, rel = _locate(workspace, path)
    snapshot = _read(target, rel, max_bytes)
    if snapshot is None:
        raise NotFound(
            f"There is no file {rel!r} in the workspace: check the path with list_files."
        )
    return FileRead(rel, snapshot.content, snapshot.hash, snapshot.size, snapshot.truncated)


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
    if limit < 1:
        raise InvalidArgument(f"limit is {limit}: ask for at least one entry.")
    if not pattern:
        raise InvalidArgument("The pattern is empty: use '*' to list every entry.")
    target, rel = _locate(workspace, path)
    try:
        is_dir = target.is_dir()
    except OSError:
        is_dir = False
    if not is_dir:
        if target.exists():
            raise InvalidArgument(f"{rel!r} is a file, not a directory: use read_file for it.")
        raise NotFound(f"There is no directory {rel!r} in the workspace: list its parent first.")
    root = workspace.resolve()
    walk = _walk(target, root, recursive, top=True)
    matches = (e for e in walk if fnmatch.fnmatchcase(_name(e), pattern))
    entries = list(itertools.islice(matches, limit + 1))
    return FileListing(rel, tuple(entries[:limit]), truncated=len(entries) > limit)


def _name(entry: FileEntry) -> str:
    return entry.path.rsplit("/", 1)[-1]


def _walk(directory: Path, root: Path, recursive: bool, *, top: bool) -> Iterator[FileEntry]:
    try:
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda c: c.name)
    except OSError:
        if top:
            raise
        return  # a subdirectory that vanished or cannot be read is left out of the walk
    for child in children:
        rel = Path(child.path).relative_to(root).as_posix()
        if rel == COOKIE_DIR:
            continue
        try:
            size = child.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
        if child.is_symlink():
            yield FileEntry(rel, EntryKind.SYMLINK, size)
        elif child.is_dir(follow_symlinks=False):
            yield FileEntry(rel, EntryKind.DIR, 0)
            if recursive and not is_git(child.name):
                yield from _walk(Path(child.path), root, recursive, top=False)
        elif child.is_file(follow_symlinks=False):
            yield FileEntry(rel, EntryKind.FILE, size)


# --- planning writes ---------------------------------------------------------------------


def _hash_now(target: Path) -> tuple[str, str]:
    """The hash of ``target`` now ("" when absent) and, if a write could not replace it, why."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return "", ""
    except NotADirectoryError:
        return "", "cannot exist: one of its parent directories is a file"
    if stat.S_ISDIR(st.st_mode):
        return "", "is a directory"
    if not stat.S_ISREG(st.st_mode):
        return "", "is not a regular file"
    current = content_hash(target)
    return current, "" if current else "is not readable by shellward"


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
    target, rel = _locate(workspace, path)
    current, problem = _hash_now(target)
    if problem:
        raise InvalidArgument(
            f"Cannot write {rel!r}: it {problem}. Choose another path, or clear the way first."
        )
    _check_base(rel, base_hash, current)
    return FileWritePlan(rel, current, bytes_hash(content), content)


def plan_patch(workspace: Path, path: str, patch: str, base_hash: str | None) -> FileWritePlan:
    """Plan applying a one-file unified diff to ``path``; nothing is written.

    Context and removed lines must match the file exactly (see :mod:`._patch`).
    """
    target, rel = _locate(workspace, path)
    parsed = parse_patch(patch)
    snapshot = _read(target, rel, MAX_PATCH_BYTES)
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
    return FileWritePlan(rel, current, bytes_hash(new), new)


# --- applying writes ---------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(directory: Path) -> None:
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        _fsync_dir(new.parent)  # the new entry must survive a crash like the file itself


def apply_write(workspace: Path, plan: FileWritePlan) -> None:
    """Write ``plan.content`` to its path atomically: the old file or the new, never half.

    The path is resolved again, so a plan read back from the ledger is held to the same
    rules. A file that existed keeps its mode; a new one gets the usual 0o666 less umask.
    """
    target, _ = _locate(workspace, plan.path)
    parent = target.parent
    _make_dirs(parent)
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    temp = parent / f".{target.name[:200]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(plan.content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_dir(parent)
