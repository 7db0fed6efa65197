"""Opening paths beneath a workspace's directory descriptor, never through a symlink.

Choices, and why:

- **Descriptors, not names.** A tool that checks a path and then opens it by name loses a
  race against a process in the sandbox that swaps a directory with a symlink
  (``renameat2(RENAME_EXCHANGE)`` in a loop) between the two. So nothing here opens a
  name from ``/``: a path is opened relative to a descriptor of the workspace root, and
  everything after that (reading, listing, the temporary file, fsync, the rename, the
  clean-up) goes through the descriptor of the directory that was opened. A descriptor
  cannot be swapped; a sandboxed process can only move the directory it names around
  inside the workspace (its only writable mount), never out of it.
- **No symlink is followed**, not even one that points inside the workspace: a link that
  stays inside now may point outside a microsecond later, and telling the two apart is
  the race itself. The caller names the link in its refusal (:func:`find_obstacle`).
- **openat2(2) where the kernel has it** (Linux 5.6 and later): one system call resolves
  the whole path with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``,
  so the kernel itself refuses any step out of the root, through a symlink or a
  ``/proc`` magic link. Python has no binding: it is called through ctypes, by its
  number, on the architectures where that number is known to be 437.
- **A walk where it has not** (``ENOSYS`` on an older kernel, ``EPERM`` from a seccomp
  profile that refuses it): each component is opened with ``O_NOFOLLOW`` relative to the
  descriptor of the one before, which refuses the same links one step at a time. The
  kernel is probed once per process; :data:`use_openat2` can be turned off to test the
  walk on a kernel that has openat2.
- **OSErrors stay OSErrors.** What an errno means for the model (a symlink in the way, a
  parent that is a file) depends on the tool; the tools translate.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# <linux/openat2.h>
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
# openat2 is 437 on the architectures listed (it came after their syscall tables were
# unified); elsewhere (MIPS, Alpha, ...) the number differs and the walk is used.
_SYS_OPENAT2 = 437
_ARCHES_437 = {"x86_64", "i386", "i686", "aarch64", "arm64", "armv7l"}
_ARCHES_437 |= {"riscv64", "ppc64le", "s390x"}
# Errors of a kernel (or a seccomp profile) without openat2: fall back to the walk.
_UNSUPPORTED = (errno.ENOSYS, errno.EPERM)
# openat2 answers EAGAIN if a rename raced with its resolution: it is safe to try again.
_OPENAT2_ATTEMPTS = 8

# A directory opened to walk through, list, create in or fsync.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    raw = os.fsencode(path)
    for _ in range(_OPENAT2_ATTEMPTS):
        fd = int(_libc.syscall(_SYS_OPENAT2, dir_fd, raw, ctypes.byref(how), ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def _kernel_has_openat2() -> bool:
    if platform.machine() not in _ARCHES_437:
        return False
    try:
        os.close(_openat2(-100, ".", os.O_PATH | os.O_CLOEXEC, 0))  # -100: AT_FDCWD
    except OSError as exc:
        # Any other error is about the path (a cwd gone), from a kernel that has the call.
        return exc.errno not in _UNSUPPORTED
    return True


# Set once at import; tests turn it off to exercise the walk.
use_openat2 = _kernel_has_openat2()


def open_root(workspace: Path) -> int:
    """A descriptor of the workspace root (the operator's path: the one name trusted)."""
    return os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_beneath(root: int, parts: Sequence[str], flags: int, mode: int = 0) -> int:
    """Open ``parts`` (plain names: no "", ".", "..") beneath ``root``, following no link.

    ``O_NOFOLLOW`` and ``O_CLOEXEC`` are always added. Raises OSError: ``ELOOP`` or
    ``ENOTDIR`` where a symlink is in the way, ``ENOENT``, and so on.
    """
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if use_openat2:
        return _openat2(root, "/".join(parts) or ".", flags, mode)
    if not parts:
        return os.open(".", flags, mode, dir_fd=root)
    current = root
    try:
        for name in parts[:-1]:
            step = os.open(name, DIR_FLAGS, dir_fd=current)
            if current != root:
                os.close(current)
            current = step
        return os.open(parts[-1], flags, mode, dir_fd=current)
    finally:
        if current != root:
            os.close(current)


def make_dirs(root: int, parts: Sequence[str]) -> int:
    """A descriptor of directory ``parts`` beneath ``root``, created where missing.

    Each new directory is made inside the descriptor of its parent (``mkdirat``), never
    by name, and the parent is fsync'd so the new entry survives a crash like the file
    that will be written into it.
    """
    current = os.dup(root)
    try:
        for name in parts:
            try:
                step = open_beneath(current, (name,), DIR_FLAGS)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made by someone else meanwhile
                    os.mkdir(name, 0o777, dir_fd=current)
                os.fsync(current)
                step = open_beneath(current, (name,), DIR_FLAGS)
            os.close(current)
            current = step
    except BaseException:
        os.close(current)
        raise
    return current


@dataclass(frozen=True)
class Obstacle:
    """What stops a path now: a symlink (``target`` its target) or, before the last name,
    something that is not a directory (``target`` None). ``path`` is where, from the root."""

    path: str
    target: str | None


def find_obstacle(root: int, parts: Sequence[str]) -> Obstacle | None:
    """The first component of ``parts`` that stops a walk now, or None if none does.

    For error messages only: what it finds may change right after it looked.
    """
    current = os.dup(root)
    try:
        for i, name in enumerate(parts):
            where = "/".join(parts[: i + 1])
            try:
                st = os.stat(name, dir_fd=current, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    return Obstacle(where, os.readlink(name, dir_fd=current))
                if i == len(parts) - 1:
                    return None
                if not stat.S_ISDIR(st.st_mode):
                    return Obstacle(where, None)
                step = os.open(name, DIR_FLAGS, dir_fd=current)
            except OSError:
                return None
            os.close(current)
            current = step
        return None
    finally:
        os.close(current)


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """Close ``fd`` when the block ends, however it ends."""
    try:
        yield fd
    finally:
        os.close(fd)
