"""Where a file tool's path leads, and the refusals that do not depend on the disk.

A path is normalised lexically (so the OS never sees a ``..``) into plain names beneath
the workspace root; ``.git`` directories and the write detector's cookie directory are
refused by name. The disk is only ever reached through :mod:`._beneath`, from a
descriptor of the root, so what a name leads to is decided when it is opened, not here.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from shellwardd.errors import InvalidArgument, PermissionDenied, ShellwardError
from shellwardd.watch.paths import COOKIE_DIR, GIT_DIR_NAME

from ._beneath import Obstacle, closing_fd, find_obstacle, open_root

_COOKIE_PARTS = tuple(COOKIE_DIR.split("/"))


@dataclass(frozen=True)
class Location:
    """A path beneath the workspace root: its names, and how the model should read it."""

    parts: tuple[str, ...]

    @property
    def rel(self) -> str:
        return "/".join(self.parts) or "."


def locate(workspace: Path, path: str) -> Location:
    """``path`` (relative to ``workspace``, or absolute inside it) as names beneath it."""
    if not path.strip():
        raise InvalidArgument(
            "The path is empty: give a path relative to the workspace root, like 'src/main.py'."
        )
    if "\0" in path:
        raise InvalidArgument(f"The path {path!r} contains a NUL byte: remove it and try again.")
    parts = tuple(p for p in _lexical_parts(workspace, path) if p != ".")
    if any(is_git(p) for p in parts):
        raise PermissionDenied(
            f"{path!r} is in a .git directory: file tools may not touch git's internals"
            " (its config and hooks make git run code); use git itself through run_command."
        )
    if parts[: len(_COOKIE_PARTS)] == _COOKIE_PARTS:
        raise PermissionDenied(
            f"{path!r} is in {COOKIE_DIR}, where shellward keeps its own bookkeeping:"
            " file tools may not touch it; leave that directory alone."
        )
    return Location(parts)


def check_path(workspace: Path, path: str) -> str:
    """Refuse ``path`` now if it cannot work (for a refusal before a call starts).

    Besides :func:`locate`'s refusals: a symlink on the way (named), a parent that is a
    file. The tool checks
    again when it opens the path: this answer may be stale by then.
    """
    location = locate(workspace, path)
    with closing_fd(open_root(workspace)) as root:
        obstacle = find_obstacle(root, location.parts)
    if obstacle is not None:
        raise _obstacle_refusal(location, obstacle)
    return location.rel


def _lexical_parts(workspace: Path, path: str) -> tuple[str, ...]:
    # Normalising before touching the filesystem means the OS never sees a ``..``: a path
    # like ``link/../x`` stays inside even when ``link`` points elsewhere.
    norm = Path(os.path.normpath(path))
    root = workspace.resolve()
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


def is_git(name: str) -> bool:
    # Case-folded: on a case-insensitive filesystem ``.GIT/config`` is git's config too.
    return name.casefold() == GIT_DIR_NAME


def symlink_refusal(location: Location, link: str, target: str) -> PermissionDenied:
    return PermissionDenied(
        f"{location.rel!r} goes through the symlink {link!r} (to {target!r}): file tools"
        " follow no symlink, not even one inside the workspace, because a link can be"
        " pointed outside between a check and its use. Use the path the link points to,"
        " or run_command for what must go through the link."
    )


def _obstacle_refusal(location: Location, obstacle: Obstacle) -> ShellwardError:
    if obstacle.target is not None:
        return symlink_refusal(location, obstacle.path, obstacle.target)
    return InvalidArgument(
        f"{location.rel!r} cannot exist: one of its parent directories is a file"
        f" ({obstacle.path!r}). Check the path with list_files."
    )


def refusal(root: int, location: Location, exc: OSError) -> ShellwardError | None:
    """What an OSError from opening ``location`` means for the model; None: not ours.

    ``ENOENT`` is left to the caller (whether absence is an error depends on the tool).
    """
    rel = location.rel
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        obstacle = find_obstacle(root, location.parts)
        if obstacle is not None:
            return _obstacle_refusal(location, obstacle)
        # Nothing is in the way any more: a symlink was, and was swapped away again.
        return PermissionDenied(
            f"{rel!r} went through a symlink while shellward opened it (something is"
            " renaming files in the workspace right now): file tools follow no symlink."
            " Retry once nothing else changes that directory."
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PermissionDenied(
            f"{rel!r} is not accessible to shellward (file permissions): fix its permissions"
            " or leave it alone."
        )
    return None
