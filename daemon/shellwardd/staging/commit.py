"""Applying a staged call's upper layer to the real workspace.

Choices, and why
- **Check, keep, then apply.** :func:`conflicts` compares each path the call changed
  with its before hash in the workspace now (and refuses a path whose parent has become a
  symlink or a file); any difference is a conflict and nothing is applied. Then the
  before-image of every file about to be modified or deleted goes into the blob store
  (:mod:`.blobs`), its digest checked once more against the before hash, and its
  permission bits into its effect (``before_mode``: a blob is shared by content, a mode
  belongs to one file). Only then is the upper layer applied.
- **A rename per file where it can.** The upper is in the state dir; on the workspace's
  file system a staged file is renamed into place (atomic for each file, mode and content
  as the command left them); across file systems it is copied to a temporary name in the
  target directory and renamed from there.
- **Never through a symlink.** Every directory of the workspace is opened beneath the
  workspace root's descriptor with symlinks refused (:mod:`shellwardd.filetools._beneath`);
  a symlink the command made is moved as a link, never followed. Paths come from the
  upper layer's own names, which cannot hold ``..``.
- **Idempotent per path**, so that a commit cut short by a crash is finished by running
  it again (:func:`apply` at start-up): a moved file is no longer in the upper, a
  whiteout is removed once its path is, a directory that exists is left as it is.
- **Ownership.** A root daemon's sandbox writes as its sandbox uid: what it staged is
  given to the workspace's owner (a modified file keeps its own owner), as the idmapped
  workspace would have done.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from shellward.types import EffectKind, FileEffect
from shellwardd.filetools._beneath import (
    DIR_FLAGS,
    closing_fd,
    find_obstacle,
    make_dirs,
    open_beneath,
    open_root,
)
from shellwardd.watch.hashing import DIR_HASH, HASH_PREFIX, content_hash

from .blobs import BlobError, BlobStore
from .upper import OPAQUE_MARKER, OPAQUE_XATTRS, Entry, entries


def conflicts(workspace: Path, effects: Sequence[FileEffect]) -> list[str]:
    """The paths (``path: why``) whose state in the workspace is no longer the call's
    before state; empty when the commit may go ahead."""
    found: list[str] = []
    with closing_fd(open_root(workspace)) as root:
        for effect in effects:
            expected = {effect.path: effect.before_hash}
            if effect.kind is EffectKind.RENAMED:
                expected = {effect.renamed_from: effect.before_hash, effect.path: ""}
            for path, before in expected.items():
                parts = path.rstrip("/").split("/")
                obstacle = find_obstacle(root, parts[:-1]) if len(parts) > 1 else None
                if obstacle is not None:
                    what = "a symlink" if obstacle.target is not None else "not a directory"
                    found.append(f"{path}: {obstacle.path} is now {what}")
                    continue
                now = content_hash(workspace / path.rstrip("/"))
                if path.endswith("/") and effect.kind is EffectKind.CREATED and now == DIR_HASH:
                    continue  # the same directory made meanwhile: nothing to undo or lose
                if path.endswith("/") and not before and now == DIR_HASH:
                    continue
                if now != before:
                    found.append(f"{path}: {_describe(now)} now, {_describe(before)} before")
    return found


def keep_before_images(
    workspace: Path, effects: Sequence[FileEffect], blobs: BlobStore
) -> tuple[tuple[FileEffect, ...], list[str]]:
    """Store the before-image of every file the commit will modify or delete; the effects
    with the permission bits each such file has (``before_mode``, for undo), and the paths
    whose content no longer is the before hash (a conflict after all)."""
    kept = [
        (effect.renamed_from if effect.kind is EffectKind.RENAMED else effect.path, effect)
        for effect in effects
        # Nothing there, a directory, or a symlink (its target is in the effect): no blob.
        if effect.before_hash.startswith(HASH_PREFIX)
    ]
    digests = blobs.put_files([workspace / path for path, _ in kept])
    changed = [
        f"{path}: changed while the commit began"
        for (path, effect), digest in zip(kept, digests, strict=True)
        if HASH_PREFIX + digest != effect.before_hash
    ]
    modes: dict[str, int] = {}
    for path, effect in kept:
        # In the commit's exclusive window, after conflicts() found no link on the way:
        # the file just copied. Permission bits only (never set-uid, set-gid or sticky).
        try:
            mode = os.stat(workspace / path, follow_symlinks=False).st_mode
        except OSError as exc:
            raise BlobError(f"cannot read the mode of {path}: {exc.strerror}") from exc
        modes[effect.path] = stat.S_IMODE(mode) & 0o777
    with_modes = tuple(
        replace(effect, before_mode=modes[effect.path]) if effect.path in modes else effect
        for effect in effects
    )
    return with_modes, changed


def apply(
    upper: Path,
    workspace: Path,
    owner: tuple[int, int] | None,
    fuse_markers: bool = False,
    listing: Sequence[Entry] | None = None,
) -> int:
    """Move what ``upper`` holds into ``workspace``; returns how many paths it applied.

    ``owner``: who staged files must belong to (a root daemon's workspace owner), None to
    leave them as they are. ``listing``: the upper's entries as :func:`.upper.entries`
    listed them, if nothing has written the upper since (a commit's, listed when its
    effects were read: the command has ended), else the upper is listed here."""
    applied = 0
    with closing_fd(open_root(workspace)) as root:
        for entry in list(entries(upper, fuse_markers)) if listing is None else listing:
            parts = entry.path.split("/")
            source = upper / entry.stored
            # The root's own descriptor for its entries; a parent opened beneath it else.
            with _parent(root, parts) as parent:
                if entry.kind == "whiteout":
                    _remove(parent, parts[-1])
                    source.unlink()
                elif entry.kind in ("dir", "opaque-dir"):
                    opaque = entry.kind == "opaque-dir"
                    _make_dir(parent, parts[-1], source, owner, opaque=opaque)
                else:
                    _move(source, parent, parts[-1], owner)
            applied += 1
    return applied


@contextlib.contextmanager
def _parent(root: int, parts: Sequence[str]) -> Iterator[int]:
    if len(parts) == 1:
        yield root
        return
    with closing_fd(open_beneath(root, parts[:-1], DIR_FLAGS)) as parent:
        yield parent


def _remove(parent: int, name: str) -> None:
    """Remove ``name`` (a file, link or whole directory) from ``parent``, if it is there."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    with closing_fd(os.open(name, DIR_FLAGS, dir_fd=parent)) as directory:
        for child in os.listdir(directory):
            _remove(directory, child)
    os.rmdir(name, dir_fd=parent)


def _make_dir(
    parent: int, name: str, source: Path, owner: tuple[int, int] | None, *, opaque: bool
) -> None:
    """Make directory ``name`` as the staged one is; an opaque one first loses what the
    workspace holds there and the upper does not (what the command removed)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)  # a file (or link) the directory replaced
        st = None
    if st is None:
        os.mkdir(name, 0o700, dir_fd=parent)
    with closing_fd(make_dirs(parent, (name,))) as directory:
        if opaque:
            staged = set(os.listdir(source))
            for child in os.listdir(directory):
                if child not in staged:
                    _remove(directory, child)
            # Done once: a second pass (after a crash) must not remove what was moved in.
            for name in OPAQUE_XATTRS:
                with contextlib.suppress(OSError):
                    os.removexattr(source, name, follow_symlinks=False)
            (source / OPAQUE_MARKER).unlink(missing_ok=True)  # fuse-overlayfs's marker
        if st is None:
            os.chmod(directory, stat.S_IMODE(os.lstat(source).st_mode))
            if owner is not None:
                os.chown(directory, *owner)


def _move(source: Path, parent: int, name: str, owner: tuple[int, int] | None) -> None:
    """Put the staged file or link ``source`` at ``name`` in ``parent``."""
    with contextlib.suppress(FileNotFoundError):
        existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(existing.st_mode):
            _remove(parent, name)  # a directory the file replaced
        elif owner is not None:
            owner = (existing.st_uid, existing.st_gid)  # a modified file keeps its owner
    if owner is not None:
        os.chown(source, *owner, follow_symlinks=False)
    try:
        os.rename(source, name, dst_dir_fd=parent)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    # Another file system: a copy under a temporary name, then the rename.
    temp = f".shellward-commit-{secrets.token_hex(6)}"
    try:
        if source.is_symlink():
            os.symlink(os.readlink(source), temp, dir_fd=parent)
        else:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600,
                         dir_fd=parent)  # fmt: skip
            with os.fdopen(fd, "wb") as target, open(source, "rb") as staged:
                shutil.copyfileobj(staged, target)
                os.fchmod(target.fileno(), stat.S_IMODE(os.lstat(source).st_mode))
                if owner is not None:
                    os.fchown(target.fileno(), *owner)
                os.fsync(target.fileno())
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    source.unlink()


def _describe(state: str) -> str:
    if not state:
        return "absent"
    if state == DIR_HASH:
        return "a directory"
    return state if len(state) <= 24 else f"{state[:19]}…"
