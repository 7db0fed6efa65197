"""Short RPCs while long calls run: median and p99 of GetStatus, Classify, ListCalls and the
health check with N `sleep` commands in flight (default 500; the daemon serves at most
--max-running-calls long RPCs at once, 512 by default, and refuses the rest with
UNAVAILABLE), and the daemon's resident memory and threads before and with them.
Target: all N run; every short RPC answers; p99 well under a second.

    .venv/bin/python bench/short_rpcs.py [--calls N] [--samples N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellward.v1 import shellward_pb2 as pb  # noqa: E402
from shellward.v1 import shellward_pb2_grpc as pb_grpc  # noqa: E402
from shellwardd.config import Config  # noqa: E402
from tests.helpers import start_daemon, wait_for  # noqa: E402

DEFAULT_MAX_RUNNING_CALLS = Config.max_running_calls


def _median_p99_ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000


def _memory(pid: int) -> str:
    """The daemon's resident memory and thread count, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return f"VmRSS {fields['VmRSS'].strip()}, {fields['Threads'].strip()} threads"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="shellward-bench-") as tmp:
        base = Path(tmp)
        (base / "ws").mkdir()
        daemon = start_daemon(base / "s.sock", base / "state", base / "ws")
        try:
            with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
                stub = pb_grpc.ShellwardStub(channel)
                health = health_pb2_grpc.HealthStub(channel)
                request = pb.RunCommandRequest(command="sleep 120", timeout_seconds=300)
                idle = _memory(daemon.process.pid)
                streams = [stub.RunCommand(request) for _ in range(args.calls)]
                running = min(args.calls, DEFAULT_MAX_RUNNING_CALLS)
                wait_for(
                    lambda: (
                        stub.GetStatus(pb.GetStatusRequest(), timeout=60).running_calls >= running
                    ),
                    timeout=600,
                )
                rpcs: dict[str, Callable[[], object]] = {
                    "GetStatus": lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=60),
                    "Classify": lambda: stub.Classify(
                        pb.ClassifyRequest(command="git status"), timeout=60
                    ),
                    "ListCalls": lambda: stub.ListCalls(pb.ListCallsRequest(limit=50), timeout=60),
                    "health": lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=60),
                }
                print(f"{running} long calls running ({args.calls} sent)")
                print(f"daemon idle: {idle}; with the calls: {_memory(daemon.process.pid)}")
                for name, rpc in rpcs.items():
                    samples = []
                    for _ in range(args.samples):
                        start = time.perf_counter()
                        rpc()
                        samples.append(time.perf_counter() - start)
                    median, p99 = _median_p99_ms(samples)
                    print(f"{name:10} median {median:7.2f} ms   p99 {p99:7.2f} ms")
                for stream in streams:
                    stream.cancel()  # the daemon cancels each call
        finally:
            daemon.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
