"""The built-in file tools: read, list, write and patch files inside one workspace.

Pure domain code over the filesystem: no gRPC, no ledger. A write happens in two steps so
the runtime can record it like a command: :func:`plan_write` or :func:`plan_patch` computes
a :class:`FileWritePlan` (the file's hash before and after, and the new content) without
touching the workspace, and :func:`apply_write` carries it out atomically. On replay,
:func:`check_write` tells from the file's hash now whether the plan already took effect,
may be applied, or meets someone else's change.

Every path goes through :func:`resolve_path`, which keeps the tools inside the workspace:
no ``..`` or symlink escapes, nothing in a ``.git`` directory (git's config and hooks make
it run code), nothing in the write detector's cookie directory.

A ``base_hash`` makes an edit conditional on what the model last read: ``None`` means
"whatever is there now", ``""`` means "the file must not exist yet", and a hash must equal
the file's hash now, or the plan is refused with :class:`~shellwardd.errors.Conflict`.
"""

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
from dataclasses import dataclass, field, replace
from pathlib import Path

from shellwardd.errors import Conflict, InvalidArgument, NotFound, PermissionDenied, Unavailable
from shellwardd.watch.hashing import bytes_hash, content_hash
from shellwardd.watch.paths import COOKIE_DIR, GIT_DIR_NAME

# apply_write's temporary files: ".<name>.<random><suffix>" beside the target.
TEMP_SUFFIX = ".shellward-tmp"
# A patch is applied in memory; past this size a file is rewritten with write_file instead.
MAX_PATCH_BYTES = 64 << 20

_COOKIE_PARTS = tuple(COOKIE_DIR.split("/"))
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
_HUNK_RE = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
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


class WriteState(enum.Enum):
    """Where a planned write stands against the workspace now (for replay)."""

    ALREADY_APPLIED = "already_applied"
    APPLICABLE = "applicable"
    CONFLICT = "conflict"


# --- paths -------------------------------------------------------------------------------


def resolve_path(workspace: Path, path: str) -> Path:
    """The real, absolute path of ``path`` (relative to ``workspace`` or absolute inside it)."""
    if not path.strip():
        raise InvalidArgument(
            "The path is empty: give a path relative to the workspace root, like 'src/main.py'."
        )
    if "\0" in path:
        raise InvalidArgument(f"The path {path!r} contains a NUL byte: remove it and try again.")
    root = workspace.resolve()
    parts = _lexical_parts(workspace, root, path)
    _refuse_private(parts, path)
    try:
        target = root.joinpath(*parts).resolve()
    except (OSError, RuntimeError) as exc:  # Python 3.11 reports a symlink loop as RuntimeError
        raise InvalidArgument(
            f"The path {path!r} cannot be resolved ({exc}): check it for a symlink loop."
        ) from exc
    if not target.is_relative_to(root):
        raise _symlink_escape(root, parts, path)
    _refuse_private(target.relative_to(root).parts, path)
    return target


def _lexical_parts(workspace: Path, root: Path, path: str) -> tuple[str, ...]:
    # Normalising before touching the filesystem means the OS never sees a ``..``: a path
    # like ``link/../x`` stays inside even when ``link`` points elsewhere.
    norm = Path(os.path.normpath(path))
    if norm.is_absolute():
        for base in (root, Path(os.path.normpath(workspace.absolute()))):
            if norm.is_relative_to(base):
                return norm.relative_to(base).parts
        raise PermissionDenied(
            f"{path!r} is outside the workspace {root}: file tools only reach files inside it;"
            " give a path relative to the workspace root."
        )
    if norm.parts[:1] == ("..",):
        raise PermissionDenied(
            f"{path!r} leads out of the workspace through '..': file tools only reach files"
            f" inside {root}; give a path relative to the workspace root."
        )
    return norm.parts


def _is_git(name: str) -> bool:
    # Case-folded: on a case-insensitive filesystem ``.GIT/config`` is git's config too.
    return name.casefold() == GIT_DIR_NAME


def _refuse_private(parts: tuple[str, ...], path: str) -> None:
    if any(_is_git(p) for p in parts):
        raise PermissionDenied(
            f"{path!r} is in a .git directory: file tools may not touch git's internals"
            " (its config and hooks make git run code); use git itself through run_command."
        )
    if parts[: len(_COOKIE_PARTS)] == _COOKIE_PARTS:
        raise PermissionDenied(
            f"{path!r} is in {COOKIE_DIR}, where shellward keeps its own bookkeeping:"
            " file tools may not touch it; leave that directory alone."
        )


def _symlink_escape(root: Path, parts: tuple[str, ...], path: str) -> PermissionDenied:
    # Name the first link on the way out: that is what the model has to avoid.
    for i in range(1, len(parts) + 1):
        link = root.joinpath(*parts[:i])
        if link.is_symlink() and not link.resolve().is_relative_to(root):
            return PermissionDenied(
                f"{path!r} goes through the symlink {'/'.join(parts[:i])!r}, which points"
                f" outside the workspace (to {os.readlink(link)!r}): file tools only reach"
                f" files inside {root}; use a path that does not go through that link."
            )
    return PermissionDenied(
        f"{path!r} resolves to a place outside the workspace {root}: file tools only reach"
        " files inside it; use a path that does not go through a symlink."
    )


def _locate(workspace: Path, path: str) -> tuple[Path, str]:
    target = resolve_path(workspace, path)
    return target, target.relative_to(workspace.resolve()).as_posix()


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
            if recursive and not _is_git(child.name):
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


# --- patches -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    op: bytes  # b" " context, b"-" removed, b"+" added
    text: bytes  # without its line ending
    no_eol: bool = False  # followed by "\ No newline at end of file"


@dataclass(frozen=True)
class _Hunk:
    number: int
    old_start: int
    lines: tuple[_Line, ...]

    @property
    def old(self) -> list[bytes]:
        return [line.text for line in self.lines if line.op != b"+"]

    @property
    def position(self) -> int:
        """The 0-based index the header gives: of the first old line, or of the insertion."""
        return self.old_start - 1 if self.old else self.old_start


@dataclass(frozen=True)
class _Patch:
    creates: bool
    hunks: tuple[_Hunk, ...]


def _header_name(line: bytes) -> bytes:
    # "--- a/x.py\t2024-01-01 10:00:00" → "a/x.py"
    return line[4:].split(b"\t", 1)[0].strip()


def _parse_patch(patch: str) -> _Patch:
    """Parse a one-file unified diff; hunk bodies are read by the counts in their headers."""
    raw = patch.encode("utf-8").split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    # A CR before the LF is part of the line ending; the file's own endings are kept.
    lines = [line.removesuffix(b"\r") for line in raw]
    i, old_name, new_name = 0, b"", b""
    while i < len(lines) and not lines[i].startswith(b"@@"):
        if lines[i].startswith(b"--- "):
            old_name = _header_name(lines[i])
        elif lines[i].startswith(b"+++ "):
            new_name = _header_name(lines[i])
        i += 1  # anything else before the first hunk ("diff --git", "index") is a header
    if new_name == b"/dev/null":
        raise InvalidArgument(
            "The patch deletes the file (+++ /dev/null): file tools do not delete files;"
            " use run_command with rm."
        )
    hunks: list[_Hunk] = []
    while i < len(lines):
        header = _HUNK_RE.match(lines[i])
        if header is None:
            if lines[i].startswith((b"--- ", b"diff ")):
                raise InvalidArgument(
                    "The patch changes more than one file: send one patch per file."
                )
            if not lines[i].strip():
                i += 1
                continue
            raise InvalidArgument(
                f"Line {i + 1} of the patch is outside any hunk: {_show(lines[i])}. A hunk is"
                " '@@ -l,n +l,m @@' followed by exactly n context/'-' and m context/'+' lines."
            )
        number, header_line = len(hunks) + 1, i
        old_left, new_left = int(header[2] or 1), int(header[4] or 1)
        body: list[_Line] = []
        i += 1
        while old_left > 0 or new_left > 0 or (i < len(lines) and lines[i].startswith(b"\\")):
            line = lines[i] if i < len(lines) else b"?"  # the patch ended: fails as a bad op
            if line.startswith(b"\\") and body:
                body[-1] = replace(body[-1], no_eol=True)
                i += 1
                continue
            # A blank line is blank context: models often drop its leading space.
            op = line[:1] or b" "
            old_left -= op in (b" ", b"-")
            new_left -= op in (b" ", b"+")
            if op not in (b" ", b"-", b"+") or old_left < 0 or new_left < 0:
                raise InvalidArgument(
                    f"Hunk {number} ({_show(lines[header_line])}) does not match its line"
                    " counts: it needs as many context and '-' lines as its old count, and"
                    " context and '+' lines as its new count; fix the counts or the lines."
                )
            body.append(_Line(op, line[1:]))
            i += 1
        hunks.append(_Hunk(number, int(header[1]), tuple(body)))
    if not hunks:
        raise InvalidArgument(
            "The patch has no hunks: send a unified diff with '@@ -l,n +l,m @@' sections."
        )
    return _Patch(creates=old_name == b"/dev/null", hunks=tuple(hunks))


def _show(text: bytes) -> str:
    shown = text.decode("utf-8", errors="replace")
    return repr(shown if len(shown) <= 80 else shown[:77] + "...")


def _split_lines(content: bytes) -> list[tuple[bytes, bytes]]:
    """(text, line ending) pairs; the last line's ending is b"" when the file lacks one."""
    parts = content.split(b"\n")
    last = parts.pop()
    lines = [(p[:-1], b"\r\n") if p.endswith(b"\r") else (p, b"\n") for p in parts]
    if last:
        lines.append((last, b""))
    return lines


def _find(texts: list[bytes], old: list[bytes], want: int, low: int) -> int | None:
    """The start nearest ``want`` (not before ``low``) where ``old`` matches exactly."""
    if not old:  # a pure insertion has no context to search by
        return want if low <= want <= len(texts) else None
    high = len(texts) - len(old)
    for distance in range(max(want - low, high - want) + 1):
        for at in (want - distance, want + distance):
            if low <= at <= high and texts[at : at + len(old)] == old:
                return at
    return None


def _apply_hunks(content: bytes, hunks: tuple[_Hunk, ...], rel: str) -> bytes:
    lines = _split_lines(content)
    texts = [text for text, _ in lines]
    crlf = sum(end == b"\r\n" for _, end in lines)
    eol = b"\r\n" if crlf > len(lines) - crlf else b"\n"  # added lines follow the file
    out: list[tuple[bytes, bytes]] = []
    cursor = offset = 0
    for hunk in hunks:
        # Context must match exactly, but a hunk may sit a few lines from where its header
        # says (as with `git apply`): models often miscount line numbers, rarely context.
        at = _find(texts, hunk.old, hunk.position + offset, cursor)
        if at is None:
            raise Conflict(_mismatch(texts, hunk, hunk.position + offset, rel))
        offset = at - hunk.position
        out.extend(lines[cursor:at])
        for line in hunk.lines:
            if line.op == b" ":
                out.append(lines[at])
            elif line.op == b"+":
                out.append((line.text, b"" if line.no_eol else eol))
            at += line.op != b"+"
        cursor = at
    out.extend(lines[cursor:])
    # A line without an ending that the patch put before others (e.g. it appended after an
    # unterminated last line without saying so) gets one, or two lines would fuse.
    return b"".join(
        text + (end or (eol if n < len(out) - 1 else b"")) for n, (text, end) in enumerate(out)
    )


def _mismatch(texts: list[bytes], hunk: _Hunk, at: int, rel: str) -> str:
    where = f"Hunk {hunk.number} of the patch does not apply to {rel!r}"
    redo = "read the file again and make the patch against its current content"
    at = max(at, 0)
    for k, expected in enumerate(hunk.old):
        actual = texts[at + k] if at + k < len(texts) else None
        if actual != expected:
            found = "the end of the file" if actual is None else _show(actual)
            return (
                f"{where}: it expects {_show(expected)} at line {at + k + 1}, but there is"
                f" {found}, and its lines are nowhere else after the previous hunk; {redo}."
            )
    return f"{where}: it inserts at line {at + 1}, past the end of the file; {redo}."


def plan_patch(workspace: Path, path: str, patch: str, base_hash: str | None) -> FileWritePlan:
    """Plan applying a one-file unified diff to ``path``; nothing is written.

    Context and removed lines must match the file exactly (line endings aside: the file's
    CRLF or LF endings are kept, and added lines get the file's usual ending).
    """
    target, rel = _locate(workspace, path)
    parsed = _parse_patch(patch)
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
    new = _apply_hunks(snapshot.content if snapshot else b"", parsed.hunks, rel)
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


def check_write(workspace: Path, plan: FileWritePlan) -> WriteState:
    """Whether ``plan`` already took effect, may be applied, or meets a file changed since."""
    target, _ = _locate(workspace, plan.path)
    current, problem = _hash_now(target)
    if problem:
        return WriteState.CONFLICT
    if current == plan.after_hash:
        return WriteState.ALREADY_APPLIED
    if current == plan.before_hash:
        return WriteState.APPLICABLE
    return WriteState.CONFLICT
