"""Throughput: concurrent clients running `true` through one daemon, against bare spawns of
the same sandbox profile (the daemon's own Sandbox.run, each call staged in an overlay of its
own: bench/bare.py) at the same concurrency.

Rounds alternate daemon / bare in one process, so that machine noise hits both alike; each
round prints calls per second and the latency median and p99 of one call.

    python bench/throughput.py [--clients 50] [--calls 20] [--rounds 2]

Target: the daemon's rate ≥ 70 % of the bare spawns' rate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bare import BareSandbox  # noqa: E402
from tests.helpers import start_daemon  # noqa: E402


def _round(
    clients: int, calls: int, make: Callable[[], Callable[[], None]]
) -> tuple[float, list[float]]:
    """``clients`` threads, each making ``calls`` calls with its own caller: (rate, latencies)."""
    latencies: list[float] = []
    lock = threading.Lock()
    start_line = threading.Barrier(clients + 1)

    def client() -> None:
        call = make()
        start_line.wait()
        mine = []
        for _ in range(calls):
            began = time.perf_counter()
            call()
            mine.append(time.perf_counter() - began)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    start_line.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return clients * calls / (time.perf_counter() - began), latencies


def _summary(rate: float, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{rate:7.1f} calls/s   median {statistics.median(ordered) * 1000:7.1f} ms"
        f"   p99 {p99 * 1000:7.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20, help="per client and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="shellward-bench-") as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        daemon = start_daemon(base / "s.sock", base / "state", workspace)
        bare_sandbox = BareSandbox(base, workspace)

        def through_daemon() -> Callable[[], None]:
            client = daemon.client()

            def call() -> None:
                result = client.run_command("true", cwd=workspace)
                assert result.ok, result.content

            return call

        def bare() -> Callable[[], None]:
            return bare_sandbox.run

        rates: dict[str, list[float]] = {"daemon": [], "bare": []}
        try:
            _round(4, 3, through_daemon)  # warm up
            _round(4, 3, bare)
            for number in range(args.rounds):
                for name, make in (("daemon", through_daemon), ("bare", bare)):
                    rate, latencies = _round(args.clients, args.calls, make)
                    rates[name].append(rate)
                    print(f"round {number + 1} {name:6s} {_summary(rate, latencies)}")
        finally:
            daemon.stop()
            bare_sandbox.close()

    ratio = statistics.median(rates["daemon"]) / statistics.median(rates["bare"])
    print(f"{args.clients} clients: daemon / bare rate = {ratio:.2f}   (target >= 0.70)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
