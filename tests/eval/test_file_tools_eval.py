"""Issue 5's evaluation, file tools part: each scenario drives a real daemon through gRPC."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from shellward import CallStatus, Client, Code, CommandResult, EffectKind, ReplayPolicy
from tests.helpers import start_daemon, wait_for


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_eval1_read_file_timeout_then_retry_succeeds(tmp_path: Path, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("hello\n")
    # A command's commit holds the workspace (here paused by the test hook until the barrier
    # file exists), so the read waits past its timeout.
    barrier = tmp_path / "barrier"
    daemon = start_daemon(tmp_path / "e.sock", tmp_path / "state", workspace,
                          env={"SHELLWARD_TEST_COMMIT_PAUSE": str(barrier)})  # fmt: skip
    try:
        with daemon.client() as client:
            holder: list[CommandResult] = []
            writer = threading.Thread(
                target=lambda: holder.append(client.run_command("touch busy", cwd=workspace))
            )
            writer.start()
            wait_for(lambda: Path(f"{barrier}.reached").exists())
            first = client.call_tool(
                "read_file", {"path": "notes.txt"}, cwd=workspace, run_id="e1", step_id="r",
                timeout=0.5,
            )  # fmt: skip
            assert not first.ok and first.code is Code.UNAVAILABLE and first.retryable
            barrier.touch()
            writer.join(timeout=30)
            retry = client.call_tool(
                "read_file", {"path": "notes.txt"}, cwd=workspace, run_id="e1", step_id="r"
            )
            assert retry.ok and retry.stdout.data == b"hello\n"
            assert retry.output["hash"] == _sha(b"hello\n")
    finally:
        daemon.stop()


def test_eval2_write_file_replay_applies_or_is_already_applied(
    client: Client, workspace: Path
) -> None:
    target = workspace / "config.txt"
    target.write_text("v1\n")
    read = client.call_tool("read_file", {"path": "config.txt"}, cwd=workspace)
    base = read.output["hash"]
    args = {"path": "config.txt", "content": "v2\n", "base_hash": base}
    written = client.call_tool("write_file", args, cwd=workspace, run_id="e2", step_id="w")
    assert written.ok and target.read_text() == "v2\n"
    assert written.replay_policy is ReplayPolicy.ASK
    (effect,) = written.file_effects
    assert effect.kind is EffectKind.MODIFIED
    assert (effect.before_hash, effect.after_hash) == (_sha(b"v1\n"), _sha(b"v2\n"))
    # The file is at the write's after-hash: already applied, nothing runs.
    again = client.replay(written.call_id, rerun=True)
    assert again.code is Code.ALREADY_APPLIED and again.ok
    # Back at its before-hash (e.g. the write was lost): the replay applies it again.
    target.write_text("v1\n")
    applied = client.replay(written.call_id, rerun=True)
    assert applied.ok and applied.code is Code.OK and not applied.replayed
    assert target.read_text() == "v2\n"


def test_eval3_write_file_after_the_file_changed_is_a_conflict(
    client: Client, workspace: Path
) -> None:
    target = workspace / "main.py"
    target.write_text("print(1)\n")
    base = client.call_tool("read_file", {"path": "main.py"}, cwd=workspace).output["hash"]
    target.write_text("print('edited by the user')\n")
    result = client.call_tool(
        "write_file", {"path": "main.py", "content": "print(2)\n", "base_hash": base},
        cwd=workspace, run_id="e3", step_id="w",
    )  # fmt: skip
    assert result.code is Code.CONFLICT and not result.ok
    assert "main.py" in result.content and "read it again" in result.content
    assert target.read_text() == "print('edited by the user')\n"
    # A write that was applied, then changed by someone else: its replay conflicts too.
    patched = client.call_tool(
        "apply_patch",
        {"path": "main.py", "patch": "--- a/main.py\n+++ b/main.py\n@@ -1 +1 @@\n"
         "-print('edited by the user')\n+print(3)\n"},
        cwd=workspace, run_id="e3", step_id="p",
    )  # fmt: skip
    assert patched.ok and target.read_text() == "print(3)\n"
    target.write_text("print(4)\n")
    replay = client.replay(patched.call_id, rerun=True)
    assert replay.code is Code.CONFLICT and replay.status is CallStatus.FAILED
    assert target.read_text() == "print(4)\n"
    # Without a base hash there is no patch to mismatch: the conflicting replay waits for
    # a human, and an approval writes over the other change.
    blind = client.call_tool(
        "write_file", {"path": "main.py", "content": "print(5)\n"},
        cwd=workspace, run_id="e3", step_id="blind",
    )  # fmt: skip
    target.write_text("print(6)\n")
    pending = client.replay(blind.call_id, rerun=True)
    assert pending.code is Code.CONFLICT and pending.status is CallStatus.PENDING_APPROVAL
    assert "main.py" in pending.content and target.read_text() == "print(6)\n"
    client.approve(pending.call_id)
    assert client.wait_call(pending.call_id, timeout=30).ok
    assert target.read_text() == "print(5)\n"


def test_eval4_permission_denied_is_not_replayable(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "escape").symlink_to(tmp_path)
    for args in (
        {"path": "../outside.txt", "content": "x"},
        {"path": "escape/outside.txt", "content": "x"},
        {"path": ".git/config", "content": "x"},
    ):
        result = client.call_tool(
            "write_file", args, cwd=workspace, run_id="e4", step_id=args["path"]
        )
        assert result.code is Code.PERMISSION_DENIED and not result.retryable
        assert result.status is CallStatus.FAILED
        replay = client.replay(result.call_id)
        assert replay.code is Code.PERMISSION_DENIED and not replay.ok
        assert "nothing to replay" in replay.content
    assert not (tmp_path / "outside.txt").exists()


def test_list_files_and_unknown_tools(client: Client, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    (workspace / "sub").mkdir()
    listing = client.call_tool("list_files", {"path": "."}, cwd=workspace)
    assert listing.ok
    assert {e["path"] for e in listing.output["entries"]} >= {"a.txt", "sub"}
    unknown = client.call_tool("delete_everything", {}, cwd=workspace)
    assert unknown.code is Code.NOT_FOUND and "read_file" in unknown.content
    bad = client.call_tool("read_file", {"path": 3}, cwd=workspace)
    assert bad.code is Code.INVALID_ARGUMENT
    names = {tool.name: tool for tool in client.list_tools()}
    assert set(names) >= {"read_file", "list_files", "write_file", "apply_patch"}
    assert names["write_file"].replay_policy is ReplayPolicy.ASK
    assert names["read_file"].replay_policy is ReplayPolicy.AUTO


def test_tool_calls_are_in_the_ledger(client: Client, workspace: Path) -> None:
    written = client.call_tool("write_file", {"path": "n.txt", "content": "x"}, cwd=workspace)
    entry = client.get_call(written.call_id)
    assert entry.tool_name == "write_file" and entry.status is CallStatus.SUCCEEDED
    assert entry.command == "write_file n.txt"
    assert [e.path for e in entry.file_effects] == ["n.txt"]
