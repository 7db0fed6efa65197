"""Staged execution: per-call cost and throughput, against whatever tree PYTHONPATH names.

Run it once on this tree and once with PYTHONPATH pointing at a tree before staging to
compare (the daemon is started from PYTHONPATH):

    PYTHONPATH=daemon:client python bench/staged.py [--runs 20] [--clients 50]
        [--overlay auto|kernel|fuse|both]

Prints the median and p95 wall time of RunCommand for: an empty call (`true`), a call that
writes 100 files, `cp -r` of a 2,000-file tree, `grep -r` of it (reads only); then the
throughput of `--clients` clients each running a small writing command (`echo $RANDOM >
out-<n>.txt`) `--per-client` times in one workspace, and the median latency of `true`
while they run. ``--overlay`` is the daemon's (``both``: one daemon on each, its own copy
of the workspace, the calls of each case in turns so that both see the same load; each line
ends with the overlay it measured).

First it prints the daemon's post-processing of a staged call, in process (no daemon, no
command): from the command's exit to its result, for a call that created ``--files`` small
files and one that modified as many, median and p95 over ``--post-runs`` calls, with the
time of each phase (wall, and CPU on the settling thread), the CPU the process's other
threads spent meanwhile (the observer handling the commit's events), and for reference
the cost of one bare durable SQLite commit on the same disk (``--post-only`` stops there).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellward import Client  # noqa: E402
from shellward.types import CallStatus, Idempotency, LedgerEntry, ReplayPolicy  # noqa: E402
from shellwardd.ledger import SqliteLedger  # noqa: E402
from shellwardd.staging import stager as stager_module  # noqa: E402
from shellwardd.staging.area import StagingArea  # noqa: E402
from shellwardd.staging.blobs import BlobStore  # noqa: E402
from shellwardd.staging.stager import Stager  # noqa: E402
from shellwardd.watch import WorkspaceMonitor  # noqa: E402
from tests.helpers import Daemon, start_daemon  # noqa: E402


def _stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms"


# -- post-processing of a staged call, in process ------------------------------------------

# The phases of Stager.settle (and the final ledger write after it), each timed by wrapping
# the function that does it: the daemon's hot path carries no timing code.
_PHASES = (
    ("read upper", stager_module, "staged_effects"),
    ("window open", WorkspaceMonitor, "begin_call"),
    ("conflicts", stager_module, "conflicts"),
    ("before-images", stager_module, "keep_before_images"),
    ("journal", SqliteLedger, "begin_commit"),
    ("apply", stager_module, "apply"),
    # Its own durable write before; now part of the final one, which the commit writes
    # with its window still open ("ledger finish"; "window close" no longer includes it).
    ("committed", SqliteLedger, "transition"),
    ("window close", WorkspaceMonitor, "finish_call"),
    ("discard upper", StagingArea, "discard"),
    ("ledger finish", SqliteLedger, "finish"),
)


class _Phases:
    """Wraps each phase's function to add its wall time and its CPU time on the calling
    thread (ns) to the current sample."""

    def __init__(self) -> None:
        self.current: dict[str, int] = {}
        self.cpu: dict[str, int] = {}
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> _Phases:
        for name, owner, attribute in _PHASES:
            original = getattr(owner, attribute)
            self._saved.append((owner, attribute, original))
            setattr(owner, attribute, self._timed(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attribute, original in reversed(self._saved):
            if getattr(owner, attribute) is not original:
                setattr(owner, attribute, original)

    def _timed(self, name: str, original: Any) -> Any:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter_ns() - start
                self.current[name] = self.current.get(name, 0) + elapsed
                self.cpu[name] = self.cpu.get(name, 0) + time.thread_time_ns() - cpu

        return timed


def _other_threads_cpu() -> int:
    """The CPU time (ns) of every other thread of this process so far: the observer's,
    which handles the commit's events, the blob store's syncers, the staging remover."""
    total = 0
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.ident is None:
            continue
        with contextlib.suppress(OSError):  # it ended meanwhile
            total += time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    return total


def _ms(ns: float) -> str:
    return f"{ns / 1e6:7.2f}"


def _percentiles(samples: list[int]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def post_processing(runs: int, files: int) -> None:
    """What the daemon does between a staged command's exit and its result, for a command
    that created ``files`` small files and one that modified ``files``: Stager.settle
    (read the upper, hash, conflict check, before-images, journal, apply, the write
    detector's window over the commit) and the final ledger write (with ``committed``;
    inside settle for a commit, after it otherwise). The
    upper layer is filled by hand (no overlay, no command), so nothing else is timed."""
    with tempfile.TemporaryDirectory(prefix="shellward-bench-", dir="/var/lib") as tmp:
        base = Path(tmp)
        workspace, state = base / "ws", base / "state"
        workspace.mkdir()
        for i in range(files):
            (workspace / f"m{i}.txt").write_text(f"before {i}\n")
        ledger = SqliteLedger(state / "ledger.sqlite3", "bench")
        monitor = WorkspaceMonitor(workspace, state / "index")
        monitor.start()
        monitor.wait_ready()
        stager = Stager(StagingArea(state / "staging"), BlobStore(state / "blobs"), ledger, None)
        try:
            for case in ("created", "modified"):
                totals: list[int] = []
                cpu_totals: list[int] = []
                others: list[int] = []
                phases: dict[str, list[int]] = {name: [] for name, _, _ in _PHASES}
                phases_cpu: dict[str, list[int]] = {name: [] for name, _, _ in _PHASES}
                for run in range(runs + 2):  # the first two warm caches up, not counted
                    call_id = f"{case}-{run}"
                    entry = LedgerEntry(
                        call_id, "bench", call_id, "run_command", "0" * 64, CallStatus.PLANNED,
                        Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER, command="bench",
                        cwd=str(workspace), workspace=str(workspace), created_at=time.time(),
                    )  # fmt: skip
                    ledger.record_started(entry, time.time())
                    view = monitor.begin_staged()
                    dirs = stager.area.create(call_id, workspace, None)
                    for i in range(files):
                        name = f"c{run}-{i}.txt" if case == "created" else f"m{i}.txt"
                        (dirs.upper / name).write_text(f"{case} {run} {i}\n")
                    final = replace(
                        entry, status=CallStatus.SUCCEEDED, exit_code=0, finished_at=time.time()
                    )
                    with _Phases() as timer:
                        other_start = _other_threads_cpu()
                        start, cpu = time.perf_counter_ns(), time.thread_time_ns()
                        outcome = stager.settle(final, dirs, view, monitor)
                        # An older tree's settle (for an A/B) returns the entry, and
                        # leaves its final write to the caller.
                        settled = getattr(outcome, "entry", outcome)
                        if not getattr(outcome, "recorded", False):
                            ledger.finish(settled)
                        total = time.perf_counter_ns() - start
                        cpu = time.thread_time_ns() - cpu
                        # The observer may still handle the commit's last events.
                        other = _other_threads_cpu() - other_start
                    view.close()
                    assert settled.status is CallStatus.SUCCEEDED, settled.content
                    assert len(settled.file_effects) == files, settled.file_effects
                    if run < 2:
                        continue
                    totals.append(total)
                    cpu_totals.append(cpu)
                    others.append(other)
                    for name in phases:
                        phases[name].append(timer.current.get(name, 0))
                        phases_cpu[name].append(timer.cpu.get(name, 0))
                median, p95 = _percentiles(totals)
                print(f"post-processing, {files} files {case}: median {_ms(median)} ms   "
                      f"p95 {_ms(p95)} ms   CPU median {_ms(_percentiles(cpu_totals)[0])} ms   "
                      f"({runs} runs)")  # fmt: skip
                for name, samples in phases.items():
                    median, p95 = _percentiles(samples)
                    cpu_median, cpu_p95 = _percentiles(phases_cpu[name])
                    print(f"    {name:16} median {_ms(median)} ms   p95 {_ms(p95)} ms   "
                          f"CPU {_ms(cpu_median)} / {_ms(cpu_p95)} ms")  # fmt: skip
                median, p95 = _percentiles(others)
                print(f"    {'other threads':16} CPU median {_ms(median)} ms   p95 {_ms(p95)} ms")
        finally:
            monitor.stop()
            ledger.close()


def bare_commits(runs: int) -> None:
    """For reference: what one durable ledger write costs on this disk by itself, a
    one-row SQLite transaction in WAL mode with ``synchronous=FULL`` (as the ledger's),
    in the same file system as the post-processing's state dir."""
    with tempfile.TemporaryDirectory(prefix="shellward-bench-", dir="/var/lib") as tmp:
        db = sqlite3.connect(Path(tmp) / "bare.sqlite3", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at REAL)")
        samples = []
        for _ in range(runs + 2):
            start = time.perf_counter_ns()
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t (at) VALUES (?)", (time.time(),))
            db.execute("COMMIT")
            samples.append(time.perf_counter_ns() - start)
        db.close()
    median, p95 = _percentiles(samples[2:])
    print(f"a bare durable SQLite commit: median {_ms(median)} ms   p95 {_ms(p95)} ms   "
          f"({runs} runs)")  # fmt: skip


def _per_call(clients: dict[str, Client], daemons: dict[str, Daemon], runs: int) -> None:
    """Each case's wall time per overlay, the overlays' calls in turns."""
    for overlay, client in clients.items():
        client.run_command("true", cwd=daemons[overlay].workspace)  # index built, caches warm
    cases = {
        "empty call (true)": "true",
        "100 files written": "for i in $(seq 100); do echo $i > w$i.txt; done",
        # A new name each run: fuse-overlayfs 1.10 fails to re-create, under a directory it
        # removed, a name the lower layer holds ("File exists"; docs/performance.md).
        "cp -r of 2,000 files": "cp -r tree copy-{run}",
        # Reads only: every open and read of the lower crosses fuse-overlayfs.
        "grep -r of 2,000 files": "grep -rc 1 tree > /dev/null",
    }
    for name, command in cases.items():
        samples: dict[str, list[float]] = {overlay: [] for overlay in clients}
        for run in range(runs):
            for overlay, client in clients.items():
                start = time.perf_counter()
                result = client.run_command(command.format(run=run), cwd=daemons[overlay].workspace)
                samples[overlay].append(time.perf_counter() - start)
                assert result.ok, result.content
        for overlay, taken in samples.items():
            print(f"{name:24} {_stats(taken)}   [{overlay}]")


def _throughput(client: Client, workspace: Path, args: argparse.Namespace, overlay: str) -> None:
    """``--clients`` writers at once, and the latency of ``true`` meanwhile."""
    errors: list[str] = []
    reads: list[float] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        for _ in range(args.per_client):
            result = client.run_command(f"echo $RANDOM > out-{n}.txt", cwd=workspace)
            if not result.ok:
                errors.append(result.code.value)

    def reader() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            client.run_command("true", cwd=workspace)
            reads.append(time.perf_counter() - start)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(args.clients)]
    watcher = threading.Thread(target=reader)
    start = time.perf_counter()
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    stop.set()
    watcher.join()
    calls = args.clients * args.per_client
    print(
        f"{args.clients} clients x {args.per_client} writing calls: {calls} calls in "
        f"{elapsed:.1f} s = {calls / elapsed:.1f} calls/s, {len(errors)} not ok "
        f"({', '.join(sorted(set(errors))) or '-'})   [{overlay}]"
    )
    if reads:
        print(f"`true` meanwhile ({len(reads)} calls): {_stats(reads)}   [{overlay}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=4)
    parser.add_argument("--post-runs", type=int, default=100)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--post-only", action="store_true")
    parser.add_argument(
        "--overlay", choices=("auto", "kernel", "fuse", "both"), default="auto",
        help="the daemon's --overlay (both: kernel and fuse, in turns)",
    )  # fmt: skip
    args = parser.parse_args()

    post_processing(args.post_runs, args.files)
    bare_commits(args.post_runs)
    if args.post_only:
        return 0

    overlays = ["kernel", "fuse"] if args.overlay == "both" else [args.overlay]
    # Under /var/lib, not /tmp: the state dir and the workspace on one (disk) file system.
    with tempfile.TemporaryDirectory(prefix="shellward-bench-", dir="/var/lib") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        daemons: dict[str, Daemon] = {}
        try:
            for overlay in overlays:
                workspace = base / f"ws-{overlay}"
                (workspace / "tree").mkdir(parents=True)
                for i in range(2000):
                    (workspace / "tree" / f"f{i}.txt").write_text(f"{i}\n" * 10)
                daemons[overlay] = start_daemon(
                    base / f"{overlay}.sock", base / f"state-{overlay}", workspace,
                    "--overlay", overlay,
                )  # fmt: skip
            clients = {o: d.client(rpc_timeout=600) for o, d in daemons.items()}
            _per_call(clients, daemons, args.runs)
            for overlay, client in clients.items():
                _throughput(client, daemons[overlay].workspace, args, overlay)
                client.close()
        finally:
            for daemon in daemons.values():
                daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
