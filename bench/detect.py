"""The write detector's costs against workspace size, and against git doing the same job.

For each size it generates a workspace under /tmp (files of ~10 KB, 20 per directory),
then measures:

- cold index build (fresh process, empty state dir) vs ``git hash-object --stdin-paths``
  over the same file list: git's C implementation of "hash every file";
- warm restart re-validation (fresh process, persisted index) vs ``git status`` on the
  same tree (git init + add + commit first, untimed) — both re-stat every file;
- RSS of a process holding the index (VmRSS and peak VmHWM, from /proc/self/status);
- per-call overhead of an empty call (begin_call / run ``true`` / finish_call): the
  detector's part alone and the whole call, median over many calls;
- post-processing (finish_call, after the process exited) for a call writing 100 files
  and for ``cp -r`` of 2,000 files.

Every ratio is printed side by side, met or not. Workspaces are removed afterwards.

    python bench/detect.py [--sizes 1000,10000,100000] [--calls 200]
    python bench/detect.py --sizes 100000 --rounds 5 --baseline /tmp/old
    python bench/detect.py --sizes 1000,100000 --per-call-only

``--rounds N`` repeats the cold build and the warm restart (each followed by its git
command) N times and prints medians, with the range of the per-round ratios to git.
Beside the wall-clock times it prints CPU seconds (user + system, every thread) of each:
on a shared machine the wall clock moves with other work by 1.5-3x, the CPU time much
less, so a before/after comparison reads better in CPU seconds; the targets are in wall
time.
``--baseline DIR`` (a ``git archive`` of other code, with its ``daemon/`` and ``client/``)
runs that code's cold build and warm restart too, alternating with this tree's in every
round, so that a before/after comparison shares one run's machine load.
``--per-call-only`` skips the restarts and git: the index is built in process, then only
the per-call rows are measured (an A/B of them runs it once per tree, ``PYTHONPATH``
naming the tree).

Targets: empty-call overhead at the largest size / at the smallest ≤ 1.1;
post-processing ≤ 5 ms (100 files) and ≤ 100 ms (cp -r of 2,000 files); cold build /
git hash-object ≤ 1.0; warm restart / git status ≤ 1.0; RSS with 100k files ≤ 150 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellwardd.watch import WorkspaceMonitor  # noqa: E402

FILE_SIZE = 10 * 1024
PER_DIR = 20
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0"]


def generate(root: Path, count: int) -> list[str]:
    """``count`` distinct ~10 KB files, ``PER_DIR`` per directory; their relative paths."""
    block = os.urandom(FILE_SIZE)
    paths = []
    for i in range(count):
        rel = f"d{i // PER_DIR // 100:03d}/d{i // PER_DIR % 100:02d}/f{i:06d}.dat"
        path = root / rel
        if i % PER_DIR == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(i.to_bytes(8, "little") + block[8:])
        paths.append(rel)
    return paths


def proc_status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(ws: Path, state: Path) -> None:
    """A fresh process, like a daemon (re)start: index the workspace, report time and RSS."""
    start, cpu = time.perf_counter(), time.process_time()
    monitor = WorkspaceMonitor(ws, state)
    monitor.start()
    monitor.wait_ready()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    files = monitor.progress().files_total
    rss, hwm = proc_status_mb("VmRSS"), proc_status_mb("VmHWM")
    monitor.stop()
    print(
        json.dumps({"seconds": seconds, "cpu": cpu, "files": files, "rss_mb": rss, "hwm_mb": hwm})
    )


def run_child(ws: Path, state: Path, code: Path | None = None) -> dict[str, float]:
    """One (re)start in a fresh process, importing the code under ``code`` if given."""
    env = None
    if code is not None:
        env = {**os.environ, "PYTHONPATH": f"{code}/daemon{os.pathsep}{code}/client"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(ws), str(state)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], cwd: Path, stdin: str | None = None) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one run of ``argv``."""
    start, cpu = time.perf_counter(), children_cpu()
    subprocess.run(argv, cwd=cwd, input=stdin, text=True, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, children_cpu() - cpu


def calls(monitor: WorkspaceMonitor, count: int) -> tuple[float, float]:
    """Median (detector-only, whole-call) seconds of an empty call running `true`."""
    own, whole = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        watch = monitor.begin_call()
        t1 = time.perf_counter()
        subprocess.run(["true"], cwd=monitor.root, check=True)
        t2 = time.perf_counter()
        effects = monitor.finish_call(watch)
        t3 = time.perf_counter()
        assert not effects.effects, effects
        own.append((t1 - t0) + (t3 - t2))
        whole.append(t3 - t0)
    return statistics.median(own), statistics.median(whole)


def post_processing(monitor: WorkspaceMonitor, command: str, expect: int) -> float:
    watch = monitor.begin_call()
    subprocess.run(command, shell=True, cwd=monitor.root, check=True)
    start = time.perf_counter()
    effects = monitor.finish_call(watch)
    seconds = time.perf_counter() - start
    assert len(effects.effects) == expect and not effects.from_rescan, (command, effects.note)
    return seconds


# label → the code a restart imports (None: this tree's); "new" is this tree.
Codes = dict[str, Path | None]
# One workspace size's figures: seconds and MB, and ranges of ratios as text.
Result = dict[str, float | str]


def restarts(
    ws: Path, base: Path, codes: Codes, rounds: int, git: list[str], stdin: str | None = None
) -> dict[str, list[float]]:
    """``rounds`` times: one restart per code, in turn, then ``git``; seconds and RSS.

    Each code keeps its own state dir under ``base``; a cold build (``stdin`` given: the
    file list for ``git hash-object``) empties it first.
    """
    times: dict[str, list[float]] = {"git": [], "git_cpu": []}
    for _ in range(rounds):
        for label, code in codes.items():
            state = base / f"state-{label}"
            if stdin is not None:
                shutil.rmtree(state, ignore_errors=True)
            result = run_child(ws, state, code)
            for key in ("seconds", "cpu", "files", "rss_mb", "hwm_mb"):
                times.setdefault(f"{label}_{key}", []).append(result[key])
        seconds, cpu = timed(git, ws, stdin)
        times["git"].append(seconds)
        times["git_cpu"].append(cpu)
    return times


def spread(seconds: list[float], git: list[float]) -> str:
    """The range of the per-round ratios to git (each round's own git run)."""
    ratios = [ours / theirs for ours, theirs in zip(seconds, git, strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def _restarts(ws: Path, paths: list[str], base: Path, codes: Codes, rounds: int) -> Result:
    """Cold builds and warm restarts of each code, each followed by its git command."""
    size = len(paths)
    listing = "\n".join(paths) + "\n"
    cold = restarts(ws, base, codes, rounds, ["git", "hash-object", "--stdin-paths"], listing)

    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    subprocess.run([*GIT, "-c", "core.compression=0", "add", "-A"], cwd=ws, check=True)
    subprocess.run([*GIT, "commit", "-qm", "bench"], cwd=ws, check=True)
    status = ["git", "status", "--porcelain"]
    timed(status, ws)  # settles git's own racy entries, as a user's repository would be
    warm = restarts(ws, base, codes, rounds, status)
    r: Result = {"git_hash_object_s": statistics.median(cold["git"])}
    r["git_status_s"] = statistics.median(warm["git"])
    r["git_hash_object_cpu"] = statistics.median(cold["git_cpu"])
    r["git_status_cpu"] = statistics.median(warm["git_cpu"])
    for label in codes:
        assert set(cold[f"{label}_files"]) == {size}, (label, cold[f"{label}_files"])
        r[f"{label}_cold_build_s"] = statistics.median(cold[f"{label}_seconds"])
        r[f"{label}_cold_ratios"] = spread(cold[f"{label}_seconds"], cold["git"])
        r[f"{label}_cold_cpu"] = statistics.median(cold[f"{label}_cpu"])
        r[f"{label}_warm_restart_s"] = statistics.median(warm[f"{label}_seconds"])
        r[f"{label}_warm_ratios"] = spread(warm[f"{label}_seconds"], warm["git"])
        r[f"{label}_warm_cpu"] = statistics.median(warm[f"{label}_cpu"])
        r[f"{label}_rss_mb"] = statistics.median(warm[f"{label}_rss_mb"])
        r[f"{label}_hwm_mb"] = statistics.median(warm[f"{label}_hwm_mb"])
    return r


def measure(
    size: int, ncalls: int, base: Path, copy_source: Path, codes: Codes, rounds: int
) -> Result:
    ws = base / f"ws-{size}"
    paths = generate(ws, size)
    r: Result = {"files": size}

    if rounds:
        r.update(_restarts(ws, paths, base, codes, rounds))
    state = base / "state-new"

    monitor = WorkspaceMonitor(ws, state)
    monitor.start()
    monitor.wait_ready()
    try:
        calls(monitor, 20)  # warm-up
        r["call_own_s"], r["call_whole_s"] = calls(monitor, ncalls)
        r["write100_s"] = statistics.median(
            post_processing(
                monitor, f"mkdir w{n} && for i in $(seq 1 100); do echo $i > w{n}/f$i; done", 100
            )
            for n in range(5)
        )
        r["cp2000_s"] = statistics.median(
            post_processing(monitor, f"cp -r {copy_source} copy{n}", 2000) for n in range(3)
        )
    finally:
        monitor.stop()
        shutil.rmtree(ws)
        for label in codes:
            shutil.rmtree(base / f"state-{label}", ignore_errors=True)
    return r


def report(results: list[Result], labels: list[str]) -> None:
    small = results[0]

    def row(label: str, values: list[str], target: str = "") -> None:
        print(f"{label:<44}" + "".join(f"{v:>14}" for v in values) + f"   {target}")

    def seconds(r: Result, key: str) -> float:
        value = r[key]
        assert isinstance(value, float)
        return value

    row("files", [f"{int(r['files']):,}" for r in results])
    if "git_status_s" in small:
        _report_restarts(results, labels, row, seconds)
    row(
        "empty call, detector part (ms)",
        [f"{seconds(r, 'call_own_s') * 1e3:.2f}" for r in results],
    )
    row(
        "  ratio vs smallest workspace",
        [f"{seconds(r, 'call_own_s') / seconds(small, 'call_own_s'):.2f}" for r in results],
        "target <= 1.1",
    )
    row("empty call, whole (ms)", [f"{seconds(r, 'call_whole_s') * 1e3:.2f}" for r in results])
    row(
        "  ratio vs smallest workspace",
        [f"{seconds(r, 'call_whole_s') / seconds(small, 'call_whole_s'):.2f}" for r in results],
        "target <= 1.1",
    )
    row(
        "post-processing, 100 files written (ms)",
        [f"{seconds(r, 'write100_s') * 1e3:.1f}" for r in results],
        "target <= 5",
    )
    row(
        "post-processing, cp -r of 2,000 files (ms)",
        [f"{seconds(r, 'cp2000_s') * 1e3:.1f}" for r in results],
        "target <= 100",
    )


def _report_restarts(
    results: list[Result],
    labels: list[str],
    row: Callable[..., None],
    seconds: Callable[[Result, str], float],
) -> None:
    row("git hash-object --stdin-paths (s)", [f"{r['git_hash_object_s']:.3f}" for r in results])
    row("git status (s)", [f"{r['git_status_s']:.3f}" for r in results])
    row(
        "  CPU, hash-object / status (s)",
        [f"{r['git_hash_object_cpu']:.2f} / {r['git_status_cpu']:.2f}" for r in results],
    )
    for label in labels:
        name = "" if label == "new" else f" [{label}]"
        cold, warm = f"{label}_cold_build_s", f"{label}_warm_restart_s"
        row(f"cold index build{name} (s)", [f"{r[cold]:.3f}" for r in results])
        row(
            "  ratio cold build / git hash-object",
            [f"{seconds(r, cold) / seconds(r, 'git_hash_object_s'):.2f}" for r in results],
            "target <= 1.0",
        )
        row("  per-round ratios", [str(r[f"{label}_cold_ratios"]) for r in results])
        row("  CPU (s)", [f"{r[f'{label}_cold_cpu']:.3f}" for r in results])
        row(f"warm restart re-validation{name} (s)", [f"{r[warm]:.3f}" for r in results])
        row(
            "  ratio warm restart / git status",
            [f"{seconds(r, warm) / seconds(r, 'git_status_s'):.2f}" for r in results],
            "target <= 1.0",
        )
        row("  per-round ratios", [str(r[f"{label}_warm_ratios"]) for r in results])
        row("  CPU (s)", [f"{r[f'{label}_warm_cpu']:.3f}" for r in results])
        row(
            f"RSS holding the index{name} (MB)",
            [f"{r[f'{label}_rss_mb']:.1f}" for r in results],
            "target <= 150",
        )
        row("  peak RSS, VmHWM (MB)", [f"{r[f'{label}_hwm_mb']:.1f}" for r in results])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="workspace sizes in files")
    parser.add_argument("--calls", type=int, default=200, help="empty calls per size")
    parser.add_argument(
        "--rounds", type=int, default=1, help="cold builds and warm restarts per size (medians)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a tree of other code (daemon/, client/) to time alternately with this one",
    )
    parser.add_argument(
        "--per-call-only",
        action="store_true",
        help="only the per-call rows: no restarts, no git (the index is built in process)",
    )
    parser.add_argument("--child", nargs=2, metavar=("WS", "STATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    codes: Codes = {"new": None}
    if args.baseline is not None:
        codes = {"baseline": args.baseline.resolve(), **codes}
    base = Path(tempfile.mkdtemp(prefix="shellward-bench-detect-", dir="/tmp"))
    try:
        copy_source = base / "copy-source"
        generate(copy_source, 2000)
        results = []
        for size in sizes:
            print(f"measuring {size:,} files ...", file=sys.stderr, flush=True)
            rounds = 0 if args.per_call_only else args.rounds
            results.append(measure(size, args.calls, base, copy_source, codes, rounds))
        print(f"cpus: {os.cpu_count()}, python {sys.version.split()[0]}, {sys.platform}")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        report(results, list(codes))
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
