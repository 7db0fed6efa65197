"""Issue 5's evaluation, run_command part: each scenario drives a real daemon through gRPC.

Mock tools only: `npm` is a fake script on the workspace's PATH; nothing reaches a network.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from shellward import (
    CallStatus,
    Client,
    Code,
    CommandResult,
    DeadlineExceeded,
    Idempotency,
    ReplayPolicy,
    ShellwardError,
)
from tests.helpers import Daemon, start_daemon, wait_for

FAKE_NPM = """#!/bin/sh
# A stand-in for npm: `test` writes coverage, `publish` records a publication and hangs.
case "$1" in
  test) mkdir -p coverage && echo '{"lines": 91}' > coverage/coverage.json; echo "42 passed" ;;
  publish) echo published; echo published >> "$NPM_REGISTRY_LOG"; sleep 30 ;;
  *) echo "fake npm: $1 not supported" >&2; exit 1 ;;
esac
"""


def _fake_npm(workspace: Path) -> dict[str, str]:
    bin_dir = workspace / "bin"
    bin_dir.mkdir(exist_ok=True)
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "NPM_REGISTRY_LOG": str(workspace / "registry.log"),
    }


def test_eval5_ls_replays_automatically(client: Client, workspace: Path) -> None:
    first = client.run_command("ls", cwd=workspace, run_id="e5", step_id="ls")
    assert first.ok and first.replay_policy is ReplayPolicy.AUTO
    # Asked to run again, an auto call runs again: a new attempt of the same step.
    again = client.replay(first.call_id, rerun=True)
    assert again.ok and not again.replayed and again.call_id != first.call_id
    # Not asked: the recorded result, nothing runs.
    recorded = client.replay(run_id="e5", step_id="ls")
    assert recorded.replayed and recorded.call_id == again.call_id


# What the fake `npm test` does, spelled out. A fake npm reached through a PATH in the
# request's env is no longer conditional: that PATH makes any verdict never, with approval
# (the classifier cannot know which program runs). `npm test` itself is conditional/ask in
# the classifier corpus; here the same writes exercise the conditional replay path.
NPM_TEST = (
    "mkdir -p coverage && echo '{\"lines\": 91}' > coverage/coverage.json && echo '42 passed'"
)


def test_eval6_npm_test_is_conditional_and_checks_coverage(client: Client, workspace: Path) -> None:
    first = client.run_command(NPM_TEST, cwd=workspace, run_id="e6", step_id="t")
    assert first.ok
    assert first.idempotency is Idempotency.CONDITIONAL
    assert first.replay_policy is ReplayPolicy.ASK
    assert [e.path for e in first.file_effects] == ["coverage/coverage.json"]
    # Coverage as the call left it: the effects are in place, nothing runs.
    unchanged = client.replay(first.call_id, rerun=True)
    assert unchanged.code is Code.ALREADY_APPLIED and unchanged.ok
    # Someone else changes the coverage file: conflict, a human must approve.
    (workspace / "coverage" / "coverage.json").write_text('{"lines": 12}\n')
    conflict = client.replay(first.call_id, rerun=True)
    assert conflict.code is Code.CONFLICT and not conflict.ok
    assert "coverage/coverage.json" in conflict.content
    pending = client.approvals()
    assert [p.call_id for p in pending] == [conflict.call_id]
    client.approve(conflict.call_id, reason="rerun tests")
    done = client.wait_call(conflict.call_id, timeout=30)
    assert done.ok and done.stdout.data == b"42 passed\n"
    assert '"lines": 91' in (workspace / "coverage" / "coverage.json").read_text()


def test_eval7_npm_publish_timeout_is_never_replayed(client: Client, workspace: Path) -> None:
    env = _fake_npm(workspace)
    first = client.run_command(
        "npm publish", cwd=workspace, env=env, run_id="e7", step_id="pub", timeout=2
    )
    # Publishing needs a human the first time.
    assert first.code is Code.NEEDS_APPROVAL and first.status is CallStatus.PENDING_APPROVAL
    client.approve(first.call_id)
    result = client.wait_call(first.call_id, timeout=30)
    assert result.status is CallStatus.UNCERTAIN
    assert result.code is Code.SIDE_EFFECT_UNCERTAIN and not result.retryable
    replay = client.replay(first.call_id)
    assert replay.code is Code.SIDE_EFFECT_UNCERTAIN and not replay.retryable
    assert "Check its effects first" in replay.content
    retry = client.run_command(
        "npm publish", cwd=workspace, env=env, run_id="e7", step_id="pub", timeout=2
    )
    assert retry.code is Code.SIDE_EFFECT_UNCERTAIN
    # The fake registry's log is in the workspace, staged: the timeout discarded it. What a
    # real publish sent over the network is what stays uncertain (refused twice above).
    assert not (workspace / "registry.log").exists()
    assert "discarded" in result.content


def _kill_during(daemon: Daemon, command: str, step: str) -> Daemon:
    """Run ``command`` as step ``step`` of run e8, SIGKILL the daemon while it runs, and
    start it again on the same state."""

    def call() -> None:
        # The daemon dies under this call.
        with contextlib.suppress(ShellwardError), Client(daemon.socket) as client:
            client.run_command(command, cwd=daemon.workspace, run_id="e8", step_id=step)

    caller = threading.Thread(target=call)
    caller.start()
    with Client(daemon.socket) as observer:
        wait_for(lambda: observer.status().running_calls == 1)
    daemon.process.kill()
    daemon.process.wait(timeout=10)
    caller.join(timeout=30)
    return start_daemon(daemon.socket, daemon.state_dir, daemon.workspace)


def test_eval8_sigkill_then_recover(tmp_path: Path, workspace: Path) -> None:
    (workspace / "old.txt").write_text("old\n")
    (workspace / "input.txt").write_text("data\n")
    daemon = start_daemon(tmp_path / "k.sock", tmp_path / "state", workspace)
    # During a non-idempotent command: uncertain, and Recover says refuse.
    daemon = _kill_during(daemon, "rm -f old.txt; sleep 60", "write")
    try:
        with daemon.client() as client:
            (item,) = client.recover("e8")
            assert item.call.step_id == "write" and item.action == "refuse"
            assert item.call.status is CallStatus.UNCERTAIN
            assert "not run again automatically" in item.reason
            assert client.replay(item.call.call_id).code is Code.SIDE_EFFECT_UNCERTAIN
    finally:
        daemon.stop()
    # During an idempotent one: Recover says replay, and Replay runs it.
    (workspace / "hold").write_text("")
    command = "cat input.txt; while [ -f hold ]; do sleep 0.1; done"
    daemon = start_daemon(tmp_path / "k.sock", tmp_path / "state", workspace)
    daemon = _kill_during(daemon, command, "read")
    try:
        with daemon.client() as client:
            items = {item.call.step_id: item for item in client.recover("e8")}
            assert items["read"].action == "replay"
            assert items["read"].call.status is CallStatus.UNCERTAIN
            (workspace / "hold").unlink()
            replayed = client.replay(items["read"].call.call_id)
            assert replayed.ok and not replayed.replayed
            assert replayed.stdout.data == b"data\n"
            assert {item.call.step_id for item in client.recover("e8")} == {"write"}
    finally:
        daemon.stop()


def test_recover_lists_nothing_for_a_clean_run(client: Client, workspace: Path) -> None:
    client.run_command("true", cwd=workspace, run_id="clean", step_id="1")
    assert client.recover("clean") == []


def test_a_client_deadline_cancels_the_call_and_a_retry_is_not_blind(
    client: Client, workspace: Path, host_dir: Path
) -> None:
    # The second run finds the host's "fast" flag and does not sleep.
    command = f"echo start > log.txt; [ -e {host_dir}/fast ] || sleep 30; echo end >> log.txt"
    with contextlib.suppress(DeadlineExceeded):
        client.run_command(command, cwd=workspace, run_id="dl", step_id="1", rpc_timeout=5)
    wait_for(lambda: client.get_call(run_id="dl", step_id="1").status.is_final)
    cancelled = client.get_call(run_id="dl", step_id="1")
    assert cancelled.status is CallStatus.UNCERTAIN and cancelled.code is Code.SIDE_EFFECT_UNCERTAIN
    assert "went away" in cancelled.note
    # Its staged writes were discarded: the workspace is as it was, and the entry says so.
    assert "discarded" in cancelled.content and cancelled.file_effects == ()
    assert not (workspace / "log.txt").exists()
    (host_dir / "fast").touch()
    retry = client.run_command(command, cwd=workspace, run_id="dl", step_id="1")
    # The table checks the recorded effects: nothing was written, so it runs again.
    assert retry.ok and not retry.replayed, retry.content
    assert (workspace / "log.txt").read_text() == "start\nend\n"


def test_deny_and_approval_timeout(tmp_path: Path, workspace: Path) -> None:
    env = _fake_npm(workspace)
    daemon = start_daemon(
        tmp_path / "a.sock", tmp_path / "state", workspace, "--approval-timeout", "1.5"
    )
    try:
        with daemon.client() as client:
            denied = client.run_command("npm publish", cwd=workspace, env=env)
            client.deny(denied.call_id, reason="not today")
            result = client.wait_call(denied.call_id, timeout=5)
            assert result.status is CallStatus.DENIED and "not today" in result.content
            expiring = client.run_command("npm publish", cwd=workspace, env=env)
            result = client.wait_call(expiring.call_id, timeout=30)
            assert result.status is CallStatus.DENIED
            assert "No human answered" in result.content
        assert not (workspace / "registry.log").exists()
    finally:
        daemon.stop()


def test_approvals_survive_a_restart(tmp_path: Path, workspace: Path) -> None:
    env = {**_fake_npm(workspace)}
    socket, state = tmp_path / "p.sock", tmp_path / "state"
    daemon = start_daemon(socket, state, workspace)
    with daemon.client() as client:
        pending = client.run_command("npm publish", cwd=workspace, env=env, timeout=1)
    daemon.stop()
    daemon = start_daemon(socket, state, workspace)
    try:
        with daemon.client() as client:
            assert [e.call_id for e in client.approvals()] == [pending.call_id]
            client.approve(pending.call_id)
            result: CommandResult = client.wait_call(pending.call_id, timeout=30)
            assert result.status is CallStatus.UNCERTAIN  # it ran, and hung past its timeout
            assert result.stdout.data == b"published\n"
        # Its staged workspace writes were discarded with the timeout.
        assert not (workspace / "registry.log").exists()
    finally:
        daemon.stop()
