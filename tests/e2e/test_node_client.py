"""examples/node/client.js, a client written from the .proto alone, against a real daemon:
it runs a command, decodes a typed error's details, and pages the ledger. Skipped without
node and npm (or when npm cannot install @grpc/grpc-js)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from shellward import Client
from tests.helpers import Daemon

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("@grpc/grpc-js", "@grpc/proto-loader", "protobufjs")


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    where = tmp_path_factory.mktemp("node")
    installed = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(where), *PACKAGES],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if installed.returncode != 0:
        pytest.skip(f"npm could not install {', '.join(PACKAGES)}: {installed.stderr[-500:]}")
    return where


def test_the_node_example_runs_reads_an_error_and_pages(
    node_modules: Path, daemon: Daemon, client: Client
) -> None:
    script = node_modules / "client.js"  # beside its node_modules, so require() finds them
    shutil.copy(ROOT / "examples" / "node" / "client.js", script)
    earlier = client.run_command("echo before", run_id="py", step_id="1")
    ran = subprocess.run(
        ["node", str(script), str(ROOT / "protos"), f"unix:{daemon.socket}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    steps = {line["step"]: line for line in map(json.loads, ran.stdout.splitlines())}

    assert steps["run"]["ok"] and steps["run"]["code"] == "OK"
    assert steps["run"]["stdout"] == "hello from node\n"
    error = steps["error"]
    assert (error["status"], error["reason"], error["domain"]) == (
        "NOT_FOUND", "NOT_FOUND", "shellward",
    )  # fmt: skip
    assert error["metadata"] == {"retryable": "false", "call_id": "no-such-call"}
    assert steps["ledger"]["call_ids"] == [steps["run"]["call_id"], earlier.call_id]
