"""Carry out an undo plan beneath the workspace's descriptor, never through a symlink.

Choices, and why
- **The file tools' rules.** Every directory is opened from a descriptor of the workspace
  root with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` or the ``O_NOFOLLOW`` walk
  (``filetools._beneath``); every change (unlink, rmdir, mkdir, rename, the temporary file
  of a restored content) is made relative to the descriptor of its directory. A symlink
  swapped in after the plan's check stops the step with ELOOP / ENOTDIR: nothing is ever
  written outside the workspace, whatever a sandboxed process does meanwhile.
- **A restored content is atomic and verified twice.** It is copied from its blob into a
  temporary file beside its path while being hashed; only a copy whose hash is the
  effect's before hash is renamed into place (a blob altered since the plan read it is
  refused, the temporary file removed). A rename replaces a symlink swapped in at the name
  itself and never writes through it.
- **Permission bits.** A file whose content is put back gets the bits its effect recorded
  (``before_mode``: a staged commit records them with the before-image); without them, it
  keeps the bits of the file it replaces, or comes back 0644 less the umask where none is.
  Never set-uid, set-gid or sticky.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from pathlib import Path

from shellwardd.errors import PermissionDenied, StateError
from shellwardd.filetools._beneath import DIR_FLAGS, closing_fd, make_dirs, open_beneath, open_root
from shellwardd.filetools._tools import TEMP_SUFFIX
from shellwardd.staging.blobs import BlobStore
from shellwardd.watch.hashing import HASH_PREFIX, LINK_PREFIX

from .plan import StepKind, UndoPlan, UndoStep

_CHUNK = 1 << 20


def restore(workspace: Path, plan: UndoPlan, blobs: BlobStore) -> None:
    """Carry out every step of ``plan``; PermissionDenied when a path now goes through a
    symlink (the steps before it are done: the ledger records what changed)."""
    with closing_fd(open_root(workspace)) as root:
        for step in plan.steps:
            try:
                _apply(root, step, blobs)
            except OSError as exc:
                raise PermissionDenied(
                    f"Could not restore {step.source or step.path}: {exc.strerror} (a symlink "
                    "or a file now stands where a directory was, or it changed during the "
                    "undo). Nothing was written outside the workspace; the call's entry lists "
                    "what was restored before this."
                ) from exc


def _split(rel: str) -> tuple[tuple[str, ...], str]:
    parts = tuple(p for p in rel.rstrip("/").split("/") if p)
    return parts[:-1], parts[-1]


def _apply(root: int, step: UndoStep, blobs: BlobStore) -> None:
    dirs, name = _split(step.path)
    if step.kind is StepKind.UNRENAME:
        back_dirs, back_name = _split(step.source)
        with (
            closing_fd(open_beneath(root, dirs, DIR_FLAGS)) as src,
            closing_fd(make_dirs(root, back_dirs)) as dst,
        ):
            os.rename(name, back_name, src_dir_fd=src, dst_dir_fd=dst)
            os.fsync(dst)
            os.fsync(src)
        return
    if step.kind is StepKind.MAKE_DIR:
        with closing_fd(make_dirs(root, (*dirs, name))):
            return
    parent_fd = (
        make_dirs(root, dirs)
        if step.kind is StepKind.WRITE
        else open_beneath(root, dirs, DIR_FLAGS)
    )
    with closing_fd(parent_fd) as parent:
        if step.kind is StepKind.REMOVE:
            os.unlink(name, dir_fd=parent)
        elif step.kind is StepKind.REMOVE_DIR:
            os.rmdir(name, dir_fd=parent)
        else:
            _put_back(parent, name, step, blobs)
        os.fsync(parent)


def _put_back(parent: int, name: str, step: UndoStep, blobs: BlobStore) -> None:
    temp = f".{name[:200]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    before = step.before
    try:
        if before.startswith(LINK_PREFIX):
            os.symlink(before.removeprefix(LINK_PREFIX), temp, dir_fd=parent)
        else:
            mode = step.mode & 0o777 or _mode_to_keep(parent, name)
            _copy_blob(parent, temp, before, blobs, mode)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=parent)
        raise


def _mode_to_keep(parent: int, name: str) -> int | None:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else None


def _copy_blob(parent: int, temp: str, before: str, blobs: BlobStore, mode: int | None) -> None:
    source = os.open(blobs.path_of(before), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    digest = hashlib.sha256()
    with closing_fd(source), closing_fd(os.open(temp, flags, 0o644, dir_fd=parent)) as target:
        if mode is not None:
            os.fchmod(target, mode)
        while chunk := os.read(source, _CHUNK):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:  # a write may take less than it was given
                view = view[os.write(target, view) :]
        os.fsync(target)
    if HASH_PREFIX + digest.hexdigest() != before:
        raise StateError(
            f"the stored before-image {before} was altered in the store ({blobs.root}) during "
            "the undo; it was not restored. Tell the operator."
        )
