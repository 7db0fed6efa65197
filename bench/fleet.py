"""The ledger's stores compared: SQLite (one file per daemon) against PostgreSQL (one ledger
for a fleet). Starts a throw-away PostgreSQL server (as the tests do: tests/postgres.py).

1. The ledger alone: what one call writes (claim, record, started, finish, release), in
   each store.
2. Per call through the daemon: RunCommand('true') with a new step each time, one client.
3. Throughput: 3 daemons x 20 clients, each client sending new steps as fast as answered.

    python bench/fleet.py [--runs 200] [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellward.types import CallStatus, Idempotency, LedgerEntry, ReplayPolicy  # noqa: E402
from shellwardd.ledger import LedgerStore, open_ledger  # noqa: E402
from tests.helpers import Daemon, start_daemon  # noqa: E402
from tests.postgres import start_postgres  # noqa: E402


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:7.2f} ms   p95 {p95 * 1000:7.2f} ms"


def _one_call(ledger: LedgerStore) -> float:
    call_id = str(uuid.uuid4())
    entry = LedgerEntry(
        call_id, "bench", call_id, "run_command", "sha256:x", CallStatus.PLANNED,
        Idempotency.IDEMPOTENT, ReplayPolicy.AUTO, command="true", created_at=time.time(),
    )  # fmt: skip
    start = time.perf_counter()
    ledger.claim("bench", call_id, call_id, "sha256:x")
    ledger.latest_for_step("bench", call_id)
    ledger.record(entry)
    ledger.mark_started(call_id, time.time())
    ledger.finish(replace(entry, status=CallStatus.SUCCEEDED, finished_at=time.time()))
    ledger.release("bench", call_id, call_id)
    return time.perf_counter() - start


def _daemons(base: Path, ledger: str | None, count: int) -> list[Daemon]:
    daemons = []
    for i in range(count):
        workspace = base / f"ws{i}"
        workspace.mkdir(exist_ok=True)
        args = ("--ledger", ledger, "--daemon-id", f"d{i}") if ledger else ()
        daemons.append(start_daemon(base / f"d{i}.sock", base / f"state{i}", workspace, *args))
    return daemons


def _per_call(daemon: Daemon, runs: int) -> list[float]:
    samples = []
    with daemon.client() as client:
        for _ in range(10):
            client.run_command(
                "true", cwd=daemon.workspace, run_id="warm", step_id=str(uuid.uuid4())
            )
        for _ in range(runs):
            start = time.perf_counter()
            result = client.run_command(
                "true", cwd=daemon.workspace, run_id="bench", step_id=str(uuid.uuid4())
            )
            samples.append(time.perf_counter() - start)
            assert result.ok, result.content
    return samples


def _throughput(daemons: list[Daemon], clients: int, calls: int) -> float:
    barrier = threading.Barrier(len(daemons) * clients + 1)

    def client_loop(daemon: Daemon) -> None:
        with daemon.client() as client:
            barrier.wait()
            for _ in range(calls):
                result = client.run_command(
                    "true", cwd=daemon.workspace, run_id="tp", step_id=str(uuid.uuid4())
                )
                assert result.ok, result.content

    threads = [
        threading.Thread(target=client_loop, args=(d,)) for d in daemons for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return len(threads) * calls / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--calls", type=int, default=10, help="calls per throughput client")
    args = parser.parse_args()
    server = start_postgres(durable=True)  # fsync on, as SQLite's synchronous=FULL
    try:
        with tempfile.TemporaryDirectory(prefix="shellward-bench-") as tmp:
            base = Path(tmp)
            stores = {
                "sqlite": f"sqlite://{base / 'bench.sqlite3'}",
                "postgresql": server.new_database(),
            }
            print(f"ledger alone, one call's writes ({args.runs} calls):")
            for name, url in stores.items():
                ledger = open_ledger(url, "bench")
                samples = [_one_call(ledger) for _ in range(args.runs)]
                ledger.close()
                print(f"  {name:10s} {_ms(samples)}")
            print(
                f"through the daemons: per call, RunCommand('true') with a new step, one client "
                f"({args.runs} calls); throughput, 3 daemons x 20 clients x {args.calls} calls:"
            )
            for name, ledger_url in (("sqlite", None), ("postgresql", server.new_database())):
                run_dir = base / name
                run_dir.mkdir()
                daemons = _daemons(run_dir, ledger_url, 3)
                try:
                    latency = _per_call(daemons[0], args.runs)
                    rate = _throughput(daemons, 20, args.calls)
                finally:
                    for daemon in daemons:
                        daemon.stop()
                print(f"  {name:10s} per call {_ms(latency)}   throughput {rate:7.1f} calls/s")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
