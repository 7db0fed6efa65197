"""Staged execution: per-call cost and throughput, against whatever tree PYTHONPATH names.

Run it once on this tree and once with PYTHONPATH pointing at a tree before staging to
compare (the daemon is started from PYTHONPATH):

    PYTHONPATH=daemon:client python bench/staged.py [--runs 20] [--clients 50]

Prints the median and p95 wall time of RunCommand for: an empty call (`true`), a call that
writes 100 files, `cp -r` of a 2,000-file tree; then the throughput of `--clients` clients
each running a small writing command (`echo $RANDOM > out-<n>.txt`) `--per-client` times
in one workspace, and the median latency of `true` while they run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import start_daemon  # noqa: E402


def _stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=4)
    args = parser.parse_args()

    # Under /var/lib, not /tmp: the state dir and the workspace on one (disk) file system.
    with tempfile.TemporaryDirectory(prefix="shellward-bench-", dir="/var/lib") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        workspace = base / "ws"
        (workspace / "tree").mkdir(parents=True)
        for i in range(2000):
            (workspace / "tree" / f"f{i}.txt").write_text(f"{i}\n" * 10)
        daemon = start_daemon(base / "s.sock", base / "state", workspace)
        try:
            with daemon.client(rpc_timeout=600) as client:
                client.run_command("true", cwd=workspace)  # index built, caches warm
                cases = {
                    "empty call (true)": "true",
                    "100 files written": "for i in $(seq 100); do echo $i > w$i.txt; done",
                    "cp -r of 2,000 files": "rm -rf copy && cp -r tree copy",
                }
                for name, command in cases.items():
                    samples = []
                    for _ in range(args.runs):
                        start = time.perf_counter()
                        result = client.run_command(command, cwd=workspace)
                        samples.append(time.perf_counter() - start)
                        assert result.ok, result.content
                    print(f"{name:24} {_stats(samples)}")

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
                    f"({', '.join(sorted(set(errors))) or '-'})"
                )
                if reads:
                    print(f"`true` meanwhile ({len(reads)} calls): {_stats(reads)}")
        finally:
            daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
