"""The replay decision table and the effect check, on their own (pure, real files)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from shellward.types import (
    CallStatus,
    Code,
    EffectKind,
    FileEffect,
    Idempotency,
    LedgerEntry,
    NetworkEffect,
    ReplayPolicy,
)
from shellwardd.outcomes import conflict_content
from shellwardd.replay import Action, EffectsState, check_effects, decide, recovery_item, resolve
from shellwardd.watch import content_hash
from shellwardd.watch.hashing import DIR_HASH

NOW = 1_000_000.0
DAY = 24 * 3600.0
POLICIES = {
    ReplayPolicy.AUTO: Idempotency.IDEMPOTENT,
    ReplayPolicy.ASK: Idempotency.CONDITIONAL,
    ReplayPolicy.NEVER: Idempotency.NON_IDEMPOTENT,
}


def _entry(status: CallStatus, policy: ReplayPolicy, *, started: bool = True) -> LedgerEntry:
    return LedgerEntry(
        call_id="c1", run_id="r", step_id="s", tool_name="run_command", input_hash="h",
        status=status, idempotency=POLICIES[policy], replay_policy=policy,
        created_at=NOW - 60, started_at=NOW - 59 if started else None, workspace="/w",
    )  # fmt: skip


def _decide(entry: LedgerEntry, *, rerun: bool = False, input_hash: str = "h") -> Action:
    return decide(entry, input_hash=input_hash, rerun=rerun, now=NOW, retention=DAY).action


@pytest.mark.parametrize(
    ("status", "policy", "rerun", "action"),
    [
        (CallStatus.SUCCEEDED, ReplayPolicy.AUTO, False, Action.RETURN_RECORDED),
        (CallStatus.SUCCEEDED, ReplayPolicy.ASK, False, Action.RETURN_RECORDED),
        (CallStatus.SUCCEEDED, ReplayPolicy.NEVER, False, Action.RETURN_RECORDED),
        (CallStatus.SUCCEEDED, ReplayPolicy.AUTO, True, Action.RUN),
        (CallStatus.SUCCEEDED, ReplayPolicy.ASK, True, Action.CHECK),
        (CallStatus.SUCCEEDED, ReplayPolicy.NEVER, True, Action.REFUSE),
        (CallStatus.UNCERTAIN, ReplayPolicy.AUTO, False, Action.RUN),
        (CallStatus.UNCERTAIN, ReplayPolicy.ASK, False, Action.CHECK),
        (CallStatus.UNCERTAIN, ReplayPolicy.NEVER, False, Action.REFUSE),
        (CallStatus.FAILED, ReplayPolicy.AUTO, False, Action.RUN),
        (CallStatus.FAILED, ReplayPolicy.ASK, False, Action.CHECK),
        (CallStatus.FAILED, ReplayPolicy.NEVER, False, Action.REFUSE),
    ],
)
def test_the_table(status: CallStatus, policy: ReplayPolicy, rerun: bool, action: Action) -> None:
    assert _decide(_entry(status, policy), rerun=rerun) is action


def test_uncertain_never_says_what_to_check() -> None:
    decision = decide(
        _entry(CallStatus.UNCERTAIN, ReplayPolicy.NEVER), input_hash="h", rerun=False,
        now=NOW, retention=DAY,
    )  # fmt: skip
    assert decision.code is Code.SIDE_EFFECT_UNCERTAIN and not decision.retryable
    assert "shellward show c1" in decision.content and "nothing ran" in decision.content


def test_failed_before_start_is_the_same_answer_for_any_policy() -> None:
    for policy in ReplayPolicy:
        entry = _entry(CallStatus.FAILED, policy, started=False)
        assert _decide(entry, rerun=True) is Action.RETURN_RECORDED


def test_mismatch_in_progress_pending_and_expired() -> None:
    done = _entry(CallStatus.SUCCEEDED, ReplayPolicy.AUTO)
    assert decide(done, input_hash="other", rerun=False, now=NOW, retention=DAY).code is (
        Code.IDEMPOTENCY_KEY_MISMATCH
    )
    running = _entry(CallStatus.STARTED, ReplayPolicy.AUTO)
    assert decide(running, input_hash="h", rerun=False, now=NOW, retention=DAY).code is (
        Code.IN_PROGRESS
    )
    pending = _entry(CallStatus.PENDING_APPROVAL, ReplayPolicy.ASK)
    assert decide(pending, input_hash="h", rerun=False, now=NOW, retention=DAY).code is (
        Code.NEEDS_APPROVAL
    )
    old = replace(done, created_at=NOW - 2 * DAY)
    expired = decide(old, input_hash="h", rerun=False, now=NOW, retention=DAY)
    assert expired.action is Action.REFUSE and expired.code is Code.RECORD_EXPIRED
    assert "new step_id" in expired.content


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _with_effects(*effects: FileEffect, recorded: bool = True) -> LedgerEntry:
    return replace(
        _entry(CallStatus.UNCERTAIN, ReplayPolicy.ASK),
        file_effects=effects,
        effects_recorded=recorded,
    )


def test_check_effects_states(tmp_path: Path) -> None:
    entry = _with_effects(
        FileEffect("a.txt", EffectKind.MODIFIED, _sha(b"old"), _sha(b"new"), 3),
        FileEffect("b.txt", EffectKind.CREATED, "", _sha(b"b"), 1),
        FileEffect("c.txt", EffectKind.DELETED, _sha(b"c"), "", 0),
    )
    # As the call left them: already applied.
    (tmp_path / "a.txt").write_bytes(b"new")
    (tmp_path / "b.txt").write_bytes(b"b")
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.ALREADY_APPLIED
    # As they were before it: safe to run again.
    (tmp_path / "a.txt").write_bytes(b"old")
    (tmp_path / "b.txt").unlink()
    (tmp_path / "c.txt").write_bytes(b"c")
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.AT_BEFORE
    # Someone else changed one: conflict, naming it.
    (tmp_path / "a.txt").write_bytes(b"theirs")
    check = check_effects(entry, tmp_path, content_hash)
    assert check.state is EffectsState.CONFLICT and check.conflicts == ("a.txt",)


def test_check_renames(tmp_path: Path) -> None:
    entry = _with_effects(
        FileEffect("new.txt", EffectKind.RENAMED, _sha(b"x"), _sha(b"x"), 1, renamed_from="old.txt")
    )
    (tmp_path / "new.txt").write_bytes(b"x")
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.ALREADY_APPLIED
    (tmp_path / "new.txt").rename(tmp_path / "old.txt")
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.AT_BEFORE


def test_check_directories(tmp_path: Path) -> None:
    entry = _with_effects(
        FileEffect("made/", EffectKind.CREATED, "", DIR_HASH),
        FileEffect("gone/", EffectKind.DELETED, DIR_HASH, ""),
    )
    (tmp_path / "made").mkdir()
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.ALREADY_APPLIED
    (tmp_path / "made").rmdir()
    (tmp_path / "gone").mkdir()
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.AT_BEFORE
    (tmp_path / "gone").rmdir()
    (tmp_path / "gone").write_bytes(b"a file where a directory was")
    check = check_effects(entry, tmp_path, content_hash)
    assert check.state is EffectsState.CONFLICT and check.conflicts == ("gone/",)


def test_unobserved_effects_are_a_conflict(tmp_path: Path) -> None:
    check = check_effects(_with_effects(recorded=False), tmp_path, content_hash)
    assert check.state is EffectsState.CONFLICT and "never recorded" in check.unknown
    assert check.conflicts == ()


def test_unobserved_effects_after_a_crash_are_not_called_someone_elses(tmp_path: Path) -> None:
    """After a daemon crash nobody changed anything: the recovery and the approval say
    that the effects are unknown, not that someone else changed them."""
    entry = replace(_with_effects(recorded=False), workspace=str(tmp_path))
    item = recovery_item(entry, now=NOW, retention=DAY, hash_of=content_hash)
    assert item is not None and item.action == "ask"
    assert "someone else" not in item.reason and "never recorded" in item.reason
    decision = resolve(entry, input_hash=entry.input_hash, rerun=True, now=NOW, retention=DAY,
                       hash_of=content_hash)  # fmt: skip
    content = conflict_content("new-call", entry, decision.conflicts, decision.unknown)
    assert "someone else" not in content
    assert "cannot be checked" in content and "approve new-call" in content


def test_git_writes_cannot_be_checked(tmp_path: Path) -> None:
    entry = _with_effects(FileEffect(".git/", EffectKind.MODIFIED))
    assert check_effects(entry, tmp_path, content_hash).state is EffectsState.CONFLICT


def test_effects_outside_a_workspace_cannot_be_checked(tmp_path: Path) -> None:
    business = replace(_with_effects(), workspace="")
    check = check_effects(business, tmp_path, content_hash)
    assert check.state is EffectsState.CONFLICT and "outside the workspace" in check.unknown


def test_no_recorded_effects_runs_again(tmp_path: Path) -> None:
    assert check_effects(_with_effects(), tmp_path, content_hash).state is EffectsState.AT_BEFORE


def test_a_check_on_a_daemon_that_does_not_hold_the_workspace_says_so(tmp_path: Path) -> None:
    # Recorded by daemon "a"; its workspace path exists here too, with other files in it.
    entry = replace(
        _with_effects(FileEffect("a.txt", EffectKind.MODIFIED, _sha(b"old"), _sha(b"new"), 3)),
        status=CallStatus.UNCERTAIN, workspace=str(tmp_path), daemon_id="a",
    )  # fmt: skip
    (tmp_path / "a.txt").write_bytes(b"new")
    checked: list[Path] = []

    def hash_of(path: Path) -> str:
        checked.append(path)
        return content_hash(path)

    on_a = resolve(entry, input_hash="h", rerun=False, now=NOW, retention=DAY,
                   hash_of=hash_of, here="a")  # fmt: skip
    assert on_a.action is Action.ALREADY_APPLIED
    checked.clear()
    on_b = resolve(entry, input_hash="h", rerun=False, now=NOW, retention=DAY,
                   hash_of=hash_of, here="b")  # fmt: skip
    assert on_b.action is Action.REFUSE and on_b.code is Code.UNAVAILABLE
    assert "ran on daemon 'a'" in on_b.content and checked == []
    item = recovery_item(entry, now=NOW, retention=DAY, hash_of=hash_of, here="b")
    assert item is not None and item.action == "refuse" and "daemon 'a'" in item.reason


def test_what_a_call_sent_over_the_network_cannot_be_checked(tmp_path: Path) -> None:
    # No file effects, so the workspace alone would say "at before: run again".
    base = replace(
        _entry(CallStatus.UNCERTAIN, ReplayPolicy.ASK),
        effects_recorded=True,
        workspace=str(tmp_path),
    )
    reads = (
        NetworkEffect("pypi.test", 80, "203.0.113.7", "GET", "/simple/x/", 90, 4000),
        NetworkEffect("evil.test", 80, "", "POST", "/", refused="not on the allow-list"),
    )
    assert check_effects(replace(base, network_effects=reads), tmp_path, content_hash).state is (
        EffectsState.AT_BEFORE
    )
    for sent in (
        NetworkEffect("pay.test", 80, "203.0.113.8", "POST", "/charge", 120, 80),
        NetworkEffect("pay.test", 443, "203.0.113.8", "CONNECT", "", 700, 900),
    ):
        entry = replace(base, network_effects=(*reads, sent))
        check = check_effects(entry, tmp_path, content_hash)
        assert check.state is EffectsState.CONFLICT and "pay.test" in check.unknown
        decision = resolve(
            entry, input_hash="h", rerun=False, now=NOW, retention=DAY, hash_of=content_hash
        )
        assert decision.action is Action.ASK
