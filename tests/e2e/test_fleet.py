"""A fleet: three real daemons on one PostgreSQL ledger, each with its own state directory
and workspace (as on three hosts). What one daemon claims, records or is told, the others
must honour: the database enforces it, no Python lock spans two daemons."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import CallStatus, Client, Code, CommandResult, NotFound
from shellwardd.ledger import SCHEMA_VERSION
from shellwardd.main import EXIT_CONFIG, EXIT_STATE
from tests.helpers import Daemon, start_daemon, wait_for
from tests.mocks.business_mcp import executed

MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"
LEASE = "2"

# A stand-in for npm (publishing needs a human's approval): records where it ran.
FAKE_NPM = """#!/bin/sh
echo "published from $PWD" >> published.txt
"""


def _start(
    tmp_path: Path, name: str, pg_url: str, *args: str, workspace: Path | None = None
) -> Daemon:
    workspace = workspace or tmp_path / name / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    return start_daemon(
        tmp_path / name / "d.sock", tmp_path / name / "state", workspace,
        "--ledger", pg_url, "--daemon-id", name, "--lease-seconds", LEASE, *args,
    )  # fmt: skip


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[list[Daemon]]:
    daemons = [_start(tmp_path, name, pg_url) for name in ("a", "b", "c")]
    yield daemons
    for daemon in daemons:
        daemon.stop(signal.SIGKILL)


def _lines(daemons: list[Daemon], name: str) -> int:
    total = 0
    for daemon in daemons:
        path = daemon.workspace / name
        total += len(path.read_text().splitlines()) if path.exists() else 0
    return total


def _status(client: Client, run_id: str, step_id: str) -> CallStatus | None:
    try:
        return client.get_call(run_id=run_id, step_id=step_id).status
    except NotFound:
        return None


def test_the_same_step_sent_to_two_daemons_at_once_runs_once(tmp_path: Path, pg_url: str) -> None:
    # The same checkout path on two hosts: the same request is the same input.
    shared = tmp_path / "checkout"
    a, b = (_start(tmp_path, name, pg_url, workspace=shared) for name in ("a", "b"))
    try:
        _send_at_once(a, b)
    finally:
        a.stop(signal.SIGKILL)
        b.stop(signal.SIGKILL)


def _send_at_once(a: Daemon, b: Daemon) -> None:
    command = "echo ran >> runs.txt && sleep 2"
    start = threading.Barrier(2)
    results: list[CommandResult] = []

    def send(daemon: Daemon) -> None:
        with daemon.client() as client:
            start.wait()
            results.append(
                client.run_command(command, cwd=daemon.workspace, run_id="r1", step_id="s1")
            )

    threads = [threading.Thread(target=send, args=(d,)) for d in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len((a.workspace / "runs.txt").read_text().splitlines()) == 1
    codes = sorted(r.code.value for r in results)
    assert codes in (["IN_PROGRESS", "OK"], ["OK", "OK"]), codes  # OK twice: one replayed
    assert sum(1 for r in results if r.ok and not r.replayed) == 1


def test_a_run_resumed_on_another_daemon_is_answered_from_the_ledger(
    fleet: list[Daemon],
) -> None:
    a, b, _ = fleet
    with a.client() as client:
        first = client.run_command("echo ran >> runs.txt", cwd=a.workspace, run_id="r", step_id="s")
    assert first.ok
    with b.client() as client:
        again = client.run_command("echo ran >> runs.txt", cwd=a.workspace, run_id="r", step_id="s")
    assert again.ok and again.replayed and again.call_id == first.call_id
    assert _lines(fleet, "runs.txt") == 1


def test_an_approval_given_on_another_daemon_runs_on_the_owner(fleet: list[Daemon]) -> None:
    a, b, c = fleet
    npm = a.workspace / "bin" / "npm"
    npm.parent.mkdir()
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    env = {"PATH": f"{npm.parent}:/usr/bin:/bin"}
    with a.client() as client:
        pending = client.run_command(
            "npm publish", cwd=a.workspace, env=env, run_id="r", step_id="pub"
        )
    assert pending.code is Code.NEEDS_APPROVAL
    with b.client() as client:
        assert [e.call_id for e in client.approvals()] == [pending.call_id]
        client.approve(pending.call_id, reason="ship it")
    with c.client() as client:  # any daemon can wait for it
        done = client.wait_call(pending.call_id, timeout=30)
    assert done.status is CallStatus.SUCCEEDED, done.content
    assert (a.workspace / "published.txt").read_text() == f"published from {a.workspace}\n"
    assert not (b.workspace / "published.txt").exists()


def test_a_killed_daemons_calls_become_uncertain_once_its_lease_expires(
    fleet: list[Daemon],
) -> None:
    a, b, _ = fleet

    def run_long() -> None:
        # The daemon dies under this call: its answer never comes.
        with a.client() as client, contextlib.suppress(Exception):
            client.run_command("sleep 60", cwd=a.workspace, run_id="r", step_id="long")

    threading.Thread(target=run_long, daemon=True).start()
    with b.client() as client:
        wait_for(lambda: _status(client, "r", "long") is CallStatus.STARTED)
        a.stop(signal.SIGKILL)
        # Until the lease lapses, the step is still a's: not run a second time.
        early = client.run_command("sleep 60", cwd=a.workspace, run_id="r", step_id="long")
        assert early.code is Code.IN_PROGRESS
        wait_for(lambda: _status(client, "r", "long") is CallStatus.UNCERTAIN, timeout=30)
        entry = client.get_call(run_id="r", step_id="long")
        # Recover works from another daemon: the shared ledger knows the run.
        assert [item.call.call_id for item in client.recover("r")] == [entry.call_id]
    assert entry.code is Code.SIDE_EFFECT_UNCERTAIN and "lease" in entry.note


def test_a_business_key_dedupes_across_daemons(tmp_path: Path, pg_url: str) -> None:
    # Each daemon talks to its own instance of the service (its own log): only the ledger
    # can tell that the key was used on another host.
    daemons = []
    for name in ("a", "b"):
        log = tmp_path / f"{name}-mock.jsonl"
        config = tmp_path / f"{name}-tools.toml"
        config.write_text(
            "[[server]]\n"
            'name = "biz"\n'
            f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
            'trust = "untrusted"\n'
            "timeout_seconds = 10\n"
            f"env = {{ MOCK_LOG = {json.dumps(str(log))} }}\n"
            "[[tool]]\n"
            'server = "biz"\n'
            'name = "create_order"\n'
            'key_argument = "idempotency_key"\n'
            'key_scope = "object"\n'
            'object_argument = "customer_id"\n'
        )
        daemons.append(
            _start(tmp_path, name, pg_url, "--tools-config", str(config), "--user", "ana")
        )
    try:
        args = {"customer_id": "c1", "item": "book", "quantity": 1}
        with daemons[0].client() as client:
            first = client.call_tool("create_order", args, run_id="r1", step_id="order")
        assert first.ok, first.content
        with daemons[1].client() as client:
            second = client.call_tool("create_order", args, run_id="r2", step_id="buy")
        assert second.ok and second.replayed and second.call_id == first.call_id
        orders = [executed(tmp_path / f"{n}-mock.jsonl", "create_order") for n in ("a", "b")]
        assert [len(o) for o in orders] == [1, 0]
    finally:
        for daemon in daemons:
            daemon.stop(signal.SIGKILL)


def _start_up(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}
    return subprocess.run(
        [sys.executable, "-m", "shellwardd.main", "--socket", str(tmp_path / "d.sock"),
         "--state-dir", str(tmp_path / "state"), "--workspace", str(workspace), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def test_a_daemon_refuses_a_ledger_newer_than_itself(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    sqlite3.connect(path).execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}").connection.close()
    run = _start_up(tmp_path, "--ledger", f"sqlite://{path}")
    assert run.returncode == EXIT_STATE, run.stderr
    assert f"schema version {SCHEMA_VERSION + 1}, newer than this shellwardd" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_ledger_url_of_another_kind_is_refused(tmp_path: Path) -> None:
    run = _start_up(tmp_path, "--ledger", "mysql://db/ledger")
    assert run.returncode == EXIT_CONFIG, run.stderr
    assert "use sqlite:///absolute/path or postgresql://" in run.stderr


def test_status_names_the_shared_ledger_not_the_state_dirs_file(fleet: list[Daemon]) -> None:
    with fleet[0].client() as client:
        shown = client.status().ledger_path
    assert shown.startswith("postgresql://"), shown
    assert "ledger.sqlite3" not in shown
