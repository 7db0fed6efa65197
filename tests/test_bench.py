"""Every script in bench/ still runs: each with the smallest arguments, checked only for
its exit status and the figures it prints (no timing here: the figures are bench's job).
A change to the daemon's interfaces that breaks a benchmark fails here, not on the day
someone wants numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres import PostgresServer, unavailable

BENCH = Path(__file__).resolve().parent.parent / "bench"
_NUMBER = r"[\d.]+"

# script, tiny arguments, what its output must show (each a figure)
CASES = [
    ("classify.py", ["--rounds", "1"], [rf"classify  all:\s+median {_NUMBER} ms"]),
    ("detect.py", ["--sizes", "50", "--calls", "2"], [rf"empty call, whole \(ms\)\s+{_NUMBER}"]),
    (
        "detect.py",
        ["--sizes", "50", "--calls", "2", "--per-call-only"],
        [rf"empty call, whole \(ms\)\s+{_NUMBER}"],
    ),
    ("network.py", ["--runs", "2", "--megabytes", "1"], [rf"through proxy\s+{_NUMBER} ms"]),
    (
        "overhead.py",
        ["--runs", "2", "--warmup", "1"],
        [
            rf"RunCommand\('true'\) via client\s+median\s+{_NUMBER} ms",
            rf"bare Sandbox.run \(same profile\) median\s+{_NUMBER} ms",
            rf"ratio daemon/bare\s+median\s+{_NUMBER}",
            rf"ratio daemon/minimal\s+median\s+{_NUMBER}",
        ],
    ),
    ("short_rpcs.py", ["--calls", "3", "--samples", "3"], [rf"GetStatus\s+median\s+{_NUMBER} ms"]),
    (
        "staged.py",
        ["--runs", "1", "--clients", "2", "--per-client", "1", "--post-runs", "2", "--files", "5"],
        [
            rf"empty call \(true\)\s+median\s+{_NUMBER} ms",
            r"2 calls in .*, 0 not ok",
            rf"a bare durable SQLite commit: median\s+{_NUMBER} ms",
        ],
    ),
    (
        "throughput.py",
        ["--clients", "2", "--calls", "1", "--rounds", "1"],
        [
            rf"round 1 daemon\s+{_NUMBER} calls/s",
            rf"round 1 bare\s+{_NUMBER} calls/s",
            rf"daemon / bare rate = {_NUMBER}",
        ],
    ),
    ("undo_store.py", ["--files", "10", "--rounds", "1"], [r"undo of the last edit: OK"]),
]


def _run(script: str, args: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize(("script", "args", "figures"), CASES, ids=[c[0] for c in CASES])
def test_bench_script_runs(script: str, args: list[str], figures: list[str]) -> None:
    output = _run(script, args)
    for figure in figures:
        assert re.search(figure, output), f"{script} printed no {figure!r}:\n{output}"


def test_fleet_bench_runs(postgres_server: PostgresServer | None) -> None:
    """The fleet benchmark starts a PostgreSQL server of its own: only where one can start."""
    if postgres_server is None:
        unavailable("bench/fleet.py needs a PostgreSQL server")
    output = _run("fleet.py", ["--runs", "2", "--calls", "1"])
    assert re.search(rf"sqlite\s+per call median\s+{_NUMBER} ms", output), output
    assert re.search(rf"postgresql per call median\s+{_NUMBER} ms", output), output


def test_every_bench_script_is_covered() -> None:
    """A new benchmark gets a case here too."""
    covered = {case[0] for case in CASES} | {"fleet.py", "bare.py"}
    assert {path.name for path in BENCH.glob("*.py")} == covered
