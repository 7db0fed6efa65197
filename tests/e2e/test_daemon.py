"""The daemon's life: start-up checks, listeners, auth, crash recovery, graceful shutdown."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from shellward import AuthenticationError, CallStatus, Client, Code, CommandResult
from tests.helpers import Daemon, host_processes, start_daemon, unique_sleep, wait_for

SLEEP_302 = unique_sleep(302)
SLEEP_303 = unique_sleep(303)


def _daemon_cmd(tmp_path: Path, workspace: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "shellwardd.main",
        "--socket", str(tmp_path / "x.sock"),
        "--state-dir", str(tmp_path / "state"),
        "--workspace", str(workspace),
        *args,
    ]  # fmt: skip


def test_socket_is_private(daemon: Daemon) -> None:
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700


def test_status(client: Client, daemon: Daemon, workspace: Path) -> None:
    status = client.status()
    assert status.socket == str(daemon.socket)
    assert status.state_dir == str(daemon.state_dir)
    assert status.workspaces == (str(workspace),)
    assert status.sandbox_enabled and "bubblewrap" in status.sandbox_detail
    assert status.version and status.rule_sources


def test_health_and_reflection(daemon: Daemon) -> None:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service="shellward.v1.Shellward"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        response = next(reflection.ServerReflectionInfo(iter([request])))
        names = {s.name for s in response.list_services_response.service}
        assert "shellward.v1.Shellward" in names and "grpc.health.v1.Health" in names


def test_logs_are_one_json_event_per_line(client: Client, daemon: Daemon) -> None:
    import json

    client.run_command("true")
    wait_for(lambda: "call finished" in (daemon.state_dir / "daemon.log").read_text())
    lines = (daemon.state_dir / "daemon.log").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert any(e["event"] == "call finished" and e.get("call_id") for e in events)


def test_tcp_needs_the_token(tmp_path: Path, workspace: Path) -> None:
    daemon = start_daemon(
        tmp_path / "t.sock", tmp_path / "state", workspace,
        "--tcp", "127.0.0.1:0", "--token", "s3cret",
    )  # fmt: skip
    try:
        port = _tcp_port(daemon)
        address = f"127.0.0.1:{port}"
        with Client(address=address, token="") as anonymous:
            with pytest.raises(AuthenticationError, match="token"):
                anonymous.status()
            result_error = None
            try:
                anonymous.run_command("touch pwned", cwd=workspace)
            except AuthenticationError as exc:
                result_error = exc
            assert result_error is not None and not (workspace / "pwned").exists()
        with Client(address=address, token="wrong") as wrong, pytest.raises(AuthenticationError):
            wrong.list_calls()
        with Client(address=address, token="s3cret") as good:
            assert good.run_command("echo ok", cwd=workspace).ok
        # The health check stays open for probes.
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        daemon.stop()


def _tcp_port(daemon: Daemon) -> int:
    # "shellwardd X listening on unix:/... and tcp:127.0.0.1:PORT"
    return int(daemon.banner.rpartition(":")[2])


def test_tcp_without_token_refuses_to_start(tmp_path: Path, workspace: Path) -> None:
    run = subprocess.run(
        _daemon_cmd(tmp_path, workspace, "--tcp", "127.0.0.1:0"),
        capture_output=True, text=True, timeout=30, env=_clean_env(),
    )  # fmt: skip
    assert run.returncode == 2 and "--tcp needs --token" in run.stderr


def test_refuses_to_start_without_bwrap(tmp_path: Path, workspace: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "prlimit").symlink_to(shutil.which("prlimit") or "/usr/bin/prlimit")
    (bin_dir / "setpriv").symlink_to(shutil.which("setpriv") or "/usr/bin/setpriv")
    (bin_dir / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    env = {**_clean_env(), "PATH": str(bin_dir)}
    run = subprocess.run(
        _daemon_cmd(tmp_path, workspace), capture_output=True, text=True, timeout=30, env=env
    )
    assert run.returncode == 3
    assert "bubblewrap (bwrap) is not installed" in run.stderr and "--no-sandbox" in run.stderr
    # The explicit opt-out starts, and says so loudly.
    daemon = start_daemon(
        tmp_path / "n.sock",
        tmp_path / "n-state",
        workspace,
        "--no-sandbox",
        env={"PATH": str(bin_dir)},
    )
    try:
        with daemon.client() as client:
            assert not client.status().sandbox_enabled
            assert client.run_command("echo bare", cwd=workspace).stdout.data == b"bare\n"
        assert "SANDBOX DISABLED" in daemon.logs()
    finally:
        daemon.stop()


def test_bad_workspace_is_a_clear_error(tmp_path: Path) -> None:
    run = subprocess.run(
        _daemon_cmd(tmp_path, tmp_path / "missing"),
        capture_output=True, text=True, timeout=30, env=_clean_env(),
    )  # fmt: skip
    assert run.returncode == 2 and "is not a directory" in run.stderr


def test_environment_twins(tmp_path: Path, workspace: Path) -> None:
    env = {
        "SHELLWARD_SOCKET": str(tmp_path / "env.sock"),
        "SHELLWARD_STATE_DIR": str(tmp_path / "env-state"),
        "SHELLWARD_WORKSPACE": str(workspace),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "shellwardd.main"],
        env={**_clean_env(), **env}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert str(tmp_path / "env.sock") in process.stdout.readline()
        with Client(tmp_path / "env.sock") as client:
            assert client.status().state_dir == str(tmp_path / "env-state")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_second_daemon_on_the_same_socket_is_refused(daemon: Daemon, tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable, "-m", "shellwardd.main", "--socket", str(daemon.socket),
            "--state-dir", str(tmp_path / "other"), "--workspace", str(daemon.workspace),
        ],
        capture_output=True, text=True, timeout=30, env=_clean_env(),
    )  # fmt: skip
    assert run.returncode != 0 and "already listening" in run.stderr
    with daemon.client() as client:
        assert client.status()


def test_sigkill_mid_command_leaves_it_uncertain(tmp_path: Path, workspace: Path) -> None:
    socket, state = tmp_path / "k.sock", tmp_path / "state"
    daemon = start_daemon(socket, state, workspace)
    results: list[object] = []

    def call() -> None:
        try:
            with Client(socket) as client:
                results.append(client.run_command(f"touch started; {SLEEP_302}", cwd=workspace))
        except Exception as exc:  # the daemon dies under this call
            results.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # The command's writes are staged in its overlay until it exits.
    wait_for(lambda: any((state / "staging").glob("*/upper/started")))
    daemon.process.kill()
    daemon.process.wait(timeout=10)
    caller.join(timeout=30)
    assert results and not isinstance(results[0], CommandResult)
    # --die-with-parent: the sandbox died with the daemon.
    wait_for(lambda: not host_processes(SLEEP_302), timeout=10)

    restarted = start_daemon(socket, state, workspace)
    try:
        with restarted.client() as client:
            (entry,) = client.list_calls()
            assert entry.command == f"touch started; {SLEEP_302}"
            assert entry.status is CallStatus.UNCERTAIN
            assert entry.code is Code.SIDE_EFFECT_UNCERTAIN
            assert "daemon restarted" in entry.note
        assert not (workspace / "started").exists()  # never committed
    finally:
        restarted.stop()


def test_graceful_shutdown_lets_calls_finish(tmp_path: Path, workspace: Path) -> None:
    daemon = start_daemon(tmp_path / "g.sock", tmp_path / "state", workspace)
    results: list[CommandResult] = []
    with daemon.client() as client:
        caller = threading.Thread(
            target=lambda: results.append(
                client.run_command("touch begun; sleep 1; echo done > done.txt", cwd=workspace)
            )
        )
        caller.start()
        wait_for(lambda: any((daemon.state_dir / "staging").glob("*/upper/begun")))
        daemon.process.send_signal(signal.SIGTERM)
        caller.join(timeout=30)
    assert daemon.process.wait(timeout=30) == 0
    assert results and results[0].ok and (workspace / "done.txt").exists()
    assert not daemon.socket.exists()


def test_shutdown_kills_calls_after_the_grace_period(tmp_path: Path, workspace: Path) -> None:
    socket, state = tmp_path / "g.sock", tmp_path / "state"
    daemon = start_daemon(socket, state, workspace, "--grace-period", "0.5")
    results: list[CommandResult] = []
    with daemon.client() as client:
        caller = threading.Thread(
            target=lambda: results.append(
                client.run_command(f"touch begun; {SLEEP_303}", cwd=workspace)
            )
        )
        caller.start()
        wait_for(lambda: any((daemon.state_dir / "staging").glob("*/upper/begun")))
        daemon.process.send_signal(signal.SIGTERM)
        caller.join(timeout=30)
    assert daemon.process.wait(timeout=30) == 0
    assert results and results[0].status is CallStatus.UNCERTAIN
    assert results[0].code is Code.SIDE_EFFECT_UNCERTAIN
    assert not host_processes(SLEEP_303)
    restarted = start_daemon(socket, state, workspace)
    try:
        with restarted.client() as client:
            assert client.get_call(results[0].call_id).status is CallStatus.UNCERTAIN
    finally:
        restarted.stop()


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}


def test_sighup_reloads_rules_and_keeps_the_last_good_ones(tmp_path: Path, workspace: Path) -> None:
    user_rules = tmp_path / "rules.toml"
    user_rules.write_text("")
    daemon = start_daemon(
        tmp_path / "h.sock", tmp_path / "state", workspace, "--user-rules", str(user_rules)
    )
    try:
        with daemon.client() as client:
            assert (
                client.classify("frobnicate --list", cwd=workspace).replay_policy.value == "never"
            )
            user_rules.write_text(
                '[[rule]]\nprogram = "frobnicate"\nidempotency = "idempotent"\nreplay = "auto"\n'
                'reason = "only lists"\nmatch = ["frobnicate --list"]\n'
            )
            daemon.process.send_signal(signal.SIGHUP)
            wait_for(
                lambda: (
                    client.classify("frobnicate --list", cwd=workspace).replay_policy.value
                    == "auto"
                )
            )
            user_rules.write_text("[[rule]]\nprogram = 7\n")
            daemon.process.send_signal(signal.SIGHUP)
            wait_for(lambda: "rule reload failed" in daemon.logs())
            assert client.classify("frobnicate --list", cwd=workspace).replay_policy.value == "auto"
            assert daemon.process.poll() is None
    finally:
        daemon.stop()


def test_refuses_to_start_on_a_broken_rule_file(tmp_path: Path, workspace: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rule]]\nprogram = "frob"\nidempotency = "idempotent"\nreplay = "auto"\n'
        'reason = "reads"\nmatch = ["frob"]\nnot_match = ["frob"]\n'
    )
    run = subprocess.run(
        _daemon_cmd(tmp_path, workspace, "--user-rules", str(rules)),
        capture_output=True, text=True, timeout=30, env=_clean_env(),
    )  # fmt: skip
    assert run.returncode == 4
    assert re.search(rf"{re.escape(str(rules))}:\d+: example `frob` should not be", run.stderr)


def test_a_broken_repo_rule_file_fails_closed_for_that_repo_only(tmp_path: Path) -> None:
    """An agent can write `.shellward/rules.toml`: it must not stop the daemon (it made the
    daemon exit 4), nor make anything in that repo replayable."""
    repo, other = tmp_path / "repo", tmp_path / "other"
    rules = repo / ".shellward" / "rules.toml"
    rules.parent.mkdir(parents=True)
    other.mkdir()
    rules.write_text("[[rule]]\nprogram = \n")
    daemon = start_daemon(tmp_path / "r.sock", tmp_path / "state", repo, "--workspace", str(other))
    try:
        with daemon.client() as client:
            verdict = client.classify("ls", cwd=repo)
            assert verdict.replay_policy.value == "never"
            assert verdict.idempotency.value == "non_idempotent"
            assert f"{rules}:2: invalid TOML" in verdict.reason
            assert client.classify("ls", cwd=other).replay_policy.value == "auto"
            listed = [s for s in client.status().rule_sources if s.startswith(str(rules))]
            assert listed and "BROKEN" in listed[0] and f"{rules}:2:" in listed[0]
            # Fixed and reloaded, the repo's rules apply again.
            rules.write_text("")
            assert client.reload_rules().ok
            assert client.classify("ls", cwd=repo).replay_policy.value == "auto"
    finally:
        daemon.stop()
