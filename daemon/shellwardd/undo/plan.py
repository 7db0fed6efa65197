"""From a call's recorded file effects to the steps that put every file back.

Choices, and why
- **All or nothing, decided first.** Every file the call changed must still be exactly as
  the call left it (its after hash; absent for a file it deleted, and for the old name of
  a rename), or the undo is refused with CONFLICT naming each file changed since, before
  anything is written. Undoing over someone else's later edit would destroy it.
- **Seen through descriptors.** The state of each path is read beneath the workspace's
  descriptor without following any symlink (``filetools._beneath``): a link swapped in
  where a directory was reads as a link, a conflict, never as the file behind it.
- **Before-images are verified, not trusted.** A modified or deleted file is restored from
  the blob store, whose blob name is the SHA-256 of the content. Each blob is hashed
  again here; one that is missing (evicted) refuses the undo as RECORD_EXPIRED, one whose
  content does not match its name (tampered) as a daemon fault. Symlinks and directories
  need no blob: the effect itself records a link's target, and a directory is only there
  or not.
- **Order.** Renames are reversed first, then created files removed, created directories
  removed deepest first, deleted directories made again shallowest first, and file
  contents restored last, so each step finds the directories it needs.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shellward.types import EffectKind, FileEffect
from shellwardd.errors import Conflict, PermissionDenied, RecordExpired, StateError
from shellwardd.filetools._beneath import closing_fd, open_beneath, open_root
from shellwardd.staging.blobs import BlobStore
from shellwardd.watch.hashing import DIR_HASH, HASH_PREFIX, LINK_PREFIX

_CHUNK = 1 << 20
# A path whose walk meets a symlink or a non-directory: never the file the call left.
_BLOCKED = "(blocked by a symlink or a file on the way)"


class StepKind(enum.Enum):
    UNRENAME = "unrename"  # move ``path`` back to ``source``
    REMOVE = "remove"  # a file or symlink the call created
    REMOVE_DIR = "remove_dir"  # a directory the call created
    MAKE_DIR = "make_dir"  # a directory the call removed
    WRITE = "write"  # put ``before`` back at ``path`` (a blob, or a symlink target)


@dataclass(frozen=True)
class UndoStep:
    kind: StepKind
    path: str  # relative to the workspace
    # WRITE: the before hash (``sha256:<hex>`` → a blob; ``symlink:<target>``).
    before: str = ""
    # UNRENAME: where the file goes back to.
    source: str = ""
    # WRITE of a blob: the permission bits the file had (0: not recorded).
    mode: int = 0


@dataclass(frozen=True)
class UndoPlan:
    steps: tuple[UndoStep, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(step.source or step.path for step in self.steps))


def state_of(root: int, rel: str) -> str:
    """What an effect would record for ``rel`` now, read beneath ``root`` without following
    a link: "" absent, DIR_HASH, ``symlink:<target>``, ``sha256:<hex>``, or _BLOCKED."""
    parts = tuple(p for p in rel.rstrip("/").split("/") if p)
    *dirs, name = parts
    try:
        parent = open_beneath(root, dirs, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
            return _BLOCKED
        raise
    with closing_fd(parent):
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return ""
        if stat.S_ISLNK(st.st_mode):
            return LINK_PREFIX + os.readlink(name, dir_fd=parent)
        if stat.S_ISDIR(st.st_mode):
            return DIR_HASH
        if not stat.S_ISREG(st.st_mode):
            return _BLOCKED
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
        )
        with closing_fd(fd):
            return HASH_PREFIX + _hash_fd(fd)


def plan_undo(
    call_id: str, workspace: Path, effects: Sequence[FileEffect], blobs: BlobStore
) -> UndoPlan:
    """The steps that undo ``effects``; Conflict (files changed since), RecordExpired (an
    evicted before-image) or StateError (a tampered one) when it cannot be done whole."""
    for effect in effects:
        if _in_git(effect.path) or (effect.renamed_from and _in_git(effect.renamed_from)):
            raise PermissionDenied(
                f"call {call_id} changed {effect.path} inside .git, which shellward does not "
                "restore (git's own files make git run code); nothing was restored. Use git "
                "itself (git reflog, git reset) through run_command."
            )
    with closing_fd(open_root(workspace)) as root:
        changed = [e.path for e in effects if not _as_left(root, e)]
    if changed:
        shown = ", ".join(changed[:10]) + (
            f" and {len(changed) - 10} more" if len(changed) > 10 else ""
        )
        raise Conflict(
            f"Cannot undo call {call_id}: files it changed were changed since ({shown}). "
            "Nothing was restored. Look at them (and `shellward show` the call), then fix them "
            "by hand or ask the user."
        )
    for effect in effects:
        if _needs_image(effect) and not effect.before_hash:
            raise RecordExpired(
                f"Cannot undo call {call_id}: the content {effect.path} had before it was never "
                "recorded (it could not be read then). Nothing was restored; restore it from "
                "version control or a backup."
            )
        for before in _images(effect):
            _check_blob(call_id, effect.path, before, blobs)
    return UndoPlan(tuple(_steps(effects)))


def _in_git(path: str) -> bool:
    return ".git" in path.rstrip("/").split("/")


def _is_dir(effect: FileEffect) -> bool:
    return effect.path.endswith("/")


def _as_left(root: int, effect: FileEffect) -> bool:
    now = state_of(root, effect.path)
    if effect.kind is EffectKind.DELETED:
        return now == ""
    if effect.kind is EffectKind.RENAMED and state_of(root, effect.renamed_from) != "":
        return False
    if _is_dir(effect):
        return now == DIR_HASH
    return now == effect.after_hash and now != ""


def _needs_image(effect: FileEffect) -> bool:
    """Whether undoing ``effect`` puts content back (not only a name or a directory)."""
    if _is_dir(effect):
        return False
    return effect.kind in (EffectKind.MODIFIED, EffectKind.DELETED) or (
        effect.kind is EffectKind.RENAMED and effect.before_hash != effect.after_hash
    )


def images_needed(effects: Sequence[FileEffect]) -> tuple[str, ...]:
    """The hex digests of the before-images an undo of ``effects`` reads (for retention)."""
    return tuple(image.removeprefix(HASH_PREFIX) for e in effects for image in _images(e))


def _images(effect: FileEffect) -> list[str]:
    """The before-images restoring ``effect`` needs from the blob store."""
    if _needs_image(effect) and effect.before_hash.startswith(HASH_PREFIX):
        return [effect.before_hash]
    return []


def _check_blob(call_id: str, path: str, before: str, blobs: BlobStore) -> None:
    blob = blobs.path_of(before)
    try:
        fd = os.open(blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RecordExpired(
            f"Cannot undo call {call_id}: the before-image of {path} is no longer kept (it "
            "was evicted by the undo store's size or retention limit, or never stored). "
            "Nothing was restored; restore it from version control or a backup."
        ) from None
    with closing_fd(fd):
        actual = HASH_PREFIX + _hash_fd(fd)
    if actual != before:
        raise StateError(
            f"Cannot undo call {call_id}: the stored before-image of {path} does not match "
            f"its hash (the store at {blobs.root} was altered). Nothing was restored; tell the "
            "operator, who should check the state directory."
        )


def _hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _steps(effects: Sequence[FileEffect]) -> list[UndoStep]:
    renamed = [e for e in effects if e.kind is EffectKind.RENAMED]
    created = [e for e in effects if e.kind is EffectKind.CREATED]
    deleted = [e for e in effects if e.kind is EffectKind.DELETED]
    modified = [e for e in effects if e.kind is EffectKind.MODIFIED]
    steps = [UndoStep(StepKind.UNRENAME, e.path, source=e.renamed_from) for e in reversed(renamed)]
    steps += [UndoStep(StepKind.REMOVE, e.path) for e in created if not _is_dir(e)]
    dirs = sorted((e.path for e in created if _is_dir(e)), key=_depth, reverse=True)
    steps += [UndoStep(StepKind.REMOVE_DIR, path) for path in dirs]
    gone = sorted((e.path for e in deleted if _is_dir(e)), key=_depth)
    steps += [UndoStep(StepKind.MAKE_DIR, path) for path in gone]
    steps += [
        UndoStep(StepKind.WRITE, e.path, before=e.before_hash, mode=e.before_mode)
        for e in (*modified, *deleted)
        if not _is_dir(e) and e.before_hash
    ]
    steps += [
        UndoStep(StepKind.WRITE, e.renamed_from, before=e.before_hash, mode=e.before_mode)
        for e in renamed
        if e.before_hash and e.before_hash != e.after_hash
    ]
    return steps
