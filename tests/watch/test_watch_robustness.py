"""The write detector under stress: lost events, restarts, storms, concurrency, start-up."""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import random
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from watchdog.observers import inotify_c

from shellward.types import EffectKind, FileEffect
from shellwardd.watch import (
    CallEffects,
    CallWatch,
    IndexProgress,
    WorkspaceMonitor,
    detector,
    observer,
    scan,
)
from shellwardd.watch.hashing import IndexEntry, Stamp, probe
from shellwardd.watch.paths import PathFilter
from shellwardd.watch.scan import walk

from .conftest import fill, run, sha, summary

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")

MAX_QUEUED = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())


def overflowing_writes(path: Path) -> str:
    """A shell loop appending to ``path`` often enough to overflow an inotify queue of the
    size the kernel gives every instance: each append queues a modify and a close-write,
    never merged with the event before. (Lowering the limit instead would change it for the
    whole machine, and a daemon another test starts meanwhile would get the tiny queue.
    Appending, not truncating: ext4 flushes a truncated and rewritten file at its close.)"""
    if MAX_QUEUED > 200_000:
        pytest.skip(f"fs.inotify.max_queued_events is {MAX_QUEUED}: too many writes to overflow")
    return (
        f"i=0; while [ $i -lt {MAX_QUEUED} ]; do echo x >> {shlex.quote(str(path))}; "
        "i=$((i+1)); done"
    )


def with_reader_stalled(command: str) -> None:
    """Run ``command`` while this thread holds the GIL.

    watchdog's reader is a Python thread: it cannot drain the inotify queue meanwhile, so
    enough events in watched directories are sure to overflow it (a fast reader on an idle
    machine otherwise keeps up, and the test would prove nothing)."""
    libc = ctypes.PyDLL(None)  # PyDLL, unlike CDLL, keeps the GIL during the call
    status = libc.system(command.encode())
    assert status == 0, f"{command!r} failed with wait status {status}"


def disk_state(root: Path) -> dict[str, str]:
    """What the index should hold: every indexed path's hash, read from disk afresh."""
    state = {}
    for path, _ in walk(str(root), PathFilter()):
        entry = probe(root / path)
        assert entry is not None
        state[path] = entry.hash
    return state


def index_state(monitor: WorkspaceMonitor) -> dict[str, str]:
    return {path: entry.hash for path, entry in monitor.snapshot().items()}


def run_with_reader_stalled(monitor: WorkspaceMonitor, command: str) -> CallEffects:
    """Like ``run``, but the command runs while this thread holds the GIL (see
    :func:`with_reader_stalled`)."""
    watch = monitor.begin_call(exclusive=True, timeout=30)
    try:
        with_reader_stalled(f"cd {shlex.quote(str(monitor.root))} && {command}")
    finally:
        effects = monitor.finish_call(watch)
    return effects


def test_external_edits_update_the_index_and_are_not_attributed(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    (ws / "edited").write_bytes(b"v1")
    (ws / "removed").write_bytes(b"r")
    run(monitor, "true")
    # An editor saves, a user deletes: no call is running.
    (ws / "edited").write_bytes(b"v2")
    (ws / "removed").unlink()
    (ws / "added").write_bytes(b"a")
    effects = run(monitor, "printf v3 > edited")
    assert effects.effects == (
        FileEffect("edited", EffectKind.MODIFIED, sha(b"v2"), sha(b"v3"), 2),
    )
    assert index_state(monitor) == {"edited": sha(b"v3"), "added": sha(b"a")}


def test_background_flush_keeps_the_index_fresh_between_calls(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    (ws / "f").write_bytes(b"between calls")
    # No call and no explicit flush: the monitor's own thread applies the edit.
    deadline = 200
    while "f" not in monitor.snapshot() and deadline:
        threading.Event().wait(0.02)
        deadline -= 1
    assert index_state(monitor) == {"f": sha(b"between calls")}


def test_index_matches_disk_after_a_storm(monitor: WorkspaceMonitor, ws: Path) -> None:
    rng = random.Random(4)
    files = fill(ws, 400)
    monitor.flush()

    def storm(rounds: int) -> None:
        for _ in range(rounds):
            path = rng.choice(files)
            action = rng.randrange(5)
            if action == 0 and path.exists():
                path.unlink()
            elif action == 1 and path.exists():
                path.rename(path.with_name("r" + path.name))
            elif action == 2:
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(os.urandom(rng.randrange(100)))
            elif action == 3 and path.parent.exists():
                shutil.rmtree(path.parent)
            else:
                (ws / f"new{rng.randrange(50)}").write_bytes(b"n")

    storm(300)  # between calls
    watch = monitor.begin_call()
    storm(300)  # during a call
    monitor.finish_call(watch)
    storm(300)  # between calls again
    monitor.flush()
    assert index_state(monitor) == disk_state(ws)


def test_restart_detects_changes_made_while_stopped(ws: Path, state_dir: Path) -> None:
    fill(ws, 200)
    first = WorkspaceMonitor(ws, state_dir)
    first.start()
    assert first.wait_ready(30)
    run(first, "printf kept > kept")
    first.stop()

    (ws / "d000" / "f00000.txt").write_bytes(b"changed while down")
    (ws / "d000" / "f00001.txt").unlink()
    (ws / "offline").write_bytes(b"new while down")
    # Same size and a restored mtime: only the ctime (and the content) give it away.
    victim = ws / "d001" / "f00020.txt"
    st = victim.stat()
    victim.write_bytes(victim.read_bytes().upper())
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))

    second = WorkspaceMonitor(ws, state_dir)
    second.start()
    try:
        assert second.wait_ready(30)
        assert second.progress().state == "ready"
        assert index_state(second) == disk_state(ws)
        # The offline edits are in the index, not in the next call's effects.
        assert summary(run(second, "printf x > later")) == [("created", "later")]
    finally:
        second.stop()


def test_queue_overflow_falls_back_to_a_complete_rescan(
    ws: Path, state_dir: Path, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    files = fill(source, 2000)
    (ws / "before").write_bytes(b"b")
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        # Rewriting a file of the (watched) root floods the queue for sure; the files inside
        # the new copy/ give no events until the stalled reader watches that directory.
        flood = overflowing_writes(ws / "before")
        effects = run_with_reader_stalled(monitor, f"{flood}; cp -r {source} copy && rm before")
        assert effects.from_rescan
        assert "overflow" in effects.note
        assert len(effects.effects) == len(files) + 1
        assert effects.effects[0] == FileEffect(
            "before", EffectKind.DELETED, before_hash=sha(b"b"), size=1, from_rescan=True
        )
        assert all(e.kind is EffectKind.CREATED and e.from_rescan for e in effects.effects[1:])
        assert index_state(monitor) == disk_state(ws)
        # The rescan re-synchronised the index: the next quiet call is exact again.
        effects = run(monitor, "printf z > z")
        assert summary(effects) == [("created", "z")] and not effects.from_rescan
    finally:
        monitor.stop()


def test_overflow_between_calls_is_not_attributed(
    ws: Path, state_dir: Path, tmp_path: Path
) -> None:
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        fill(ws / "external", 500)
        # Overflows the queue with no call running.
        with_reader_stalled(overflowing_writes(ws / "external" / "flooded"))
        effects = run(monitor, "printf mine > mine")
        assert monitor._overflows > 0  # the case this test is about did happen
        assert summary(effects) == [("created", "mine")]
        assert len(monitor.snapshot()) == 502
    finally:
        monitor.stop()


def test_background_flush_racing_a_call_opening_keeps_its_edits(
    monitor: WorkspaceMonitor, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An overflow, already rescanned for: every call from now on begins after it.
    monitor.on_overflow()
    monitor.flush()
    # Hold the background flush of an external edit between taking its dirty set and
    # applying it, and open a call's window meanwhile: the call is registered but its
    # begin_call has not flushed yet. The edit must still reach the index.
    in_flush, release, opened = threading.Event(), threading.Event(), threading.Event()
    real_probe_many = detector.probe_many
    real_on_cookie = monitor.on_cookie

    def probe_many(
        root: str,
        items: list[tuple[str, os.stat_result | None]],
        stamp: Stamp | None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[IndexEntry | None]:
        if any(path == "external" for path, _ in items) and not in_flush.is_set():
            in_flush.set()
            assert release.wait(30)
        return real_probe_many(root, items, stamp, on_progress)

    def on_cookie(name: str) -> None:
        real_on_cookie(name)
        if name.startswith("open-"):
            opened.set()

    monkeypatch.setattr(detector, "probe_many", probe_many)
    monkeypatch.setattr(monitor, "on_cookie", on_cookie)
    (ws / "external").write_bytes(b"e")
    assert in_flush.wait(30)
    watches: list[CallWatch] = []
    opener = threading.Thread(target=lambda: watches.append(monitor.begin_call(timeout=30)))
    opener.start()
    try:
        assert opened.wait(30)
    finally:
        release.set()  # a failure above must not leave the flush holding the index
    opener.join(30)
    (ws / "mine").write_bytes(b"m")
    effects = monitor.finish_call(watches[0])
    assert summary(effects) == [("created", "mine")] and not effects.from_rescan
    assert index_state(monitor) == disk_state(ws)


def test_watch_limit_degrades_to_stat_scans(
    ws: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "deep" / "er").mkdir(parents=True)
    (ws / "deep" / "er" / "f").write_bytes(b"1")
    real_add_watch = inotify_c.inotify_add_watch

    def add_watch(fd: int, path: bytes, mask: int) -> int:
        if b"/deep" in path:  # as if the user's watch budget ran out here
            ctypes.set_errno(errno.ENOSPC)
            return -1
        return real_add_watch(fd, path, mask)

    monkeypatch.setattr(inotify_c, "inotify_add_watch", add_watch)
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        progress = monitor.progress()
        assert progress.state == "degraded" and "watch limit" in progress.note
        # Unwatched, yet still reported: the call's effects come from a stat scan.
        effects = run(monitor, "printf 22 > deep/er/f")
        assert effects.effects == (
            FileEffect(
                "deep/er/f", EffectKind.MODIFIED, sha(b"1"), sha(b"22"), 2, from_rescan=True
            ),
        )
        assert "watch limit" in effects.note
    finally:
        monitor.stop()


def test_call_started_before_the_index_is_ready_is_exact(ws: Path, state_dir: Path) -> None:
    fill(ws, 2000)
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        # No wait_ready: begin_call waits for the index itself.
        effects = run(monitor, "printf changed > d050/f01000.txt")
        assert effects.effects == (
            FileEffect(
                "d050/f01000.txt",
                EffectKind.MODIFIED,
                sha(b"content of file 1000\n"),
                sha(b"changed"),
                7,
            ),
        )
        assert monitor.progress() == IndexProgress("ready", 2000, 2000, "")
    finally:
        monitor.stop()


def test_exclusive_calls_run_alone(monitor: WorkspaceMonitor) -> None:
    first = monitor.begin_call()
    with pytest.raises(TimeoutError):
        monitor.begin_call(exclusive=False, timeout=0.2)
    with pytest.raises(TimeoutError):
        monitor.begin_call(timeout=0.2)
    monitor.finish_call(first)
    second = monitor.begin_call(timeout=1)
    assert not monitor.finish_call(second).overlapped


def test_shared_calls_overlap_and_say_so(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "cov").write_bytes(b"0")
    monitor.flush()
    first = monitor.begin_call(exclusive=False)
    second = monitor.begin_call(exclusive=False, timeout=1)
    subprocess.run("printf 1 > cov", shell=True, cwd=ws, check=True)
    effects_a = monitor.finish_call(first)
    subprocess.run("printf 2 > late", shell=True, cwd=ws, check=True)
    effects_b = monitor.finish_call(second)
    # Nobody can tell which of the two wrote `cov`: both report it, and the overlap.
    expected = FileEffect("cov", EffectKind.MODIFIED, sha(b"0"), sha(b"1"), 1)
    assert effects_a.effects == (expected,) and effects_a.overlapped
    assert effects_b.effects == (
        expected,
        FileEffect("late", EffectKind.CREATED, after_hash=sha(b"2"), size=1),
    )
    assert effects_b.overlapped and "other calls" in effects_b.note
    assert index_state(monitor) == disk_state(ws)


def test_a_file_name_that_is_not_utf8_does_not_stop_the_detector(ws: Path, state_dir: Path) -> None:
    """A repository can hold any bytes as a file name; the index must store them, not
    fail its build (which would leave the workspace without a write detector)."""
    fill(ws, 40)
    os.makedirs(os.fsencode(ws) + b"/caf\xe9")
    with open(os.fsencode(ws) + b"/caf\xe9/n\xffme", "wb") as f:
        f.write(b"latin-1 name\n")
    first = WorkspaceMonitor(ws, state_dir)
    first.start()
    try:
        assert first.wait_ready(30)
        assert first.progress().state == "ready", first.progress().note
        odd = os.fsdecode(b"caf\xe9/n\xffme")
        entry = first.snapshot()[odd]
        assert entry.hash == sha(b"latin-1 name\n")
        # A call writing one more: a journal row, then read back by a restart.
        effects = run(first, "printf x > \"$(printf 'caf\\351/sec\\376nd')\"")
        second_name = os.fsdecode(b"caf\xe9/sec\xfend")
        assert summary(effects) == [("created", second_name)]
    finally:
        first.stop()
    again = WorkspaceMonitor(ws, state_dir)
    again.start()
    try:
        assert again.wait_ready(30)
        assert again.progress().state == "ready", again.progress().note
        held = again.snapshot()
        assert held[odd].hash == sha(b"latin-1 name\n")
        assert held[second_name].hash == sha(b"x")
    finally:
        again.stop()


@pytest.mark.parametrize("edit_after", [10, None], ids=["midway", "at-the-end"])
@pytest.mark.parametrize("restart", [False, True], ids=["cold", "warm"])
def test_edits_racing_the_start_up_walk_are_not_lost(
    ws: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    restart: bool,
    edit_after: int | None,
) -> None:
    """The start-up walk adds each directory's watch as it lists it (no second walk in
    watchdog): every edit made before the index is ready must reach it, whether its
    directory was listed before it (then only an event tells) or after it, midway
    through the walk (10 of its 21 directories listed) or once it has listed them all."""
    fill(ws, 60, per_dir=6)
    for i in range(10):
        (ws / f"d{i:03d}" / "deeper").mkdir()
        (ws / f"d{i:03d}" / "deeper" / "leaf").write_bytes(b"leaf")
    if restart:
        first = WorkspaceMonitor(ws, state_dir)
        first.start()
        assert first.wait_ready(30)
        first.stop()
    real_walk_dirs = scan.walk_dirs
    edited = []

    def listed_then_edited(
        root: str,
        pfilter: PathFilter,
        start: str = "",
        listed: set[str] | None = None,
        watch: scan.TreeWatch | None = None,
    ) -> Iterator[tuple[list[str], list[os.stat_result]]]:
        walk = real_walk_dirs(root, pfilter, start, listed, watch)
        if watch is None:  # not the start-up walk
            yield from walk
            return
        yield from itertools.islice(walk, edit_after)  # None: every directory
        if not edited:
            edited.append(True)
            for i in range(10):
                d = ws / f"d{i:03d}"
                (d / f"f{i * 6:05d}.txt").write_bytes(b"changed after the listing")
                (d / f"f{i * 6 + 1:05d}.txt").unlink()
                (d / "late").write_bytes(b"late")
                (d / "deeper" / "leaf").write_bytes(b"leaf, changed")
                (d / "new" / "sub").mkdir(parents=True)
                (d / "new" / "sub" / "g").write_bytes(b"in a new directory")
            (ws / "d000" / "deeper").rename(ws / "d009" / "moved")
        yield from walk

    monkeypatch.setattr(scan, "walk_dirs", listed_then_edited)
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        monitor.flush()
        assert edited and monitor.progress().state == "ready"
        assert index_state(monitor) == disk_state(ws)
        # Nothing of it is left for the next call either.
        assert summary(run(monitor, "printf x > later")) == [("created", "later")]
    finally:
        monitor.stop()


def test_a_restart_watches_the_git_directories_its_walk_does_not_enter(
    ws: Path, state_dir: Path
) -> None:
    """``.git`` directories (and the cookie directory) are left out of the index walk;
    their watches come from watchdog's own walk of each, at start-up."""
    (ws / "src").mkdir()
    (ws / "src" / "a").write_bytes(b"a")
    for repo in (ws, ws / "src" / "nested"):
        (repo / ".git" / "refs" / "heads").mkdir(parents=True)
        (repo / ".git" / "refs" / "heads" / "main").write_bytes(b"1\n")
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        effects = run(monitor, "printf 2 > .git/refs/heads/main")
        assert summary(effects) == [("modified", ".git/")] and not effects.from_rescan
        effects = run(monitor, "printf 2 > src/nested/.git/refs/heads/main")
        assert summary(effects) == [("modified", "src/nested/.git/")]
        assert not effects.from_rescan
    finally:
        monitor.stop()


def _git_with_objects(repo: Path) -> Path:
    """A ``.git`` whose object directories hold only files (no subdirectory); the
    directory of one of them."""
    for fanout in ("ab", "cd"):
        (repo / ".git" / "objects" / fanout).mkdir(parents=True)
        for i in range(30):
            (repo / ".git" / "objects" / fanout / f"{i:038x}").write_bytes(b"blob")
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    return repo / ".git" / "objects" / "ab"


@pytest.mark.parametrize("counting", [True, False], ids=["link-counts", "no-link-counts"])
def test_every_directory_below_git_is_watched_whether_listed_or_not(
    ws: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch, counting: bool
) -> None:
    """A directory whose link count says it has no subdirectory is watched, not listed;
    on a file system whose link counts say nothing, every directory is listed. Either
    way every directory below ``.git`` is watched, as watchdog's own walk watches them."""
    leaf = _git_with_objects(ws)
    if not counting:
        monkeypatch.setattr(observer, "counting_devices", frozenset)
    leaf_counts = counting and os.lstat(leaf).st_dev in observer.counting_devices()
    real_scandir = os.scandir
    listed: list[str] = []

    def recording_scandir(path: bytes) -> os.ScandirIterator[bytes]:
        listed.append(os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        assert (str(leaf) in listed) is not leaf_counts
        assert monitor._observer is not None and monitor._observer._group is not None
        watched = set(monitor._observer._group._active_callbacks_by_path)
        below_git = {os.fsencode(root) for root, _, _ in os.walk(ws / ".git")}
        assert below_git <= watched
        effects = run(monitor, "printf blob > .git/objects/ab/new-object")
        assert summary(effects) == [("modified", ".git/")] and not effects.from_rescan
    finally:
        monitor.stop()


def test_a_subdirectory_made_just_after_a_leaf_is_counted_is_watched(
    ws: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link count is read after the directory's watch is added: a subdirectory made
    just after the count said there was none is an event of that watch, which watchdog
    then watches (with the count read before the watch, it would be in neither)."""
    leaf = _git_with_objects(ws)
    real_lstat = os.lstat
    made: list[Path] = []

    def lstat_then_mkdir(path: str | bytes, **kwargs: int) -> os.stat_result:
        st = real_lstat(path, **kwargs)
        if not made and path == os.fsencode(leaf):
            (leaf / "late").mkdir()
            made.append(leaf / "late")
        return st

    monkeypatch.setattr(os, "lstat", lstat_then_mkdir)
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        monkeypatch.setattr(os, "lstat", real_lstat)
        assert made
        monitor.flush()  # the mkdir's event is handled (and its watch added) by now
        effects = run(monitor, "printf blob > .git/objects/ab/late/object")
        assert summary(effects) == [("modified", ".git/")] and not effects.from_rescan
    finally:
        monitor.stop()


def test_counting_devices_reads_the_mount_table(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw\n"
        "40 27 0:45 / /srv/a\\040b rw master:3 shared:9 - xfs /dev/vdb rw\n"
        "41 27 0:46 / /var/lib/docker/x rw - overlay overlay rw,lowerdir=/a\n"
        "42 27 0:47 / /home rw - btrfs /dev/vdc rw\n"
        "43 27 0:48 / /mnt rw - cifs //server/share rw\n"
        "garbage line\n"
    )
    assert observer.counting_devices(str(mountinfo)) == {
        os.makedev(254, 0),
        os.makedev(0, 27),
        os.makedev(0, 45),
    }
    assert observer.counting_devices(str(tmp_path / "missing")) == frozenset()


def test_a_file_created_right_after_its_directory_is_listed_is_not_lost(
    ws: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory's watch must be in place before the start-up walk lists it: a file
    created between the listing and a watch added after it would be in neither."""
    fill(ws, 20, per_dir=5)
    real_listdir = os.listdir
    created = []

    def listdir_then_create(path: str) -> list[str]:
        names = real_listdir(path)
        directory = Path(path)
        in_build = threading.current_thread().name == "shellward-index"
        if in_build and directory.parent == ws and directory.name != ".shellward":
            (directory / "created-after-listing").write_bytes(b"x")
            created.append(f"{directory.name}/created-after-listing")
        return names

    monkeypatch.setattr(os, "listdir", listdir_then_create)
    monitor = WorkspaceMonitor(ws, state_dir)
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        monitor.flush()
        assert len(created) == 4 and set(created) <= set(monitor.snapshot())
        assert index_state(monitor) == disk_state(ws)
    finally:
        monitor.stop()


class _RecordingSink:
    """An observer sink that records what it is told, in order, and on which thread."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.threads: set[str] = set()
        self.cookie = threading.Event()

    def on_dirty(self, path: str, is_dir: bool) -> None:
        self.seen.append(path)
        self.threads.add(threading.current_thread().name)

    def on_git_write(self, marker: str, self_event: str) -> None:
        self.seen.append(marker)

    def on_cookie(self, name: str) -> None:
        self.seen.append(f"cookie:{name}")
        self.cookie.set()

    def on_overflow(self) -> None:
        self.seen.append("overflow")

    def on_watch_limit(self) -> None:
        self.seen.append("watch limit")


def test_the_observer_hands_events_over_in_their_order_without_its_queue(ws: Path) -> None:
    """Events reach the sink from the emitter's thread, in the order they happened (a
    barrier's cookie comes after every event before it), and only the asked-for kinds: the
    observer's own queue and thread are not used."""
    from shellwardd.watch.observer import WorkspaceObserver
    from shellwardd.watch.paths import COOKIE_DIR

    (ws / COOKIE_DIR).mkdir(parents=True)
    sink = _RecordingSink()
    observer = WorkspaceObserver(ws, PathFilter(), sink)
    observer.start()
    try:
        names = [f"f{i:02d}" for i in range(30)]
        for name in names:
            (ws / name).write_bytes(b"x")
        os.mknod(ws / COOKIE_DIR / "open-1", 0o100600)
        assert sink.cookie.wait(10)
        assert observer._observer.event_queue.empty()
    finally:
        observer.stop()
    cookie_at = sink.seen.index("cookie:open-1")
    before = sink.seen[:cookie_at]
    # Each file: its create, then its close after writing (a directory's own modify
    # event, which watchdog adds, is not asked for).
    assert list(dict.fromkeys(before)) == names
    assert "" not in before
    assert len(sink.threads) == 1 and not sink.threads & {observer._observer.name}
