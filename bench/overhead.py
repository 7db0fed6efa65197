"""What the daemon adds to a sandboxed `true`: RunCommand through the client vs a bare spawn.

Both sides run the same sandbox (the daemon's own Sandbox.run: profile, seccomp filter,
call cgroup, idmapped workspace as root, and the call's staged overlay, made and removed
around each call: bench/bare.py), interleaved in one process so that machine noise hits
both alike (each side takes each place in the round in turn). A third side is the
minimal profile a user would script by hand (ro root, rw workspace, private /tmp,
unshare-all), spawned with subprocess. ``--baseline DIR`` adds a second daemon run from
another tree's daemon/ and client/ (e.g. a ``git archive`` of the
commit before a change), interleaved too: a before/after in one run. Also prints a
breakdown: an empty gRPC round trip, the three ledger commits of a call, and the
classification, and the CPU time of the spawning process per call (the daemon's, the
benchmark's own around a bare spawn): on a busy machine a spawner's CPU just before a
spawn also slows the spawn (docs/performance.md, "Daemon overhead").

    python bench/overhead.py [--runs 300] [--warmup 20] [--baseline DIR]

Target: median ratio daemon / bare ≤ 1.3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bare import BareSandbox  # noqa: E402
from shellward.types import CallStatus, Idempotency, LedgerEntry, ReplayPolicy  # noqa: E402
from shellwardd.classifier import Classifier, load_rules  # noqa: E402
from shellwardd.ledger import SqliteLedger  # noqa: E402
from tests.helpers import start_daemon  # noqa: E402


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return statistics.median(ordered) * 1000, p95 * 1000


def _time(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far, all its threads (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs of each side")
    parser.add_argument("--baseline", type=Path, help="a tree whose daemon/ to compare with")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="shellward-bench-") as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        daemon = start_daemon(base / "s.sock", base / "state", workspace)
        baseline = None
        if args.baseline:
            path = f"{args.baseline / 'daemon'}:{args.baseline / 'client'}"
            baseline = start_daemon(
                base / "b.sock", base / "b-state", workspace, env={"PYTHONPATH": path}
            )
        minimal = [
            str(shutil.which("bwrap")), "--ro-bind", "/", "/", "--tmpfs", "/tmp",
            "--bind", str(workspace), str(workspace), "--unshare-all", "--die-with-parent",
            "--chdir", str(workspace), "--", "/bin/bash", "-c", "true",
        ]  # fmt: skip
        bare_sandbox = BareSandbox(base, workspace)
        bare = bare_sandbox.run

        ledger = SqliteLedger(base / "bench-ledger.sqlite3")
        classifier = Classifier(load_rules())

        def minimal_spawn() -> None:
            subprocess.run(minimal, check=True)

        try:
            with daemon.client() as client, (baseline or daemon).client() as old:
                for _ in range(args.warmup):  # warm up every path
                    client.run_command("true", cwd=workspace)
                    old.run_command("true", cwd=workspace)
                    bare()
                    minimal_spawn()
                daemon_s, bare_s, rpc_s, ledger_s, classify_s = [], [], [], [], []
                ledger2_s: list[float] = []
                old_s, minimal_s = [], []
                cpu_s = {"daemon": 0.0, "baseline": 0.0, "bare": 0.0}

                def daemon_call() -> None:
                    cpu = _cpu_seconds(daemon.process.pid)
                    daemon_s.append(_time(lambda: client.run_command("true", cwd=workspace)))
                    cpu_s["daemon"] += _cpu_seconds(daemon.process.pid) - cpu

                def baseline_call() -> None:
                    assert baseline is not None
                    cpu = _cpu_seconds(baseline.process.pid)
                    old_s.append(_time(lambda: old.run_command("true", cwd=workspace)))
                    cpu_s["baseline"] += _cpu_seconds(baseline.process.pid) - cpu

                def bare_call() -> None:
                    cpu = time.process_time()
                    bare_s.append(_time(bare))
                    cpu_s["bare"] += time.process_time() - cpu

                sides = [daemon_call, *([baseline_call] if baseline else []), bare_call,
                         lambda: minimal_s.append(_time(minimal_spawn))]  # fmt: skip
                for i in range(args.runs):
                    # Each side takes each place in turn, so that none always follows the
                    # same work (the breakdown's fsyncs, another daemon's call).
                    turn = i % len(sides)
                    for side in sides[turn:] + sides[:turn]:
                        side()
                    rpc_s.append(_time(client.status))
                    ledger_s.append(_time(lambda i=i: _three_commits(ledger, f"c{i}")))
                    ledger2_s.append(_time(lambda i=i: _two_commits(ledger, f"d{i}")))
                    classify_s.append(_time(lambda: classifier.classify("true")))
        finally:
            daemon.stop()
            if baseline:
                baseline.stop()
            ledger.close()
            bare_sandbox.close()

    d_med, d_p95 = _ms(daemon_s)
    b_med, b_p95 = _ms(bare_s)
    print(f"runs: {args.runs} (interleaved)")
    print(f"RunCommand('true') via client   median {d_med:7.2f} ms   p95 {d_p95:7.2f} ms")
    print(f"bare Sandbox.run (same profile) median {b_med:7.2f} ms   p95 {b_p95:7.2f} ms")
    m_med, m_p95 = _ms(minimal_s)
    print(f"minimal profile, subprocess     median {m_med:7.2f} ms   p95 {m_p95:7.2f} ms")
    print(f"ratio daemon/bare               median {d_med / b_med:7.2f}      p95 "
          f"{d_p95 / b_p95:7.2f}   (target <= 1.30)")  # fmt: skip
    print(f"ratio daemon/minimal            median {d_med / m_med:7.2f}      p95 "
          f"{d_p95 / m_p95:7.2f}")  # fmt: skip
    if old_s:
        o_med, o_p95 = _ms(old_s)
        print(f"baseline daemon ({args.baseline}) median {o_med:7.2f} ms   p95 {o_p95:7.2f} ms")
        print(f"ratio daemon/baseline           median {d_med / o_med:7.2f}")
    cpu_ms = {side: seconds / args.runs * 1000 for side, seconds in cpu_s.items()}
    print(f"CPU of the spawning process per call: daemon {cpu_ms['daemon']:.2f} ms, "
          f"bare {cpu_ms['bare']:.2f} ms (means)")  # fmt: skip
    if old_s:
        print(f"CPU of the baseline daemon per call: {cpu_ms['baseline']:.2f} ms (mean)")
    print("breakdown (medians):")
    for label, samples in (
        ("empty gRPC round trip (GetStatus)", rpc_s),
        ("ledger: record + started + finish", ledger_s),
        ("ledger: record_started + finish", ledger2_s),
        ("classify('true')", classify_s),
    ):
        print(f"  {label:36s} {_ms(samples)[0]:7.2f} ms")
    return 0


def _planned(call_id: str) -> LedgerEntry:
    return LedgerEntry(
        call_id, "bench", call_id, "run_command", "sha256:x", CallStatus.PLANNED,
        Idempotency.IDEMPOTENT, ReplayPolicy.AUTO, command="true", created_at=time.time(),
    )  # fmt: skip


def _three_commits(ledger: SqliteLedger, call_id: str) -> None:
    """A call that waited for its workspace (or an approval): planned, started, final."""
    entry = _planned(call_id)
    ledger.record(entry)
    ledger.mark_started(call_id, time.time())
    ledger.finish(replace(entry, status=CallStatus.SUCCEEDED, finished_at=time.time()))


def _two_commits(ledger: SqliteLedger, call_id: str) -> None:
    """A call with nothing to wait for: planned and started in one commit, then final."""
    entry = _planned(call_id)
    ledger.record_started(entry, time.time())
    ledger.finish(replace(entry, status=CallStatus.SUCCEEDED, finished_at=time.time()))


if __name__ == "__main__":
    sys.exit(main())
