"""Where a call's staged writes live: one directory per call in the state dir.

Choices, and why
- **In the state dir.** ``<state>/staging/<call_id>/{upper,work}``: private (the state dir
  is 0700, and the overlay reaches ``upper`` with the mounter's credentials, so the
  sandbox user never needs to), and on the workspace's file system when the state dir is,
  so that commit is a rename of each staged file (a copy otherwise).
- **The mount point is elsewhere.** The overlay is mounted in the call's own mount
  namespace (see :mod:`shellwardd.sandbox.runner`); bwrap, running as the sandbox user,
  must reach the mount point: a root daemon's is under its 0711 views directory, another
  daemon's in the call's staging directory.
- **Kept for a human on conflict**, removed otherwise once committed or discarded.
- **Removed off the call's path.** Removing a used overlay's directories took 3-7 ms a
  call on a busy machine (each ``rmdir`` of them waits in the kernel), more than a call's
  own Python work. A discard renames the call's directory into ``<root>.discarded`` (one
  ``rename``, ~0.1 ms: the call's name is free and its files unreachable at once), and one
  thread per daemon removes what is there; the first discard also removes what a stopped
  daemon left there.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

# Overlay options are comma-separated and lowerdir uses ':' between layers; a path holding
# either (or a backslash, the escape) cannot be passed safely.
_UNSAFE = (",", ":", "\\", "\n")


class StagingError(Exception):
    """A call's staging directory could not be made; the message says why."""


@dataclass(frozen=True)
class StagedDirs:
    """One call's overlay: ``upper`` takes its writes, ``work`` is overlayfs's own scratch
    space, ``mountpoint`` is where the merged view is mounted (in the call's namespace)."""

    root: Path
    upper: Path
    work: Path
    mountpoint: Path

    def options(self, lower: Path, *, userxattr: bool) -> str:
        """The overlay mount options (``userxattr``: mounted in a user namespace)."""
        self._check(lower)
        # metacopy off: every staged file holds its whole content (commit moves it alone);
        # no redirects: a directory rename is a copy, so the upper is plain files. (In a
        # user namespace the kernel accepts only "nofollow", which creates none either.)
        redirect = "nofollow" if userxattr else "off"
        options = (
            f"lowerdir={lower},upperdir={self.upper},workdir={self.work},"
            f"redirect_dir={redirect},metacopy=off,index=off"
        )
        return f"{options},userxattr" if userxattr else options

    def fuse_options(self, lower: Path) -> str:
        """fuse-overlayfs's options: the same layers; other users (the sandbox's) may use
        the mount, with the kernel checking permissions as for any file system; no set-uid
        program and no device node works through it."""
        self._check(lower)
        return (
            f"lowerdir={lower},upperdir={self.upper},workdir={self.work},"
            "allow_other,default_permissions,nosuid,nodev"
        )

    def _check(self, lower: Path) -> None:
        for path in (lower, self.upper, self.work):
            if any(ch in str(path) for ch in _UNSAFE):
                raise StagingError(
                    f"{path} holds a character overlay options cannot carry (, : \\ or a "
                    "newline); rename it or choose another --state-dir"
                )


class StagingArea:
    """The per-call staging directories under ``root`` (``<state>/staging``)."""

    def __init__(
        self, root: Path, mount_root: Path | None = None, fuse_markers: bool = False
    ) -> None:
        self.root = root
        # Whether fuse-overlayfs makes the uppers (its .wh. markers are then read as such).
        self.fuse_markers = fuse_markers
        # None: each call's mount point is in its own staging directory.
        self._mount_root = mount_root

    def dirs(self, call_id: str) -> StagedDirs:
        """Where the call's directories are (made by :meth:`create`)."""
        if "/" in call_id or call_id in ("", ".", ".."):
            raise StagingError(f"not a call id: {call_id!r}")
        root = self.path(call_id)
        mountpoint = (
            root / "merged" if self._mount_root is None else self._mount_root / f"call-{call_id}"
        )
        return StagedDirs(root, root / "upper", root / "work", mountpoint)

    def create(self, call_id: str, workspace: Path, owner: tuple[int, int] | None) -> StagedDirs:
        """Make the call's directories; ``owner``: who the upper root must belong to for
        the sandbox to write the workspace root (a root daemon's sandbox uid)."""
        dirs = self.dirs(call_id)
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            dirs.root.mkdir(mode=0o700)
            dirs.work.mkdir(mode=0o700)
            # The merged root takes the upper root's attributes: the workspace root's mode.
            dirs.upper.mkdir(mode=0o700)
            os.chmod(dirs.upper, workspace.stat().st_mode & 0o7777)
            if owner is not None:
                os.chown(dirs.upper, *owner)
            dirs.mountpoint.parent.mkdir(mode=0o711, exist_ok=True)
            dirs.mountpoint.mkdir(mode=0o711, exist_ok=True)
        except OSError as exc:
            self.discard(dirs)
            raise StagingError(
                f"cannot make the staging directory {dirs.root}: {exc.strerror}"
            ) from exc
        return dirs

    def path(self, call_id: str) -> Path:
        return self.root / call_id

    def discard(self, dirs: StagedDirs) -> None:
        """Remove a call's staged writes and its mount point (the writes are moved out of
        the way now and removed in the background; see the module docstring)."""
        trash = self.root.with_name(f"{self.root.name}.discarded")
        try:
            trash.mkdir(mode=0o700, exist_ok=True)
            os.rename(dirs.root, trash / dirs.root.name)
        except FileNotFoundError:
            pass  # nothing staged (a create that failed early)
        except OSError:
            self.discard_path(dirs.root)  # removed here, then
        else:
            _REMOVER.remove_within(trash)
        if dirs.mountpoint.parent != dirs.root:
            with contextlib.suppress(OSError):
                dirs.mountpoint.rmdir()

    @staticmethod
    def discard_path(root: Path) -> None:
        # overlayfs leaves work/work mode 000: unreadable to a daemon that is not root.
        with contextlib.suppress(OSError):
            os.chmod(root / "work" / "work", 0o700)
        # rmtree never follows a symlink out of the tree it removes.
        shutil.rmtree(root, ignore_errors=True)


class _Remover:
    """One thread that empties trash directories, started with the first one."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Path] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def remove_within(self, trash: Path) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="staging-remover", daemon=True
                )
                self._thread.start()
        self._queue.put(trash)

    def _run(self) -> None:
        while True:
            trash = self._queue.get()
            # Every entry in the trash, not only the one queued: a stopped daemon's too.
            with contextlib.suppress(OSError), os.scandir(trash) as entries:
                for entry in entries:
                    StagingArea.discard_path(Path(entry.path))


_REMOVER = _Remover()
