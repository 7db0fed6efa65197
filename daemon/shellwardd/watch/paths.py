"""Which workspace paths the index holds, and what an event on any other path means.

Every path is relative to the workspace root, POSIX style, without a leading or trailing
slash. A path is one of four kinds:

- ``INDEXED``: a regular file or symlink the index records and calls report on.
- ``GIT``: inside a ``.git`` directory (at any depth, so nested repositories count too).
  Git internals change on every ``git status`` (the index file is refreshed) and hold
  thousands of objects, so they are not indexed; a write there is still reported, as one
  effect on the ``.git/`` directory itself (see :func:`git_marker`).
- ``IGNORED``: matched by one of the configured ignore globs; neither indexed nor reported.
- ``PRIVATE``: the monitor's own cookie directory (:data:`COOKIE_DIR`).

Ignore globs use :mod:`fnmatch` syntax. A glob without ``/`` is matched against every
path component (``node_modules``, ``*.pyc``); a glob with ``/`` is matched against the
whole relative path of the file and of each of its parent directories (``build/out``,
``docs/*.tmp``). A matched directory hides its whole subtree.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# The directory, inside the workspace, where the monitor writes its barrier cookies. It has
# to be inside the watched tree: inotify only orders the events of one watch group, and
# watchdog delays every later event behind a pending move, so a cookie written anywhere
# else could overtake the events of the call it is meant to close.
COOKIE_DIR = ".shellward/cookies"
GIT_DIR_NAME = ".git"
_COOKIE_PARENT = COOKIE_DIR.rpartition("/")[0]


class PathKind(enum.Enum):
    INDEXED = "indexed"
    GIT = "git"
    IGNORED = "ignored"
    PRIVATE = "private"


def git_marker(path: str) -> str:
    """The effect path for a write at ``path`` inside a ``.git`` directory: ``sub/.git/``."""
    parts = path.split("/")
    return "/".join(parts[: parts.index(GIT_DIR_NAME) + 1]) + "/"


def _compile(globs: Sequence[str]) -> re.Pattern[str] | None:
    if not globs:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


@dataclass(frozen=True)
class PathFilter:
    """Classifies relative paths; built once per workspace from its ignore globs."""

    ignore_globs: tuple[str, ...] = ()
    _name_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _path_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        globs = [g.strip("/") for g in self.ignore_globs if g.strip("/")]
        object.__setattr__(self, "_name_re", _compile([g for g in globs if "/" not in g]))
        object.__setattr__(self, "_path_re", _compile([g for g in globs if "/" in g]))

    def classify(self, path: str) -> PathKind:
        """The kind of any relative path (a file, a directory, or one that no longer exists)."""
        parts = path.split("/")
        if GIT_DIR_NAME in parts:
            return PathKind.GIT
        if path == COOKIE_DIR or path.startswith(COOKIE_DIR + "/"):
            return PathKind.PRIVATE
        if self._name_re is not None and any(self._name_re.match(p) for p in parts):
            return PathKind.IGNORED
        if self._path_re is not None:
            for i in range(1, len(parts) + 1):
                if self._path_re.match("/".join(parts[:i])):
                    return PathKind.IGNORED
        return PathKind.INDEXED

    def child_kind(self, child: str, name: str) -> PathKind:
        """The kind of ``child`` (named ``name``) when its parent is known to be INDEXED.

        The walk over a whole workspace calls this once per entry, so it checks only what
        the last component can change instead of re-checking every parent.
        """
        if name == GIT_DIR_NAME:
            return PathKind.GIT
        if child == COOKIE_DIR:
            return PathKind.PRIVATE
        if self._name_re is not None and self._name_re.match(name):
            return PathKind.IGNORED
        if self._path_re is not None and self._path_re.match(child):
            return PathKind.IGNORED
        return PathKind.INDEXED

    def all_indexed(self, directory: str, children: Sequence[str], names: Sequence[str]) -> bool:
        """Whether :meth:`child_kind` is INDEXED for every child (path and name) of
        ``directory``, itself INDEXED.

        The walk asks this once per directory, so that the usual directory, where every
        entry is indexed, costs no call per entry.
        """
        if directory == _COOKIE_PARENT or GIT_DIR_NAME in names:
            return False
        if self._name_re is not None and any(map(self._name_re.match, names)):
            return False
        return self._path_re is None or not any(map(self._path_re.match, children))
