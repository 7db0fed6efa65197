"""Staged execution through the daemon: each call writes into its own overlay, the daemon
commits it after the command exits (real bwrap, real overlayfs, real ledger)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, Code, CommandResult, DaemonUnavailable, EffectKind
from tests.helpers import Daemon, start_daemon, wait_for


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _staged(state_dir: Path, name: str) -> bool:
    """Whether some call has staged ``name`` (the command's own "I am running" sign)."""
    return any((state_dir / "staging").glob(f"*/upper/{name}"))


def _in_background(client: Client, command: str, cwd: Path) -> tuple[threading.Thread, list]:
    results: list[CommandResult] = []

    def run() -> None:
        # A daemon the test kills answers nothing: the call's fate is read back after.
        with contextlib.suppress(DaemonUnavailable):
            results.append(client.run_command(command, cwd=cwd, timeout=60))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, results


def _wait_go(host_dir: Path) -> str:
    # The signal comes from outside the workspace: a command sees the host read-only.
    return f"while [ ! -e {host_dir}/go ]; do sleep 0.05; done"


def test_status_names_the_mechanism(client: Client) -> None:
    controls = {c.control: c.state for c in client.status().containment}
    assert controls["workspace writes"].startswith("staged: kernel overlayfs per call")


def test_effects_are_exact_while_an_external_writer_writes(
    client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    (workspace / "shared.txt").write_text("old\n")
    thread, results = _in_background(
        client, f"echo mine > mine.txt && touch ready && {_wait_go(host_dir)}", workspace
    )
    wait_for(lambda: _staged(daemon.state_dir, "ready"))
    # Nothing the command wrote is in the workspace yet.
    assert not (workspace / "mine.txt").exists()
    for i in range(30):  # an editor, a build, another agent: not the call's writes
        (workspace / f"external-{i}.txt").write_text(str(i))
    (workspace / "shared.txt").write_text("edited outside\n")
    (host_dir / "go").touch()
    thread.join()
    (result,) = results
    assert result.ok, result.content
    assert [(e.path, e.kind) for e in result.file_effects] == [
        ("mine.txt", EffectKind.CREATED),
        ("ready", EffectKind.CREATED),
    ]
    assert (workspace / "mine.txt").read_text() == "mine\n"
    assert (workspace / "shared.txt").read_text() == "edited outside\n"


def test_two_concurrent_writers_both_commit(
    client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    # Each waits for a signal given only once both run: serialised writers never finish.
    threads = [
        _in_background(
            client, f"touch ready-{n} && {_wait_go(host_dir)} && echo {n} > out-{n}.txt",
            workspace,
        )
        for n in (1, 2)
    ]  # fmt: skip
    wait_for(lambda: _staged(daemon.state_dir, "ready-1") and _staged(daemon.state_dir, "ready-2"))
    (host_dir / "go").touch()
    for thread, _ in threads:
        thread.join()
    for n, (_, (result,)) in zip((1, 2), threads, strict=True):
        assert result.ok, result.content
        assert f"out-{n}.txt" in [e.path for e in result.file_effects]
        assert (workspace / f"out-{n}.txt").read_text() == f"{n}\n"


def test_a_conflict_applies_nothing_and_keeps_the_other_result(
    client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    (workspace / "f.txt").write_text("0\n")
    threads = [
        _in_background(
            client,
            f"echo {n} > f.txt && echo {n} > also-{n}.txt && touch ready-{n} && "
            f"{_wait_go(host_dir)}",
            workspace,
        )
        for n in (1, 2)
    ]
    wait_for(lambda: _staged(daemon.state_dir, "ready-1") and _staged(daemon.state_dir, "ready-2"))
    (host_dir / "go").touch()
    for thread, _ in threads:
        thread.join()
    results = [result for _, (result,) in threads]
    winners = [r for r in results if r.ok]
    losers = [r for r in results if not r.ok]
    assert len(winners) == 1 and len(losers) == 1, [r.content for r in results]
    (winner,), (loser,) = winners, losers
    assert loser.code is Code.CONFLICT
    assert "f.txt" in loser.content and "kept in" in loser.content
    won = next(n for n in (1, 2) if f"also-{n}.txt" in [e.path for e in winner.file_effects])
    lost = 3 - won
    assert (workspace / "f.txt").read_text() == f"{won}\n"
    assert not (workspace / f"also-{lost}.txt").exists()  # nothing of the loser applied
    # The loser's staged result is kept for a human.
    assert (daemon.state_dir / "staging" / loser.call_id / "upper" / "f.txt").read_text() == (
        f"{lost}\n"
    )


def test_timeout_discards_the_staged_writes(client: Client, workspace: Path) -> None:
    (workspace / "f.txt").write_text("old\n")
    result = client.run_command("echo new > f.txt && rm -f g && sleep 30", cwd=workspace,
                                timeout=1)  # fmt: skip
    assert result.code in (Code.SIDE_EFFECT_UNCERTAIN, Code.TIMEOUT)
    assert "discarded" in result.content
    assert (workspace / "f.txt").read_text() == "old\n"
    assert result.file_effects == ()


@pytest.fixture
def paused(tmp_path: Path, workspace: Path) -> Iterator[tuple[Daemon, Path]]:
    """A daemon that stops each commit after its journal, before applying anything."""
    barrier = tmp_path / "commit-barrier"
    handle = start_daemon(
        tmp_path / "p.sock", tmp_path / "state", workspace,
        env={"SHELLWARD_TEST_COMMIT_PAUSE": str(barrier)},
    )  # fmt: skip
    yield handle, barrier
    if handle.process.poll() is None:
        handle.stop(signal.SIGKILL)


def test_a_crash_mid_commit_is_finished_at_start_up(
    tmp_path: Path, workspace: Path, paused: tuple[Daemon, Path]
) -> None:
    daemon, barrier = paused
    (workspace / "f.txt").write_text("old\n")
    (workspace / "gone.txt").write_text("bye\n")
    command = "echo new > f.txt && rm gone.txt && mkdir -p d && echo hi > d/n.txt"
    with daemon.client() as client:
        thread, _ = _in_background(client, command, workspace)
        wait_for(lambda: Path(f"{barrier}.reached").exists())
        daemon.stop(signal.SIGKILL)
        thread.join()
    # Journal written, nothing applied yet.
    assert (workspace / "f.txt").read_text() == "old\n"
    assert (workspace / "gone.txt").exists()
    restarted = start_daemon(tmp_path / "r.sock", tmp_path / "state", workspace)
    try:
        with restarted.client() as client:
            (entry,) = [e for e in client.list_calls() if e.command == command]
            assert entry.status.value == "succeeded", entry.content
            assert (workspace / "f.txt").read_text() == "new\n"
            assert not (workspace / "gone.txt").exists()
            assert (workspace / "d" / "n.txt").read_text() == "hi\n"
            history = [t.status.value for t in client.get_call(entry.call_id).transitions]
            assert history[-3:] == ["committing", "committed", "succeeded"]
        assert not (tmp_path / "state" / "staging" / entry.call_id).exists()
    finally:
        restarted.stop()


def test_a_crash_before_commit_leaves_the_workspace_untouched(
    tmp_path: Path, client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    (workspace / "f.txt").write_text("old\n")
    thread, _ = _in_background(
        client, f"echo new > f.txt && rm -f keep.txt && touch ready && {_wait_go(host_dir)}",
        workspace,
    )  # fmt: skip
    (workspace / "keep.txt").write_text("keep\n")
    wait_for(lambda: _staged(daemon.state_dir, "ready"))
    daemon.stop(signal.SIGKILL)
    thread.join()
    assert (workspace / "f.txt").read_text() == "old\n"
    assert (workspace / "keep.txt").read_text() == "keep\n"
    assert not (workspace / "ready").exists()
    restarted = start_daemon(tmp_path / "r.sock", daemon.state_dir, workspace)
    try:
        with restarted.client() as c:
            (entry,) = [e for e in c.list_calls() if "ready" in e.command]
            assert entry.status.value == "uncertain"
            entry = c.get_call(entry.call_id)
            assert "never applied" in entry.content and entry.file_effects == ()
        assert not (daemon.state_dir / "staging" / entry.call_id).exists()
        assert (workspace / "f.txt").read_text() == "old\n"
    finally:
        restarted.stop()


# --- a hostile command --------------------------------------------------------------


def test_a_fifo_or_socket_is_never_committed(client: Client, workspace: Path) -> None:
    result = client.run_command("echo a > ok.txt && mkfifo pipe", cwd=workspace)
    assert not result.ok and result.code is Code.PERMISSION_DENIED
    assert "pipe" in result.content and "never committed" in result.content
    assert not (workspace / "ok.txt").exists() and not (workspace / "pipe").exists()


def test_a_symlink_is_committed_as_a_link_never_followed(
    client: Client, workspace: Path, host_dir: Path
) -> None:
    outside = host_dir / "target.txt"
    outside.write_text("outside\n")
    result = client.run_command(f"ln -s {outside} link && echo x > link", cwd=workspace)
    # Writing through the link hits the read-only host: the link alone is staged.
    assert not result.ok
    assert [(e.path, e.after_hash) for e in result.file_effects] == [("link", f"symlink:{outside}")]
    assert os.readlink(workspace / "link") == str(outside)
    assert outside.read_text() == "outside\n"


def test_a_parent_swapped_for_a_symlink_before_commit_is_a_conflict(
    client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    (workspace / "d").mkdir()
    escape = host_dir / "escape"
    escape.mkdir()
    thread, results = _in_background(
        client, f"echo pwned > d/new.txt && touch ready && {_wait_go(host_dir)}", workspace
    )
    wait_for(lambda: _staged(daemon.state_dir, "ready"))
    (workspace / "d").rmdir()
    (workspace / "d").symlink_to(escape)  # the commit must not write through it
    (host_dir / "go").touch()
    thread.join()
    (result,) = results
    assert result.code is Code.CONFLICT, result.content
    assert "d is now a symlink" in result.content
    assert list(escape.iterdir()) == []
    assert not (workspace / "ready").exists()


def test_writes_through_proc_self_root_stay_staged(
    client: Client, daemon: Daemon, workspace: Path, host_dir: Path
) -> None:
    thread, results = _in_background(
        client,
        f"echo x > /proc/self/root{workspace}/via-proc && touch ready && {_wait_go(host_dir)}",
        workspace,
    )
    wait_for(lambda: _staged(daemon.state_dir, "ready"))
    assert not (workspace / "via-proc").exists()
    (host_dir / "go").touch()
    thread.join()
    (result,) = results
    assert "via-proc" in [e.path for e in result.file_effects]


def test_a_hard_link_to_a_file_outside_is_refused(client: Client, workspace: Path) -> None:
    result = client.run_command("ln /etc/hostname h", cwd=workspace)
    assert not result.ok and result.file_effects == ()
    assert not (workspace / "h").exists()


def test_git_works_staged_and_its_hooks_stay_read_only(client: Client, workspace: Path) -> None:
    git = "git -c user.name=t -c user.email=t@example.com"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "a.txt").write_text("a\n")
    result = client.run_command(
        f"{git} add a.txt && {git} commit -qm one; echo hook > .git/hooks/pre-commit;"
        " echo '[core]' >> .git/config",
        cwd=workspace,
    )
    assert {(e.path, e.kind) for e in result.file_effects} == {(".git/", EffectKind.MODIFIED)}
    log = subprocess.run(["git", "-C", str(workspace), "log", "--format=%s"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert log.stdout == "one\n"
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert "[core]\n[core]" not in (workspace / ".git" / "config").read_text()


# --- preview before approval ----------------------------------------------------------


def _start_asking(tmp_path: Path, workspace: Path, *options: str) -> Daemon:
    """A daemon whose operator rule makes `touch` need a human's approval (no network)."""
    rules = tmp_path / "ask.toml"
    rules.write_text(
        '[[rule]]\nid = "ask-touch"\nprogram = "touch"\nidempotency = "non_idempotent"\n'
        'replay = "never"\napproval = true\nreason = "the operator reviews every touch"\n'
    )
    return start_daemon(tmp_path / "a.sock", tmp_path / "state", workspace,
                        "--user-rules", str(rules), *options)  # fmt: skip


@pytest.fixture
def asking(tmp_path: Path, workspace: Path) -> Iterator[Daemon]:
    handle = _start_asking(tmp_path, workspace)
    yield handle
    handle.stop()


PREVIEWED = 'touch marker && echo "stamp $(date +%s%N)" > notes.txt && echo ran'


def test_preview_then_approve_commits_that_result(asking: Daemon, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("old\n")
    with asking.client() as client:
        pending = client.run_command(PREVIEWED, cwd=workspace)
        assert pending.code is Code.NEEDS_APPROVAL
        # Nothing applied yet; the human sees the exact change.
        assert (workspace / "notes.txt").read_text() == "old\n"
        (shown,) = [e for e in client.approvals() if e.call_id == pending.call_id]
        assert "-old" in shown.content and "+stamp " in shown.content
        stamp = shown.content.split("+stamp ")[1].split()[0]
        client.approve(pending.call_id)
        result = client.wait_call(pending.call_id, timeout=30)
    assert result.ok, result.content
    # The previewed result itself, not a second run (which would stamp another time).
    assert (workspace / "notes.txt").read_text() == f"stamp {stamp}\n"
    assert result.stdout.data == b"ran\n"
    assert {e.path for e in result.file_effects} == {"marker", "notes.txt"}
    assert not (asking.state_dir / "staging" / pending.call_id).exists()


def test_preview_then_deny_discards_it(asking: Daemon, workspace: Path) -> None:
    with asking.client() as client:
        pending = client.run_command(PREVIEWED, cwd=workspace)
        assert "+stamp " in client.get_call(pending.call_id).content
        client.deny(pending.call_id)
    assert not (workspace / "marker").exists() and not (workspace / "notes.txt").exists()
    assert not (asking.state_dir / "staging" / pending.call_id).exists()


def test_a_preview_nobody_answers_is_discarded_with_its_approval(
    tmp_path: Path, workspace: Path
) -> None:
    daemon = _start_asking(tmp_path, workspace, "--approval-timeout", "1")
    try:
        with daemon.client() as client:
            pending = client.run_command(PREVIEWED, cwd=workspace)
            staged = daemon.state_dir / "staging" / pending.call_id
            assert "+stamp " in client.get_call(pending.call_id).content and staged.is_dir()
            wait_for(lambda: client.get_call(pending.call_id).code is Code.PERMISSION_DENIED)
        wait_for(lambda: not staged.exists())
        assert not (workspace / "marker").exists() and not (workspace / "notes.txt").exists()
    finally:
        daemon.stop()


def test_preview_then_approve_after_a_change_is_a_conflict(asking: Daemon, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("old\n")
    with asking.client() as client:
        pending = client.run_command(PREVIEWED, cwd=workspace)
        (workspace / "notes.txt").write_text("changed by the user\n")
        client.approve(pending.call_id)
        result = client.wait_call(pending.call_id, timeout=30)
    assert result.code is Code.CONFLICT, result.content
    assert (workspace / "notes.txt").read_text() == "changed by the user\n"
    assert not (workspace / "marker").exists()
