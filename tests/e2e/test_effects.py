"""File effects through the daemon: real bwrap, real watchdog, recorded in the ledger."""

from __future__ import annotations

import hashlib
from pathlib import Path

from shellward import Client, EffectKind, Idempotency, ReplayPolicy
from tests.helpers import start_daemon, wait_for


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_effects_are_in_the_result_and_the_ledger(client: Client, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("old\n")
    (workspace / "gone.txt").write_text("bye\n")
    command = "echo new > keep.txt && rm gone.txt && mkdir -p d && echo hi > d/new.txt"
    result = client.run_command(command, cwd=workspace)
    assert result.ok
    effects = {e.path: e for e in result.file_effects}
    assert set(effects) == {"keep.txt", "gone.txt", "d/new.txt"}
    assert effects["keep.txt"].kind is EffectKind.MODIFIED
    assert effects["keep.txt"].before_hash == _sha(b"old\n")
    assert effects["keep.txt"].after_hash == _sha(b"new\n")
    assert effects["gone.txt"].kind is EffectKind.DELETED
    assert effects["gone.txt"].before_hash == _sha(b"bye\n")
    assert effects["d/new.txt"].kind is EffectKind.CREATED
    assert effects["d/new.txt"].after_hash == _sha(b"hi\n")
    assert "changed 3 file(s)" in result.content
    assert client.get_call(result.call_id).file_effects == result.file_effects


def test_read_only_command_has_no_effects(client: Client, workspace: Path) -> None:
    for i in range(50):
        (workspace / f"f{i}.txt").write_text(str(i))
    result = client.run_command("cat *.txt > /dev/null && ls", cwd=workspace)
    assert result.ok and result.file_effects == ()
    assert result.idempotency is Idempotency.IDEMPOTENT


def test_idempotent_command_that_wrote_is_reconciled(tmp_path: Path, workspace: Path) -> None:
    # A rule may trust a program to only read when it writes (as `npm test` writes coverage):
    # only the write detector sees it. Here the operator's rule file says so of `touch`. (The
    # request env can no longer be the way in: a PATH there makes the verdict never.)
    rules = tmp_path / "user-rules.toml"
    rules.write_text(
        '[[rule]]\nid = "trusted-touch"\nprogram = "touch"\nidempotency = "idempotent"\n'
        'replay = "auto"\nreason = "trusted by the operator to only read (wrongly)"\n'
    )
    daemon = start_daemon(tmp_path / "r.sock", tmp_path / "state", workspace,
                          "--user-rules", str(rules))  # fmt: skip
    try:
        with daemon.client() as client:
            verdict = client.classify("touch coverage.json", cwd=workspace)
            assert verdict.idempotency is Idempotency.IDEMPOTENT, verdict.reason
            result = client.run_command("touch coverage.json", cwd=workspace)
            assert result.ok
            assert [e.path for e in result.file_effects] == ["coverage.json"]
            assert result.replay_policy is ReplayPolicy.ASK
            assert result.idempotency is Idempotency.CONDITIONAL
            entry = client.get_call(result.call_id)
            assert entry.unexpected_writes and "coverage.json" in entry.note
            assert entry.verdict is not None
            assert entry.verdict.idempotency is Idempotency.IDEMPOTENT
    finally:
        daemon.stop()


def test_external_edits_are_not_attributed(client: Client, workspace: Path) -> None:
    client.run_command("true", cwd=workspace)
    (workspace / "edited-by-ide.txt").write_text("x")
    result = client.run_command("echo a > mine.txt", cwd=workspace)
    assert [e.path for e in result.file_effects] == ["mine.txt"]


def test_status_shows_the_index(client: Client, workspace: Path) -> None:
    wait_for(lambda: client.status().workspace_status[0].state == "ready")
    (status,) = client.status().workspace_status
    assert status.root == str(workspace)


def test_change_while_daemon_down_is_not_attributed(tmp_path: Path, workspace: Path) -> None:
    (workspace / "a.txt").write_text("1")
    socket, state = tmp_path / "r.sock", tmp_path / "state"
    daemon = start_daemon(socket, state, workspace)
    with daemon.client() as client:
        assert client.run_command("true", cwd=workspace).ok
    daemon.stop()
    (workspace / "a.txt").write_text("2")
    daemon = start_daemon(socket, state, workspace)
    try:
        with daemon.client() as client:
            result = client.run_command("echo b > b.txt", cwd=workspace)
        assert [e.path for e in result.file_effects] == ["b.txt"]
    finally:
        daemon.stop()


def test_an_empty_directory_is_an_effect(client: Client, workspace: Path) -> None:
    """`mktemp -d -p .` is classified as a read (mktemp prints a name) and left no effect,
    so it stayed auto-replayable while every run made a directory."""
    result = client.run_command("mktemp -d -p .", cwd=workspace)
    assert result.ok
    made = result.stdout.text.strip().removeprefix("./")
    assert [(e.kind, e.path) for e in result.file_effects] == [(EffectKind.CREATED, f"{made}/")]
    assert result.replay_policy is not ReplayPolicy.AUTO
    assert client.get_call(result.call_id).file_effects == result.file_effects
    removed = client.run_command(f"rmdir {made}", cwd=workspace)
    assert [(e.kind, e.path) for e in removed.file_effects] == [(EffectKind.DELETED, f"{made}/")]
