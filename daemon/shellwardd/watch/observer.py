"""A watchdog (inotify) observer over one workspace that reports dirty paths.

What watchdog does not do for us is done here:

- An explicit ``event_filter``. Watchdog's default mask includes open and close-nowrite
  events; on a tree of ~5,000 directories its own walk then overflows the inotify queue
  and it loops at 100% CPU (measured). Reads (``cat``, ``grep -r``) must cost nothing, so
  only events that can follow a change are asked for: created, modified, closed after
  writing, deleted, moved.
- Queue overflow. The kernel signals it with IN_Q_OVERFLOW; watchdog logs a warning on
  a process-wide logger (which cannot say which workspace overflowed) and rebuilds its
  watches by removing and re-adding every one of them. Each removal queues an IN_IGNORED
  event, so on a tree with more directories than the queue holds the rebuild overflows
  the queue again, forever (measured: a 16-event queue and 100 directories, ~180
  overflows a second, without end). Each observer here owns its inotify instance, whose
  ``handle_event`` is wrapped: an overflow is reported to this workspace's monitor and
  not passed on; the monitor replaces the whole observer instead (a fresh instance, so
  no IN_IGNORED flood) before it rescans.
- One thread less per event. Watchdog's emitter queues each event for the observer's
  thread, which hands it to the handler; here the emitter hands it to the handler itself
  (in the same order: one emitter per observer). A barrier's cookie waits behind every
  hop of every event before it, and the observer's threads spend a third to a half less
  CPU per barrier (docs/performance.md).
- Running out of watches. Watchdog swallows the ENOSPC of every watch below the root
  (a directory left unwatched without a word); ``add_callback`` is wrapped to see it.
- A second walk of the tree. Watchdog walks the whole tree to add its watches, before
  the index build walks it again (0.16 s of a 100k-file restart on a quiet machine;
  adding the watches alone is about a third of it: ``os.walk`` makes a ``DirEntry`` per
  file and lstats every directory once more). An
  observer started with ``deferred=True`` watches only the root; the walk that builds
  or re-validates the index adds each directory's watch just before it lists that
  directory (:meth:`WorkspaceObserver.watch_dir`), and hands every subtree it does not
  enter (``.git``, the cookie directory, ignored paths) to watchdog's own recursive
  walk (:meth:`WorkspaceObserver.watch_tree`). Nothing is lost in between: a change in
  a directory before its watch is added is seen by the listing that follows it, and a
  change after it is an event; a directory renamed before the walk reached it is an
  event of its parent, which is watched by then. Watchdog still adds the watches of
  directories created later, as before.
- A commit's own events. A commit moves its files into place in an exclusive window and
  the monitor looks at each of them when the window closes whatever events say, so the
  events of those files tell it nothing, yet each costs watchdog ~0.1 ms of Python on
  three threads, competing with the commit for the GIL. :meth:`WorkspaceObserver.
  skip_file_events` has them dropped as they are read (by watch descriptor and name,
  before watchdog handles them) up to the next file made in the cookie directory: the
  closing cookie at the latest, in the kernel's order, so that no event after the
  window is dropped however far the reading thread lags. Anything that could put the
  cookie directory elsewhere ends it as well (an event of a directory on its way naming
  the next step, or of such a directory itself, or an overflow). Only file
  events are dropped: a directory's (one made or moved in at such a name) still adds
  its watches and marks its subtree dirty, and a file reached through a directory moved
  meanwhile is found by the walk of that directory's new place.
- Listing directories that have no subdirectories. Watchdog's recursive watch lists
  every directory it watches, files and all (``os.walk``), to find the subdirectories;
  in ``.git`` with 100k loose objects that is 100k entries for 256 directories
  (0.05-0.12 s of a 100k-file restart). On the file systems that count a directory's
  subdirectories in its link count (2, plus one per subdirectory: ext2-4, XFS, tmpfs,
  the types :data:`NLINK_COUNTS_SUBDIRS` names, told apart by ``st_dev`` in
  ``/proc/self/mountinfo``), a directory with a link count of 2 has none, and is not
  listed (``find``'s leaf optimisation). Other file systems (Btrfs and overlayfs say 1,
  a network file system says what its server says) are listed as before. The link
  count is read after the directory's watch is added: a subdirectory made before that
  is counted, one made after is an event of the watch, and watchdog watches it then.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
    FileSystemMovedEvent,
)
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter, InotifyWatchGroup
from watchdog.observers.inotify_c import (
    CallbackId,
    InotifyEvent,
    InotifyFD,
    Mask,
    WatchCallback,
    WatchDescriptor,
)

from .paths import COOKIE_DIR, PathFilter, PathKind, git_marker

# Watchdog re-adds the watches of a new directory's subdirectories when their own create
# events arrive, and warns about each duplicate; the warning is attributed (stacklevel 3)
# to our add_callback wrapper below, so this filter silences exactly that noise.
warnings.filterwarnings(
    "ignore",
    message="Callback with id .* already exists",
    category=RuntimeWarning,
    module=re.escape(__name__),
)

EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileMovedEvent,
    DirMovedEvent,
]
_EVENT_TYPES = tuple(EVENT_FILTER)


class ObserverSink(Protocol):
    """What the observer tells the monitor; called on watchdog's threads."""

    def on_dirty(self, path: str, is_dir: bool) -> None:
        """``path`` (relative, INDEXED) may have changed; ``is_dir``: it is a directory."""

    def on_git_write(self, marker: str, self_event: str) -> None:
        """Something at or inside the ``.git`` directory ``marker`` (``sub/.git/``) changed.

        ``self_event`` is "created" or "deleted" when the ``.git`` directory itself
        appeared or went away, else "".
        """

    def on_cookie(self, name: str) -> None:
        """A barrier cookie named ``name`` was created in the cookie directory."""

    def on_overflow(self) -> None:
        """The kernel dropped events: any dirty set may be incomplete, and the watches
        and their paths may be stale until the observer is replaced."""

    def on_watch_limit(self) -> None:
        """A directory could not be watched (inotify watch limit): events will be missed."""


@dataclass(frozen=True)
class _Skipping:
    """The file events dropped until the next file made in the cookie directory."""

    files: frozenset[tuple[int, bytes]]  # (watch descriptor of its directory, name)
    cookie_watch: int
    # (watch, name) of each step from the root to the cookie directory, and (watch, b"")
    # of each directory on the way, for events of the directory itself.
    on_the_way: frozenset[tuple[int, bytes]]

    def ends_at(self, event: InotifyEvent) -> bool:
        """A file made in the cookie directory (a cookie, a stamp), an event of that
        directory or of a step of the way to it itself (gone, moved), one naming such a
        step, or an overflow. (A cookie removed after its barrier does not end it: the
        opening cookie's removal comes inside the window.)"""
        if event.wd == self.cookie_watch:
            return event.is_create or not event.name
        return event.is_queue_overflow or (event.wd, event.name) in self.on_the_way


# File systems whose directories have a link count of 2 plus one per subdirectory (or 1
# past a limit, as ext4 does beyond 65,000): a link count of exactly 2 means none.
NLINK_COUNTS_SUBDIRS = frozenset(("ext2", "ext3", "ext4", "xfs", "tmpfs"))
_MOUNTINFO = "/proc/self/mountinfo"


def counting_devices(mountinfo: str = _MOUNTINFO) -> frozenset[int]:
    """The ``st_dev`` of every mounted file system whose type is in
    :data:`NLINK_COUNTS_SUBDIRS` (none if the mount table cannot be read).

    A line of ``mountinfo`` (proc(5)) gives the device as ``major:minor`` in its third
    field and the type in the first field after the ``-`` that ends the optional fields.
    """
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return frozenset()
    devices = set()
    for line in lines:
        fields = line.split(" ")
        try:
            fstype = fields[fields.index("-", 6) + 1]
            major, minor = fields[2].split(":")
            device = os.makedev(int(major), int(minor))
        except (ValueError, IndexError):
            continue
        if fstype in NLINK_COUNTS_SUBDIRS:
            devices.add(device)
    return frozenset(devices)


class _InotifyFD(InotifyFD):
    """One inotify instance that reports overflows and exhausted watches."""

    def __init__(self, on_overflow: Callable[[], None], on_watch_limit: Callable[[], None]):
        super().__init__()
        self._on_overflow = on_overflow
        self._on_watch_limit = on_watch_limit
        # What is dropped now (see the module docstring); replaced whole, never changed
        # in place: another thread reads it.
        self.skipping: _Skipping | None = None

    def handle_event(self, event: InotifyEvent) -> None:
        skipping = self.skipping
        if skipping is not None:
            if skipping.ends_at(event):
                self.skipping = None
            elif not event.is_directory and (event.wd, event.name) in skipping.files:
                return
        if event.is_queue_overflow:
            self._on_overflow()
            return  # not to watchdog's rebuild: see the module docstring
        super().handle_event(event)

    def add_callback(
        self, path: bytes, mask: Mask, callback: WatchCallback, id_: CallbackId
    ) -> WatchDescriptor:
        try:
            return super().add_callback(path, mask, callback, id_)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                self._on_watch_limit()
            raise


@dataclass
class _WatchGroup(InotifyWatchGroup):
    """watchdog's recursive watch group, whose first walk can be left to the caller."""

    deferred: bool = False
    counting: frozenset[int] = frozenset()

    def _add_all_callbacks(self, path: bytes) -> None:
        """Watch ``path`` and every directory below it, symlinks not followed (watchdog's
        walk, without listing the directories that cannot have subdirectories: see the
        module docstring)."""
        self._add_callback(path)
        if not self.is_recursive:
            return
        stack = [path]
        while stack:
            directory = stack.pop()
            try:
                # After its watch: a subdirectory made since is an event of that watch.
                st = os.lstat(directory)
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if st.st_nlink == 2 and st.st_dev in self.counting:
                    continue  # no subdirectory
                with os.scandir(directory) as entries:
                    subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue  # gone or unreadable: watchdog skips it too
            for subdir in subdirs:
                self._add_callback(subdir)
            stack.extend(subdirs)

    def _activate(self) -> None:
        if not self.deferred:
            super()._activate()
            return
        with self._lock:
            self._add_callback(self.path)
            self._is_active = True

    def watch_dir(self, path: bytes) -> None:
        with self._lock:
            if self.is_active:
                self._add_callback(path)

    def watch_tree(self, path: bytes) -> None:
        with self._lock:
            if self.is_active:
                self._add_all_callbacks(path)

    def watch_of(self, path: bytes) -> int | None:
        """The watch descriptor of the directory ``path``, if it is watched."""
        with self._lock:
            return self._active_callbacks_by_path.get(path)


class _Emitter(InotifyEmitter):
    """watchdog's emitter, with our watch group, which it hands to ``on_group``, and
    which hands each event to ``dispatch`` itself instead of queueing it for the
    observer's thread: one thread hop less per event (a barrier's cookie waits behind
    each hop), in the same order (one emitter per observer)."""

    def __init__(
        self,
        *args: Any,
        deferred: bool,
        on_group: Callable[[_WatchGroup], None],
        dispatch: Callable[[FileSystemEvent], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._deferred = deferred
        self._on_group = on_group
        self._dispatch = dispatch

    def queue_event(self, event: FileSystemEvent) -> None:
        if isinstance(event, _EVENT_TYPES):
            self._dispatch(event)

    def on_thread_start(self) -> None:
        group = _WatchGroup(
            self._inotify_fd,
            os.fsencode(self.watch.path),
            is_recursive=self.watch.is_recursive,
            event_mask=self.get_event_mask_from_filter(),
            follow_symlink=self.watch.follow_symlink,
            deferred=self._deferred,
            counting=counting_devices(),
        )
        self._inotify = group
        self._on_group(group)


class _Observer(BaseObserver):
    """watchdog's InotifyObserver, with our inotify instance and emitter."""

    def __init__(
        self,
        inotify_fd: _InotifyFD,
        deferred: bool,
        on_group: Callable[[_WatchGroup], None],
        dispatch: Callable[[FileSystemEvent], None],
    ) -> None:
        self._inotify_fd = inotify_fd
        super().__init__(
            _Emitter, inotify_fd=inotify_fd, deferred=deferred, on_group=on_group,
            dispatch=dispatch,
        )  # fmt: skip

    def on_thread_start(self) -> None:
        self._inotify_fd.start()
        try:
            super().on_thread_start()
        except BaseException:
            self._stop_inotify()
            raise

    def on_thread_stop(self) -> None:
        super().on_thread_stop()
        self._stop_inotify()

    def _stop_inotify(self) -> None:
        self._inotify_fd.stop()
        self._inotify_fd.join()


class _Handler(FileSystemEventHandler):
    def __init__(self, root: str, pfilter: PathFilter, sink: ObserverSink) -> None:
        self._prefix = root + "/"
        self._root = root
        self._filter = pfilter
        self._sink = sink
        self._cookie_prefix = self._prefix + COOKIE_DIR + "/"

    def dispatch(self, event: FileSystemEvent) -> None:
        if isinstance(event, FileSystemMovedEvent) and event.dest_path:
            self._route(os.fsdecode(event.src_path), event, "deleted")
            self._route(os.fsdecode(event.dest_path), event, "created")
        elif isinstance(event, (FileCreatedEvent, DirCreatedEvent)):
            self._route(os.fsdecode(event.src_path), event, "created")
        elif isinstance(event, (FileDeletedEvent, DirDeletedEvent)):
            self._route(os.fsdecode(event.src_path), event, "deleted")
        else:
            self._route(os.fsdecode(event.src_path), event, "")

    def _route(self, path: str, event: FileSystemEvent, change: str) -> None:
        """Report ``path``; ``change`` says whether it appeared or went away, if known."""
        if path == self._root:
            self._sink.on_dirty("", True)
            return
        if not path.startswith(self._prefix):
            return
        rel = path[len(self._prefix) :]
        kind = self._filter.classify(rel)
        if kind is PathKind.INDEXED:
            self._sink.on_dirty(rel, event.is_directory)
        elif kind is PathKind.GIT:
            marker = git_marker(rel)
            self._sink.on_git_write(marker, change if rel == marker[:-1] else "")
        elif (
            kind is PathKind.PRIVATE
            and isinstance(event, FileCreatedEvent)
            and path.startswith(self._cookie_prefix)
        ):
            self._sink.on_cookie(path[len(self._cookie_prefix) :])


class WorkspaceObserver:
    """Watches ``root`` recursively and reports to ``sink``.

    With ``deferred``, only the root is watched at first: the caller's walk must then call
    :meth:`watch_dir` before it lists each directory and :meth:`watch_tree` for each
    subtree it does not enter (see the module docstring).
    """

    def __init__(
        self, root: Path, pfilter: PathFilter, sink: ObserverSink, *, deferred: bool = False
    ) -> None:
        self._root = str(root)
        self._sink = sink
        self._group: _WatchGroup | None = None
        self._inotify = _InotifyFD(sink.on_overflow, sink.on_watch_limit)
        handler = _Handler(self._root, pfilter, sink)
        self._observer = _Observer(self._inotify, deferred, self._set_group, handler.dispatch)
        self._observer.schedule(handler, self._root, recursive=True, event_filter=EVENT_FILTER)

    def start(self) -> None:
        """Add the watches (synchronously: the whole tree, or with ``deferred`` the root,
        is watched on return) and run.

        Raises OSError if the root itself cannot be watched.
        """
        self._observer.start()

    def watch_dir(self, path: str) -> None:
        """Watch the directory ``path`` (relative), not what is below it."""
        if path and self._group is not None:
            self._group.watch_dir(os.fsencode(f"{self._root}/{path}"))

    def watch_tree(self, path: str) -> None:
        """Watch ``path`` (relative) and every directory below it, if it is a directory."""
        full = f"{self._root}/{path}"
        try:
            is_dir = stat.S_ISDIR(os.lstat(full).st_mode)  # a symlink is not followed
        except OSError:
            return  # gone: if it comes back, its parent's watch reports it
        if is_dir and self._group is not None:
            self._group.watch_tree(os.fsencode(full))

    def skip_file_events(self, paths: Iterable[str]) -> None:
        """Drop the file events of ``paths`` (relative) up to the next file made in the
        cookie directory: the caller looks at those files itself, and writes a cookie when it is
        done (see the module docstring). A path whose directory is not watched keeps its
        events; so do all of them while the cookie directory's way is not watched."""
        group = self._group
        if group is None:
            return
        steps = COOKIE_DIR.split("/")
        way: list[int] = []  # the root's watch, then each step's to the cookie directory
        for i in range(len(steps) + 1):
            watch = group.watch_of(os.fsencode("/".join([self._root, *steps[:i]])))
            if watch is None:
                return
            way.append(watch)
        files: set[tuple[int, bytes]] = set()
        watches: dict[str, int | None] = {}
        for path in paths:
            directory, _, name = path.rpartition("/")
            if directory not in watches:
                full = f"{self._root}/{directory}" if directory else self._root
                watches[directory] = group.watch_of(os.fsencode(full))
            known = watches[directory]
            if known is not None:
                files.add((known, os.fsencode(name)))
        *parents, cookie_watch = way
        on_the_way = frozenset(
            (watch, name)
            for watch, step in zip(parents, steps, strict=True)
            for name in (os.fsencode(step), b"")
        )
        self._inotify.skipping = _Skipping(frozenset(files), cookie_watch, on_the_way)

    def handle_all_events(self) -> None:
        """End :meth:`skip_file_events` now, if no cookie event has ended it."""
        self._inotify.skipping = None

    def _set_group(self, group: _WatchGroup) -> None:
        self._group = group

    def stop(self) -> None:
        if self._observer.is_alive():
            self._observer.stop()
            self._observer.join()
