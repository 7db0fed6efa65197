"""One cgroup per call: an exact list of the call's processes, a kill that misses none.

Choices, and why:

- **Where.** Under a parent named after the daemon's state dir (``shellward-<hash>``), in
  the daemon's own cgroup v2 (root or a delegated subtree). Everything under that parent
  belongs to this daemon, so a start-up after a crash kills and removes whatever its
  predecessor left there: exact, unlike a search by process name.
- **Joining before anything runs.** The spawned child writes itself into its call's
  cgroup before it executes prlimit/bwrap (see ``runner``), so every process the call
  ever has, including a bwrap that has not yet set its parent-death signal when the
  daemon is killed, is inside.
- **Limits.** ``pids.max`` and ``memory.max`` are written where the v2 controllers are
  enabled. Hybrid hosts (cgroup v1 controllers, the v2 tree without them) get the v1
  ``pids`` and ``memory`` controllers instead (``pids.max``, ``memory.limit_in_bytes``):
  RLIMIT_NPROC does not bind root and RLIMIT_AS is per process; the cgroups bind the
  whole call. Without any cgroup the daemon falls back to rlimits and ``shellward status``
  says so.
- **Kill.** ``cgroup.kill`` (v2, 5.14+) kills the whole cgroup at once; otherwise every
  listed process is SIGKILLed until the list stays empty.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CallCgroup:
    """The directories of one call's cgroup (one per hierarchy it joins)."""

    paths: tuple[Path, ...]

    def join_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files a child writes ``0`` into to join the call."""
        return tuple(str(path / "cgroup.procs") for path in self.paths)

    def kill(self) -> None:
        for path in self.paths:
            _kill(path)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup (retried while the dead are reaped)."""
        for path in self.paths:
            _kill(path)
            _rmdir(path)


class Cgroups:
    """The daemon's parent cgroups; makes one per call."""

    def __init__(self, parents: tuple[Path, ...], limited: tuple[str, ...]) -> None:
        self.parents = parents
        self.limited = limited  # which of pids/memory are enforced

    @classmethod
    def detect(cls, state_dir: Path) -> Cgroups | None:
        """The parent cgroups this daemon may create, or None (fall back to rlimits)."""
        name = "shellward-" + hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
        unified = _own_cgroup_v2()
        if unified is None:
            return None
        parent = unified / name
        try:
            parent.mkdir(exist_ok=True)
        except OSError:
            return None
        limited: list[str] = []
        available = set(_read(unified / "cgroup.controllers").split())
        wanted: list[str] = [c for c in ("pids", "memory") if c in available]
        if wanted:
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
                limited = wanted
        parents = [parent]
        for controller in ("pids", "memory"):
            v1 = None if controller in limited else _v1(controller)
            if v1 is not None:
                with contextlib.suppress(OSError):
                    (v1 / name).mkdir(exist_ok=True)
                    parents.append(v1 / name)
                    limited.append(controller)
        return cls(tuple(parents), tuple(limited))

    def create(self, call_id: str, max_processes: int, memory_bytes: int) -> CallCgroup:
        paths = []
        for parent in self.parents:
            path = parent / f"call-{call_id}"
            path.mkdir(exist_ok=True)
            paths.append(path)
            _limit(path / "pids.max", max_processes, "max")
            _limit(path / "memory.max", memory_bytes, "max")
            _limit(path / "memory.limit_in_bytes", memory_bytes, "-1")  # v1
        return CallCgroup(tuple(paths))

    def reap(self) -> int:
        """Kill and remove every call cgroup left under the parents; how many had processes."""
        found = 0
        for parent in self.parents:
            for child in parent.iterdir():
                if child.is_dir() and child.name.startswith("call-"):
                    found += bool(_read(child / "cgroup.procs").strip())
                    CallCgroup((child,)).remove()
        return found

    def close(self) -> None:
        self.reap()
        for parent in self.parents:
            _rmdir(parent)

    @property
    def summary(self) -> str:
        kinds = ", ".join(f"{name}.max" for name in self.limited) or "no controllers"
        return f"per call under {', '.join(str(p) for p in self.parents)} ({kinds}; cgroup kill)"


def _own_cgroup_v2() -> Path | None:
    """The daemon's own cgroup in the v2 hierarchy, if one is mounted."""
    mount = None
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            mount = Path(fields[0].split()[4])
            break
    if mount is None:
        return None
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        if line.startswith("0::"):
            return mount / line[3:].lstrip("/")
    return None


def _v1(controller: str) -> Path | None:
    """The daemon's own cgroup in a v1 hierarchy of ``controller``, if one is mounted."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        number, controllers, path = line.split(":", 2)
        if number != "0" and controller in controllers.split(","):
            own = Path("/sys/fs/cgroup") / controller / path.lstrip("/")
            return own if own.is_dir() else None
    return None


def _limit(path: Path, value: int, unlimited: str) -> None:
    if path.exists():
        path.write_text(str(value) if value > 0 else unlimited)


def _kill(path: Path) -> None:
    kill_file = path / "cgroup.kill"
    if kill_file.exists():
        with contextlib.suppress(OSError):
            kill_file.write_text("1")
            return
    for _ in range(100):
        pids = [int(p) for p in _read(path / "cgroup.procs").split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _rmdir(path: Path) -> None:
    """Remove a killed cgroup; one still busy after 2 s is left to the next start-up's reap.

    Its last processes usually finish exiting within a millisecond of the kill: the wait
    between tries starts at 0.25 ms and doubles up to 10 ms (a fixed 10 ms cost every
    call whose first try came too early 10 ms, a quarter of an empty call)."""
    deadline = time.monotonic() + 2.0
    pause = 0.00025
    while True:
        try:
            path.rmdir()
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                return
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
