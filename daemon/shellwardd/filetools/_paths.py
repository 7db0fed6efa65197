"""Where a file tool's path leads: inside the workspace, or refused.

A path is normalised lexically first (so the OS never sees a ``..``), then resolved through
the filesystem; both results are checked, so neither ``..`` nor a symlink leads out of the
workspace, into a ``.git`` directory, or into the write detector's cookie directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from shellwardd.errors import InvalidArgument, PermissionDenied
from shellwardd.watch.paths import COOKIE_DIR, GIT_DIR_NAME

_COOKIE_PARTS = tuple(COOKIE_DIR.split("/"))


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


def is_git(name: str) -> bool:
    # Case-folded: on a case-insensitive filesystem ``.GIT/config`` is git's config too.
    return name.casefold() == GIT_DIR_NAME


def _refuse_private(parts: tuple[str, ...], path: str) -> None:
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


def relative(workspace: Path, target: Path) -> str:
    """``target`` (from :func:`resolve_path`) relative to the workspace, POSIX style."""
    return target.relative_to(workspace.resolve()).as_posix()
