"""The per-workspace monitor and the per-call protocol of the write detector.

One :class:`WorkspaceMonitor` per workspace owns an observer (dirty paths, from inotify)
and a hash index (the state before). A call is bracketed by :meth:`~WorkspaceMonitor.
begin_call` and :meth:`~WorkspaceMonitor.finish_call`; its effects are the difference
between the index and the disk for the paths it dirtied, so the cost grows with what the
call touched, never with the size of the workspace.

Choices, and why:

- **Barriers.** Both ends of a call write a cookie file into :data:`~.paths.COOKIE_DIR`
  and wait for its event. inotify delivers one watch group's events in order, so every
  event before the opening cookie belongs to the time before the call (it updates the
  index, attributed to nobody) and every event between the cookies belongs to the call.
  The call is registered and unregistered by the observer thread as it handles the
  cookie, so no event can fall between two dirty sets. A move out of the workspace is
  held 0.5 s by watchdog (waiting for a matching move-in) and the closing cookie waits
  behind it: such a call takes 0.5 s longer and is still complete.
- **Start-up walks the tree once.** The observer starts with the root watched, and the
  walk that builds or re-validates the index adds each directory's watch just before it
  lists it (see :mod:`.observer`); an observer that replaces one after lost events
  watches the whole tree before the rescan instead.
- **Calls before the index is ready** wait in ``begin_call`` until it is (or raise
  :class:`IndexNotReady` after ``timeout``): before that the index has no before-state
  for the files not yet hashed, and guessing one could report a wrong effect.
- **Concurrency.** ``begin_call(exclusive=True)`` (the default, for calls that may
  write) runs alone in the workspace; ``exclusive=False`` calls (read-only by the
  classifier) run together. Every event during an overlap is put on every running call,
  each reports what changed against the index as it was when its own window began, and
  ``CallEffects.overlapped`` says that effects may include the other calls' writes.
- **Renames** are one RENAMED effect (see :mod:`.effects`).
- **Directories** created or removed are effects (path ending in ``/``). The index holds
  files only, so the monitor keeps the set of workspace directories beside it, in memory
  (:mod:`.dirset`: with each one's children, so that a call looks only at the subtrees
  its events covered, never at the whole set): filled by the walk that builds or
  re-validates the index at start-up, and updated by the same walks that find a call's
  (or an external edit's) changed files. A call's directory effects are the difference,
  inside the subtrees its events covered, between that set and what the walk lists now.
- **Writes into ``.git/``** (at any depth) give one effect per ``.git`` directory with
  path ``<dir>/.git/`` and no hashes: MODIFIED, or CREATED / DELETED when the directory
  itself appeared or went away during the call. Its files are not indexed.
- **Lost events.** An inotify queue overflow, a cookie that never arrives, or a
  directory that could not be watched (inotify watch limit) means the dirty set may be
  incomplete. The affected call then compares a full stat scan of the workspace against
  the index instead (effects marked ``from_rescan``, ``CallEffects.note`` says why); the
  same scan re-synchronises the index for edits made between calls. A watch-limit
  failure is permanent for the monitor: ``progress()`` says "degraded" and every call
  pays for a scan until the limit is raised and the monitor restarted.
- **Staged calls** (commands writing into an overlay) open no window: their effects are
  their overlay's upper layer, and nothing they do reaches the workspace until their
  commit, which runs in an ordinary exclusive window. What they need from the monitor is
  the workspace as it was when they began: :meth:`~WorkspaceMonitor.begin_staged` opens a
  :class:`StagedView`, and every later index update first saves the entries it replaces
  there (copy on write: the cost grows with what changes during the call, not with the
  workspace).
- **Commits** (a staged call's files moved into the workspace by a rename, in an
  exclusive window) need not be read again when the window closes: ``finish_call(
  written=...)`` takes each such file's entry as it was hashed in the upper layer, when
  the file now has the same inode, size and mtime and that mtime is older than the
  window's opening cookie. Any write after the rename gives the file an mtime at or after
  the cookie's, so an editor racing the commit is read like any write. The rename
  changes the ctime, so the index's own rule (ctime too) cannot vouch here: a writer that
  also puts the old mtime back (``utime``, which only the file's owner may do) between
  the rename and the window's close is not seen until the file changes again.
  Before it moves them in, the commit names them (:meth:`~WorkspaceMonitor.
  will_move_in`): they join the window's dirty files at once, so each is looked at when
  the window closes whatever its events say, and the observer drops their file events
  up to the closing cookie's (:mod:`.observer`, "A commit's own events"). Any event of
  such a file in the window is then one the close would not learn from: the close
  lstats the file after the closing cookie's event, so it sees every write made before
  it, and the events after it are handled.
- **External edits** (no call running) are applied to the index by a background thread
  shortly after they happen, and in any case before the next call starts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from shellward.types import EffectKind, FileEffect
from shellwardd.errors import WatchError

from .dirset import DirectorySet
from .effects import diff, dir_effects
from .gate import CallGate
from .hashing import IndexEntry, Stamp, as_written, fs_stamp, stamp_of
from .index import HashIndex, index_db_path
from .observer import WorkspaceObserver
from .paths import COOKIE_DIR, PathFilter, PathKind
from .scan import Changes, join, probe_many, stat_scan, walk

MonitorState = Literal["indexing", "ready", "degraded"]

# A closing cookie normally arrives within milliseconds, or 0.5 s after a move out of the
# workspace. Waiting longer than this means events are stuck or lost: fall back to a scan.
BARRIER_TIMEOUT_S = 10.0
# External edits come in bursts (a checkout, an IDE saving many files): apply them this
# long after the first one, in one batch.
_EXTERNAL_DEBOUNCE_S = 0.1

_NOTE_OVERFLOW = "inotify queue overflowed: effects come from a full stat scan of the workspace"
_NOTE_TIMEOUT = "watch barrier timed out: effects come from a full stat scan of the workspace"
_NOTE_WATCH_LIMIT = "inotify watch limit reached: falling back to stat scans"
_NOTE_OVERLAP = "ran at the same time as other calls: effects may include their writes"


class IndexNotReady(WatchError, TimeoutError):
    """``begin_call`` timed out while the workspace was still being indexed."""


@dataclass(frozen=True)
class IndexProgress:
    """How far the index is: ``shellward status`` shows "indexing 41,200 / 100,000 files"."""

    state: MonitorState
    files_done: int
    files_total: int
    note: str = ""


@dataclass(frozen=True)
class CallEffects:
    """What one call changed. ``from_rescan``: found by a full stat scan (events were
    lost), ``note`` says why; ``overlapped``: other calls ran in the same window."""

    effects: tuple[FileEffect, ...]
    from_rescan: bool = False
    note: str = ""
    overlapped: bool = False


@dataclass(frozen=True)
class CallWatch:
    """The handle of one running call, from ``begin_call`` to ``finish_call``."""

    call_id: int
    exclusive: bool


@dataclass(eq=False)
class _Dirty:
    """Paths that may have changed: files, directories (whole subtrees), ``.git`` dirs."""

    files: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    # .git marker → whether that directory existed when its first event was seen.
    git: dict[str, bool] = field(default_factory=dict)

    def covers(self, path: str) -> bool:
        return path in self.files or _within(path, self.dirs)


@dataclass(eq=False)
class _Call:
    watch: CallWatch
    dirty: _Dirty = field(default_factory=_Dirty)
    # None from the opening cookie until begin_call has flushed: the count to compare
    # with is not known before then.
    overflows_at_begin: int | None = None
    lost: bool = False
    overlapped: bool = False
    # The opening cookie's ctime: every write in the window is at or after it.
    opened: Stamp | None = None
    # Whether the observer drops events of files this call named (will_move_in).
    skipping: bool = False

    def will_rescan(self, overflows: int) -> bool:
        """Whether ``finish_call`` will compare the whole workspace with the index.

        An overflow seen while the call is still in ``begin_call`` does not count: its
        count is read after its own flush, and that flush (or the next one) rescans for
        such an overflow instead.
        """
        if self.lost:
            return True
        return self.overflows_at_begin is not None and overflows != self.overflows_at_begin


@dataclass(eq=False)
class _Cookie:
    arrived: threading.Event
    call: _Call | None
    opening: bool


class StagedView:
    """The workspace as it was when a staged call began (see "Staged calls" above)."""

    def __init__(self, monitor: WorkspaceMonitor) -> None:
        self._monitor = monitor
        # path → its entry when the call began, for paths the index changed since.
        self.saved: dict[str, IndexEntry | None] = {}

    def file(self, path: str) -> IndexEntry | None:
        with self._monitor._index_lock:
            if path in self.saved:
                return self.saved[path]
            return self._monitor._require_index().get(path)

    def under(self, directory: str) -> list[str]:
        prefix = f"{directory}/" if directory else ""
        with self._monitor._index_lock:
            now = set(self._monitor._require_index().under(directory))
            for path, entry in self.saved.items():
                if path.startswith(prefix):
                    (now.add if entry is not None else now.discard)(path)
        return sorted(now)

    def kind(self, path: str) -> PathKind:
        return self._monitor._filter.classify(path)

    def close(self) -> None:
        with self._monitor._index_lock:
            self._monitor._staged.discard(self)


class _Stopping(Exception):
    """Raised inside the index build when the monitor is stopped."""


class WorkspaceMonitor:
    """The write detector of one workspace (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        state_dir: Path,
        ignore_globs: Sequence[str] = (),
        *,
        barrier_timeout: float = BARRIER_TIMEOUT_S,
    ) -> None:
        self.root = Path(root).resolve()
        self._root = str(self.root)
        self._filter = PathFilter(tuple(ignore_globs))
        self._db_path = index_db_path(Path(state_dir), self.root)
        self._barrier_timeout = barrier_timeout
        self._cookie_dir = self.root / COOKIE_DIR

        # _lock guards what the observer threads touch: calls, dirty sets, cookies,
        # counters. It is held only for short bookkeeping, never for I/O.
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._external = _Dirty()
        self._cookies: dict[str, _Cookie] = {}
        self._overflows = 0
        self._observer_stale = False
        self._watch_limit = False
        # _index_lock serialises every read-compare-update of the index with the disk.
        self._index_lock = threading.RLock()
        self._index: HashIndex | None = None
        self._synced_overflows = 0
        # Every INDEXED directory of the workspace but the root, with its inode (see
        # "Directories" above).
        self._dirs = DirectorySet()
        # The open staged calls' views (updated under _index_lock).
        self._staged: set[StagedView] = set()

        self._ids = itertools.count(1)
        self._open_calls: dict[int, _Call] = {}
        self._gate = CallGate()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._state: MonitorState = "indexing"
        self._failed = False
        self._done = 0
        self._total = 0
        self._note = ""
        self._observer: WorkspaceObserver | None = None
        self._threads: list[threading.Thread] = []

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """Watch the workspace, then build or re-validate the index in the background."""
        self._ensure_cookie_dir()
        # Only the root for now: the build's walk adds the other watches as it goes.
        self._observer = self._new_observer(deferred=True)
        for target, name in ((self._build, "index"), (self._flush_loop, "flush")):
            thread = threading.Thread(target=target, name=f"shellward-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop watching and close the index (an index build in progress is abandoned)."""
        self._stopping.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
        for thread in self._threads:
            thread.join()
        with self._index_lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """True once the index is built (in whatever state: ready or degraded)."""
        return self._ready.wait(timeout)

    def progress(self) -> IndexProgress:
        state = self._state
        note = self._note
        if state == "ready" and self._watch_limit:
            state, note = "degraded", note or _NOTE_WATCH_LIMIT
        return IndexProgress(state, self._done, self._total, note)

    def flush(self) -> None:
        """Bring the index up to date with every change made before this call returns."""
        self._require_ready()
        self._barrier(None, opening=True)
        with self._index_lock:
            self._flush_external(None)

    def snapshot(self) -> dict[str, IndexEntry]:
        """A copy of the index (for tests and diagnostics: it costs a pass over it)."""
        with self._index_lock:
            return dict(self._require_index().items())

    # -- calls -------------------------------------------------------------------------

    def begin_call(self, exclusive: bool = True, timeout: float | None = None) -> CallWatch:
        """Open a call's watch window; the command may start once this returns.

        Waits until the index is ready and the gate admits the call (see the module
        docstring); raises :class:`IndexNotReady` or :class:`TimeoutError` after
        ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.wait_ready(timeout):
            p = self.progress()
            raise IndexNotReady(
                f"{self._root}: still indexing ({p.files_done:,} / {p.files_total:,} files)"
            )
        self._require_ready()
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._gate.acquire(exclusive=exclusive, timeout=remaining):
            raise TimeoutError(f"{self._root}: another call holds the workspace")
        call = _Call(CallWatch(next(self._ids), exclusive))
        try:
            self._barrier(call, opening=True)
            with self._index_lock:
                self._flush_external(call)
                # Read after the flush: an observer replaced by the flush may report a
                # last overflow while it stops, and what is lost before the command
                # starts is not the call's (the next flush rescans for it).
                with self._lock:
                    call.overflows_at_begin = self._overflows
        except BaseException:
            with self._lock:
                self._calls.pop(call.watch.call_id, None)
            self._gate.release(exclusive=exclusive)
            raise
        with self._lock:
            self._open_calls[call.watch.call_id] = call
        return call.watch

    def begin_staged(self, timeout: float | None = None) -> StagedView:
        """The view of a staged call (see "Staged calls"); the command may start once this
        returns. Waits for the index like :meth:`begin_call`, but for no gate."""
        if not self.wait_ready(timeout):
            p = self.progress()
            raise IndexNotReady(
                f"{self._root}: still indexing ({p.files_done:,} / {p.files_total:,} files)"
            )
        self._require_ready()
        self._barrier(None, opening=True)
        view = StagedView(self)
        with self._index_lock:
            self._flush_external(None)
            self._staged.add(view)
        return view

    def will_move_in(self, watch: CallWatch, paths: Iterable[str]) -> None:
        """The exclusive call ``watch`` is about to move the files ``paths`` into place
        (a commit): they are looked at when its window closes, whatever events say, and
        their file events are dropped until then (see "Commits" above)."""
        indexed = [p for p in paths if self._filter.classify(p) is PathKind.INDEXED]
        with self._lock:
            call = self._open_calls[watch.call_id]
            if not watch.exclusive:
                raise ValueError("only an exclusive window may name its own writes")
            call.dirty.files.update(indexed)
            call.skipping = self._observer is not None
        if self._observer is not None:
            self._observer.skip_file_events(indexed)

    def finish_call(
        self, watch: CallWatch, written: Mapping[str, IndexEntry] | None = None
    ) -> CallEffects:
        """Close the call's window (the command has exited) and return what it changed.

        ``written``: files the caller moved into place by a rename in this window, each
        with its entry hashed before the window opened (a commit's staged files): taken
        as they are, without reading them again, unless something wrote them since (see
        "Commits" above)."""
        with self._lock:
            call = self._open_calls.pop(watch.call_id)
        try:
            self._barrier(call, opening=False)
            if call.skipping and self._observer is not None:
                # The closing cookie's event ended it, unless that never came.
                self._observer.handle_all_events()
            with self._index_lock:
                index = self._require_index()
                with self._lock:
                    overflows = self._overflows
                    lost = call.will_rescan(overflows) or self._watch_limit
                note = ""
                listed: set[str] = set()
                if lost:
                    note = self._lost_note(call, overflows)
                    overflows = self._prepare_rescan()
                    changes = stat_scan(
                        index, self._root, self._filter, self._stamp(), listed=listed
                    )
                    states = {p: (index.get(p), e) for p, e in changes.items()}
                else:
                    states = self._states(call.dirty, listed, written or {}, call.opened)
                    changes = {p: a for p, (b, a) in states.items() if a != b}
                effects = diff(states, from_rescan=lost)
                created, removed = self._sync_dirs(None if lost else call.dirty.dirs, listed)
                effects.extend(dir_effects(created, removed, effects, from_rescan=lost))
                effects.extend(self._git_effects(call.dirty.git))
                if self._apply(changes, call) and lost:
                    with self._lock:
                        self._synced_overflows = overflows
        finally:
            self._gate.release(exclusive=watch.exclusive)
        if call.overlapped:
            note = f"{note}; {_NOTE_OVERLAP}" if note else _NOTE_OVERLAP
        effects.sort(key=lambda e: e.path)
        return CallEffects(tuple(effects), from_rescan=lost, note=note, overlapped=call.overlapped)

    # -- ObserverSink (called on watchdog's threads) ------------------------------------

    def on_dirty(self, path: str, is_dir: bool) -> None:
        with self._lock:
            for dirty in self._targets():
                (dirty.dirs if is_dir else dirty.files).add(path)
        if not self._calls:
            self._wake.set()

    def on_git_write(self, marker: str, self_event: str) -> None:
        with self._lock:
            if self._calls:
                for call in self._calls.values():
                    call.dirty.git.setdefault(marker, self_event != "created")

    def on_cookie(self, name: str) -> None:
        with self._lock:
            cookie = self._cookies.pop(name, None)
            if cookie is None:
                return
            if cookie.call is not None:
                self._switch(cookie.call, opening=cookie.opening)
        cookie.arrived.set()

    def on_overflow(self) -> None:
        with self._lock:
            self._overflows += 1
            self._observer_stale = True
        self._wake.set()

    def on_watch_limit(self) -> None:
        with self._lock:
            self._watch_limit = True
        self._wake.set()

    # -- internals ---------------------------------------------------------------------

    def _targets(self) -> Iterable[_Dirty]:
        if self._calls:
            return [call.dirty for call in self._calls.values()]
        return [self._external]

    def _switch(self, call: _Call, *, opening: bool) -> None:
        """Register or unregister ``call`` as receiving events (``_lock`` held)."""
        if opening:
            if self._calls:
                call.overlapped = True
                for other in self._calls.values():
                    other.overlapped = True
            self._calls[call.watch.call_id] = call
        else:
            self._calls.pop(call.watch.call_id, None)

    def _barrier(self, call: _Call | None, *, opening: bool) -> bool:
        """Write a cookie and wait for its event; False (and ``call.lost``) if it never came.

        With ``call``, the observer thread opens or closes the call's window when it
        handles the cookie, in event order.
        """
        name = f"{'open' if opening else 'close'}-{secrets.token_hex(8)}"
        cookie = _Cookie(threading.Event(), call, opening)
        with self._lock:
            self._cookies[name] = cookie
            overflows = self._overflows
        made = self._write_cookie(name) if self._observer is not None else None
        if made is not None:
            if opening and call is not None:
                call.opened = stamp_of(made)
            deadline = time.monotonic() + self._barrier_timeout
            # Wake up now and then: an overflow may have dropped the cookie itself.
            while not cookie.arrived.wait(0.05):
                if time.monotonic() > deadline or self._overflows != overflows:
                    break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._cookie_dir / name)
        with self._lock:
            if self._cookies.pop(name, None) is None:
                return True
            if call is not None:
                call.lost = True
                self._switch(call, opening=opening)
        return False

    def _write_cookie(self, name: str) -> os.stat_result | None:
        """Create the cookie, and return its stat. Made by ``mknod``, not opened for
        writing: its one event is the create (a close after writing would be a second,
        passed through the observer's threads for nothing)."""
        path = self._cookie_dir / name
        for _ in range(2):
            try:
                os.mknod(path, stat.S_IFREG | 0o600)  # fails if the name exists, like O_EXCL
            except FileNotFoundError:
                self._ensure_cookie_dir()  # a command removed it (e.g. `git clean -fdx`)
                continue
            except OSError:
                return None
            try:  # not opened (no event), never through a symlink put in its place
                return os.lstat(path)
            except OSError:
                return None
        return None

    def _ensure_cookie_dir(self) -> None:
        self._cookie_dir.mkdir(parents=True, exist_ok=True)
        # Keeps the cookie directory out of `git status` in the user's repository.
        ignore = self._cookie_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n")

    def _lost_note(self, call: _Call, overflows: int) -> str:
        if self._watch_limit:
            return self._note or _NOTE_WATCH_LIMIT
        if overflows != call.overflows_at_begin:
            return _NOTE_OVERFLOW
        return _NOTE_TIMEOUT

    def _new_observer(self, *, deferred: bool = False) -> WorkspaceObserver | None:
        observer = WorkspaceObserver(self.root, self._filter, self, deferred=deferred)
        try:
            observer.start()
        except OSError as exc:
            self._watch_limit = True
            self._note = f"cannot watch the workspace ({exc}): falling back to stat scans"
            return None
        return observer

    def _prepare_rescan(self) -> int:
        """Replace the observer if events were lost; the overflow count a rescan covers.

        After an overflow the observer's watches may be missing (directories created
        while events were dropped) or point at old paths (moves that were dropped), so a
        fresh one is started before the old one stops, and the rescan that follows
        covers everything up to its start. ``_index_lock`` held.
        """
        with self._lock:
            stale, self._observer_stale = self._observer_stale, False
        if stale and self._observer is not None:
            old, self._observer = self._observer, self._new_observer()
            old.stop()
        with self._lock:
            return self._overflows

    def _require_index(self) -> HashIndex:
        if self._index is None:
            raise WatchError(f"{self._root}: the write detector is not running")
        return self._index

    def _require_ready(self) -> None:
        if not self._ready.is_set() or self._index is None or self._failed:
            raise WatchError(f"{self._root}: the index is not available ({self._note})")

    def _states(
        self,
        dirty: _Dirty,
        listed: set[str],
        written: Mapping[str, IndexEntry] | None = None,
        opened: Stamp | None = None,
    ) -> dict[str, tuple[IndexEntry | None, IndexEntry | None]]:
        """Before (index) and after (disk) of every path ``dirty`` may cover; every
        directory listed on the way is added to ``listed``. ``written`` (hashed before
        ``opened``): see :meth:`finish_call`."""
        index = self._require_index()
        if not dirty.dirs and not dirty.files:
            return {}
        stamp = self._stamp()  # before any of the lstats below
        # path → its lstat from a walk, or None for probe() to take one.
        found: dict[str, os.stat_result | None] = dict.fromkeys(dirty.files)
        # A directory's event covers its whole subtree. `cp -r` reports every directory
        # it creates, each inside the last: outermost first, and a directory the walk of
        # an outer one has listed is not walked again.
        for directory in sorted(dirty.dirs, key=lambda d: d.count("/") + (d != "")):
            if directory in listed:
                continue
            found.setdefault(directory, None)
            for path in index.under(directory):
                found.setdefault(path, None)
            for path, st in walk(self._root, self._filter, directory, listed):
                found[path] = st
        found.pop("", None)
        ordered = sorted(found)
        after = self._as_written(found, written or {}, opened, stamp)
        rest = [p for p in ordered if p not in after]
        probed = probe_many(self._root, [(p, found[p]) for p in rest], stamp)
        after.update(zip(rest, probed, strict=True))
        return {p: (index.get(p), after[p]) for p in ordered}

    def _as_written(
        self,
        found: dict[str, os.stat_result | None],
        written: Mapping[str, IndexEntry],
        opened: Stamp | None,
        stamp: Stamp | None,
    ) -> dict[str, IndexEntry | None]:
        """The entries of the ``written`` files among ``found`` that nothing wrote since
        (:func:`~.hashing.as_written`); the lstats taken on the way go into ``found``."""
        vouched: dict[str, IndexEntry | None] = {}
        for path, known in written.items():
            if path not in found:
                continue
            now = found[path]
            if now is None:
                with contextlib.suppress(OSError):  # gone: probe() says so
                    found[path] = now = os.lstat(join(self._root, path))
            entry = as_written(now, known, opened, stamp) if now is not None else None
            if entry is not None:
                vouched[path] = entry
        return vouched

    def _sync_dirs(
        self, roots: set[str] | None, listed: set[str]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Update the directory set from a walk that listed ``listed`` under ``roots``
        (None: the whole workspace); return the directories (created, removed) there,
        with their inodes. ``_index_lock`` held."""
        now = listed - {""}
        if roots is None or "" in roots:
            before = set(self._dirs)
        else:
            # Only the dirty subtrees: the cost follows what the call touched.
            before = self._dirs.subtree(roots)
            now = {d for d in now if _within(d, roots)}
        created: dict[str, int] = {}
        for d in sorted(now - before):
            with contextlib.suppress(OSError):  # gone since the walk: not created after all
                created[d] = os.lstat(join(self._root, d)).st_ino
        removed = {d: self._dirs.pop(d) for d in sorted(before - now)}
        for d, inode in created.items():
            self._dirs.add(d, inode)
        return created, removed

    def _stamp(self) -> Stamp | None:
        return fs_stamp(self._cookie_dir)

    def _git_effects(self, git: dict[str, bool]) -> list[FileEffect]:
        effects = []
        for marker, existed in git.items():
            exists = os.path.lexists(join(self._root, marker.rstrip("/")))
            if existed and exists:
                effects.append(FileEffect(marker, EffectKind.MODIFIED))
            elif exists:
                effects.append(FileEffect(marker, EffectKind.CREATED))
            elif existed:
                effects.append(FileEffect(marker, EffectKind.DELETED))
        return effects

    def _apply(self, changes: Changes, call: _Call | None) -> bool:
        """Update the index, leaving alone what other running calls will still report.

        Returns False if nothing could be applied because another running call will
        rescan the whole workspace (and must find these changes still pending).
        """
        index = self._require_index()
        with self._lock:
            others = [c for c in self._calls.values() if c is not call]
            # Refusing is safe only if the changes are sure to be found again: the flush
            # that computed them has already taken their dirty set.
            if any(c.will_rescan(self._overflows) for c in others):
                return False
            if others:
                changes = {
                    p: e for p, e in changes.items() if not any(c.dirty.covers(p) for c in others)
                }
        for view in self._staged:
            for path in changes:
                if path not in view.saved:
                    view.saved[path] = index.get(path)
        index.update(changes)
        return True

    def _flush_external(self, call: _Call | None) -> None:
        """Apply the edits made while no call ran (``_index_lock`` held)."""
        index = self._require_index()
        with self._lock:
            dirty, self._external = self._external, _Dirty()
            overflows = self._overflows
            full = overflows != self._synced_overflows or self._watch_limit
        listed: set[str] = set()
        if full:
            overflows = self._prepare_rescan()
            changes = stat_scan(index, self._root, self._filter, self._stamp(), listed=listed)
        else:
            changes = {p: a for p, (b, a) in self._states(dirty, listed).items() if a != b}
        self._sync_dirs(None if full else dirty.dirs, listed)
        if self._apply(changes, call) and full:
            with self._lock:
                self._synced_overflows = overflows

    def _build(self) -> None:
        try:
            with self._index_lock:
                with self._lock:
                    overflows = self._overflows
                index = HashIndex(self._db_path, self.root)
                self._index = index
                self._total = len(index)
                listed: set[str] = set()
                changes = stat_scan(
                    index,
                    self._root,
                    self._filter,
                    self._stamp(),
                    on_progress=self._progress,
                    listed=listed,
                    watch=self._observer,
                )
                index.update(changes)
                self._sync_dirs(None, listed)
                self._synced_overflows = overflows
                self._flush_external(None)
                self._state = "ready"
        except _Stopping:
            return
        except Exception as exc:
            self._failed = True
            self._state = "degraded"
            self._note = f"index build failed: {exc}"
        finally:
            self._ready.set()

    def _progress(self, done: int, total: int) -> None:
        if self._stopping.is_set():
            raise _Stopping
        self._done, self._total = done, total

    def _flush_loop(self) -> None:
        self._ready.wait()
        while not self._stopping.is_set():
            self._wake.wait()
            if self._stopping.wait(_EXTERNAL_DEBOUNCE_S):
                return
            self._wake.clear()
            with self._index_lock:
                # Only between calls: a call's own window, opened after the last flush,
                # owns every event since; its begin_call has flushed what came before.
                if self._calls or self._index is None or self._state != "ready":
                    continue
                self._flush_external(None)


def _within(path: str, roots: set[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or below one (a step per level, not per root)."""
    while path:
        if path in roots:
            return True
        path = path.rpartition("/")[0]
    return "" in roots
