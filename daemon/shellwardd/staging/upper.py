"""A staged call's exact effects, read from its overlay's upper layer.

Choices, and why
- **The upper layer is the call's writes, and nothing else's.** Only the call's own
  processes see its overlay, so what an editor or another call wrote into the workspace
  meanwhile is never in it: effects are exact by construction, with no event to attribute.
- **Before comes from the write detector's index** as it was when the call began
  (:class:`Before`), after from the upper file. The index, not the lower file now: the
  lower is the live workspace, and a file changed there during the call must still show
  its state at the call's start, or the commit could not see the conflict.
- **What overlayfs writes** (mounted with ``redirect_dir=off,metacopy=off``): a created or
  modified file or symlink is a whole copy in the upper; a deleted path is a whiteout (a
  character device 0/0); a directory that replaced the lower one's contents is opaque
  (``trusted.overlay.opaque`` or, mounted in a user namespace, ``user.overlay.opaque``);
  a renamed file is a new copy plus a whiteout, paired back into one RENAMED effect by
  content; a renamed directory is a copy plus a whiteout, reported as such.
- **What fuse-overlayfs writes** is read the same way. Its whiteouts are character devices
  0/0 too when it may make one, else a file ``.wh.NAME``; an opaque directory has its xattr
  (``trusted.overlay.opaque``, else ``user.fuseoverlayfs.opaque``) *and* a file
  ``.wh..wh..opq``, and that marker comes with a whiteout of its own name (``.wh..opq``).
  fuse-overlayfs refuses every name that starts with ``.wh.`` to the command, so such a
  name in its upper is always one of its markers. These markers are read only from an
  upper fuse-overlayfs made (``fuse_markers``): under kernel overlayfs a command may write
  such a name itself, and reading it as a marker would let ``.git/.wh.config`` delete a
  file the sandbox holds read-only; there it is a file like any other.
- **Anything else fails closed.** A device node, FIFO or socket in the upper (a command
  has no business leaving one in a workspace, and a device node would give the next
  reader the device) raises :class:`UpperRefused`: nothing is committed.
- **The detector's rules for paths hold**: writes inside a ``.git`` directory are one
  effect per ``.git`` (``sub/.git/``, no hashes), paths the operator's ignore globs name
  have no effects (they are committed all the same).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shellward.types import EffectKind, FileEffect
from shellwardd.watch.effects import diff, dir_effects
from shellwardd.watch.hashing import IndexEntry, probe
from shellwardd.watch.paths import PathKind, git_marker

OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque", "user.fuseoverlayfs.opaque")
# fuse-overlayfs's markers: a whiteout of NAME is ``.wh.NAME`` where it cannot make a
# device; an opaque directory holds ``.wh..wh..opq``.
WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"


class UpperRefused(Exception):
    """The upper layer holds what no commit may apply; the message names it."""


class Before(Protocol):
    """The workspace as it was when the call began (the write detector's index)."""

    def file(self, path: str) -> IndexEntry | None: ...

    def under(self, directory: str) -> list[str]: ...

    def kind(self, path: str) -> PathKind:
        """Whether the write detector indexes ``path``, ignores it, or reports it as one
        ``.git`` effect."""


@dataclass(frozen=True)
class Entry:
    """One thing in the upper layer: a file or link, a whiteout, or a directory."""

    path: str  # relative to the workspace, "/"-separated
    kind: str  # "file", "whiteout", "dir", "opaque-dir"
    # Where it is in the upper ("/"-separated): ``path`` but for a ``.wh.NAME`` whiteout.
    stored: str
    # Its lstat, taken as the upper was listed (the upper is the call's alone, and its
    # command has ended: nothing changes it).
    st: os.stat_result


def entries(upper: Path, fuse_markers: bool = False) -> Iterator[Entry]:
    """Every entry of the upper layer, parents before children; UpperRefused on a device
    node, FIFO or socket."""
    root = str(upper)
    stack = [""]
    while stack:
        directory = stack.pop()
        with os.scandir(f"{root}/{directory}" if directory else root) as listing:
            for item in sorted(listing, key=lambda e: e.name):
                path = f"{directory}/{item.name}" if directory else item.name
                st = item.stat(follow_symlinks=False)
                if fuse_markers and item.name == OPAQUE_MARKER and stat.S_ISREG(st.st_mode):
                    continue  # read with its directory (is_opaque)
                if (
                    fuse_markers
                    and item.name.startswith(WHITEOUT_PREFIX)
                    and (stat.S_ISREG(st.st_mode) or _is_whiteout(st))
                ):
                    hidden = item.name.removeprefix(WHITEOUT_PREFIX)
                    shown = f"{directory}/{hidden}" if directory else hidden
                    yield Entry(shown, "whiteout", path, st)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    yield Entry(path, "file", path, st)
                elif _is_whiteout(st):
                    yield Entry(path, "whiteout", path, st)
                elif stat.S_ISDIR(st.st_mode):
                    opaque = is_opaque(item.path, fuse_markers)
                    yield Entry(path, "opaque-dir" if opaque else "dir", path, st)
                    stack.append(path)
                else:
                    raise UpperRefused(
                        f"the command left {path!r}, a device node, FIFO or socket, in the "
                        "workspace; such files are never committed"
                    )


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: str | Path, fuse_markers: bool = False) -> bool:
    if fuse_markers and os.path.isfile(os.path.join(path, OPAQUE_MARKER)):
        return True
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.EPERM, errno.ENOTSUP):
                raise
    return False


def staged_effects(
    upper: Path,
    workspace: Path,
    before: Before,
    fuse_markers: bool = False,
    hashed: dict[str, IndexEntry] | None = None,
    listing: list[Entry] | None = None,
) -> list[FileEffect]:
    """The call's effects: its upper layer against the workspace as it began
    (``fuse_markers``: fuse-overlayfs made the upper). ``hashed`` gets the entry of every
    staged file read on the way (what the commit's window may take without reading it),
    ``listing`` every entry of the upper in order (what the commit may apply without
    listing it again)."""
    states: dict[str, tuple[IndexEntry | None, IndexEntry | None]] = {}
    created_dirs: dict[str, int] = {}
    removed_dirs: dict[str, int] = {}
    listed: set[str] = set()

    def remove_below(directory: str) -> None:
        for path in before.under(directory):
            if path not in listed:
                states.setdefault(path, (before.file(path), None))

    git: dict[str, EffectKind] = {}
    staged, real_root = str(upper), str(workspace)
    for entry in entries(upper, fuse_markers):
        if listing is not None:
            listing.append(entry)
        kind = before.kind(entry.path)
        if kind is PathKind.GIT:
            # As the write detector reports them: one effect per .git directory.
            marker = git_marker(entry.path)
            existed = (workspace / marker).is_dir()
            gone = entry.kind == "whiteout" and f"{entry.path}/" == marker
            git[marker] = (
                EffectKind.DELETED if gone else
                EffectKind.MODIFIED if existed else EffectKind.CREATED
            )  # fmt: skip
            continue
        if kind is not PathKind.INDEXED:
            continue  # ignored by the operator, or the write detector's own (read-only)
        listed.add(entry.path)
        if entry.kind == "file":
            # The listing's lstat: one system call fewer per file.
            after = probe(f"{staged}/{entry.path}", st=entry.st)
            states[entry.path] = (before.file(entry.path), after)
            continue
        real = _lstat(f"{real_root}/{entry.path}")
        was_dir = real is not None and stat.S_ISDIR(real.st_mode)
        if entry.kind == "whiteout":
            if was_dir and real is not None:
                removed_dirs[entry.path] = real.st_ino
                remove_below(entry.path)
            else:
                states[entry.path] = (before.file(entry.path), None)
        else:
            if not was_dir:
                created_dirs[entry.path] = entry.st.st_ino
                if before.file(entry.path) is not None:  # a file replaced by a directory
                    states[entry.path] = (before.file(entry.path), None)
            elif entry.kind == "opaque-dir":
                remove_below(entry.path)
    if hashed is not None:
        hashed.update((path, after) for path, (_, after) in states.items() if after is not None)
    # What an opaque directory hid is deleted unless the upper holds it again.
    effects = diff(states, by_content=True)
    effects.extend(dir_effects(created_dirs, removed_dirs, effects))
    effects.extend(FileEffect(marker, kind) for marker, kind in git.items())
    effects.sort(key=lambda e: e.path)
    return effects


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
