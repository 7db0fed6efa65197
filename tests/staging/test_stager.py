"""A staged call's commit in process (no daemon, no overlay: the upper is filled by hand):
how many durable ledger writes it costs, and that a crash between any two of its steps
still ends right at the next start-up."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from shellward.types import CallStatus, Idempotency, LedgerEntry, ReplayPolicy
from shellwardd import ledger as ledger_module
from shellwardd.errors import LedgerError
from shellwardd.ledger import SqliteLedger
from shellwardd.staging import commit as commit_module
from shellwardd.staging import stager as stager_module
from shellwardd.staging.area import StagedDirs, StagingArea
from shellwardd.staging.blobs import BlobStore
from shellwardd.staging.stager import Stager
from shellwardd.watch import WorkspaceMonitor
from shellwardd.watch import detector as detector_module
from shellwardd.watch.detector import StagedView
from shellwardd.watch.hashing import bytes_hash


class _CountingLedger(SqliteLedger):
    """Counts committed transactions (each is one durable commit: one WAL fsync)."""

    durable_writes = 0

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with super()._transaction() as db:
            yield db
        self.durable_writes += 1


class _Crash(BaseException):
    """The daemon stops here: nothing after this step runs."""


@dataclass
class _Setup:
    workspace: Path
    state: Path
    ledger: _CountingLedger
    monitor: WorkspaceMonitor

    def stager(self) -> Stager:
        area = StagingArea(self.state / "staging")
        return Stager(area, BlobStore(self.state / "blobs"), self.ledger, None)

    def stage(self, stager: Stager) -> tuple[LedgerEntry, StagedDirs, StagedView]:
        """A started call that modified ``m.txt`` and created ``d/new.txt``, staged."""
        entry = LedgerEntry(
            "call-1", "run", "step", "run_command", "0" * 64, CallStatus.PLANNED,
            Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER, command="edit",
            cwd=str(self.workspace), workspace=str(self.workspace), created_at=time.time(),
        )  # fmt: skip
        self.ledger.record_started(entry, time.time())
        view = self.monitor.begin_staged()
        dirs = stager.area.create(entry.call_id, self.workspace, None)
        (dirs.upper / "m.txt").write_text("new\n")
        (dirs.upper / "d").mkdir()
        (dirs.upper / "d" / "new.txt").write_text("made\n")
        # As a command's writes would be: some time before its commit's window opens.
        for path in (dirs.upper / "m.txt", dirs.upper / "d" / "new.txt"):
            os.utime(path, ns=(time.time_ns() - 10**9,) * 2)
        final = replace(entry, status=CallStatus.SUCCEEDED, exit_code=0, finished_at=time.time())
        return final, dirs, view

    def reopen(self) -> Stager:
        """What a restarted daemon's stager sees: the same state dir and ledger file."""
        self.ledger.close()
        self.ledger = _CountingLedger(self.state / "ledger.sqlite3", "test")
        return self.stager()

    def history(self, call_id: str) -> list[str]:
        return [t.status.value for t in self.ledger.transitions(call_id)]

    def assert_committed(self, call_id: str) -> None:
        row = self.ledger.get(call_id)
        assert row is not None and row.status is CallStatus.SUCCEEDED, row
        assert {e.path for e in row.file_effects} == {"m.txt", "d/new.txt"}
        assert (self.workspace / "m.txt").read_text() == "new\n"
        assert (self.workspace / "d" / "new.txt").read_text() == "made\n"
        assert not (self.state / "staging" / call_id).exists()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[_Setup]:
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    (workspace / "m.txt").write_text("old\n")
    monitor = WorkspaceMonitor(workspace, state / "index")
    monitor.start()
    assert monitor.wait_ready(30)
    ledger = _CountingLedger(state / "ledger.sqlite3", "test")
    made = _Setup(workspace, state, ledger, monitor)
    yield made
    monitor.stop()
    made.ledger.close()


def test_a_commit_ends_in_one_durable_write_after_it_applies(setup: _Setup) -> None:
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    before = setup.ledger.durable_writes
    settled = stager.settle(final, dirs, view, setup.monitor)
    view.close()
    # The journal, then `committed` and the final state together (was three commits:
    # the journal, `committed`, then the final state).
    assert settled.recorded and settled.committed is None
    assert setup.ledger.durable_writes - before == 2
    assert setup.history(final.call_id) == [
        "planned", "started", "committing", "committed", "succeeded",
    ]  # fmt: skip
    setup.assert_committed(final.call_id)
    # The write detector's window covered the commit: the index has the new contents.
    index = setup.monitor.snapshot()
    assert index["m.txt"].hash == bytes_hash(b"new\n")
    assert "d/new.txt" in index


def _crash_after(owner: Any, attribute: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original: Callable[..., Any] = getattr(owner, attribute)

    def then_crash(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise _Crash

    monkeypatch.setattr(owner, attribute, then_crash)


@pytest.mark.parametrize(
    ("owner", "attribute", "history"),
    [
        # Applied, the upper still there: start-up applies what is left (nothing).
        (stager_module, "apply", ["committing", "committed", "succeeded"]),
        # The upper moved away, the final state not written: nothing left to apply.
        (StagingArea, "discard", ["committing", "succeeded"]),
    ],
    ids=["after-apply", "after-the-upper-moved-away"],
)
def test_a_crash_after_the_apply_ends_right_at_start_up(
    setup: _Setup, monkeypatch: pytest.MonkeyPatch, owner: Any, attribute: str, history: list[str]
) -> None:
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    _crash_after(owner, attribute, monkeypatch)
    with pytest.raises(_Crash):
        stager.settle(final, dirs, view, setup.monitor)
    view.close()
    monkeypatch.undo()
    row = setup.ledger.get(final.call_id)
    assert row is not None and row.status is CallStatus.COMMITTING
    restarted = setup.reopen()
    assert restarted.finish_commits() == [final.call_id]
    setup.assert_committed(final.call_id)
    assert setup.history(final.call_id)[-len(history) :] == history
    assert restarted.finish_commits() == []  # finished once


def test_a_final_write_that_fails_is_left_to_the_caller_with_the_commit(
    setup: _Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)

    def busy(*args: Any, **kwargs: Any) -> None:
        raise LedgerError("the ledger is busy")

    monkeypatch.setattr(setup.ledger, "finish", busy)
    settled = stager.settle(final, dirs, view, setup.monitor)
    view.close()
    monkeypatch.undo()
    assert not settled.recorded and settled.committed is not None
    row = setup.ledger.get(final.call_id)
    assert row is not None and row.status is CallStatus.COMMITTING  # start-up would finish it
    setup.ledger.finish(settled.entry, committed=settled.committed)  # what the caller does
    setup.assert_committed(final.call_id)
    assert setup.history(final.call_id)[-3:] == ["committing", "committed", "succeeded"]
    # The commit's end is written once: a second attempt finds the row no longer committing.
    with pytest.raises(LedgerError, match="not committing"):
        setup.ledger.finish(settled.entry, committed=settled.committed)


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the write detector reads (hashes) from now on."""
    seen: list[str] = []
    original = detector_module.probe_many

    def spy(root: str, items: list[tuple[str, Any]], *args: Any) -> Any:
        seen.extend(path for path, _ in items)
        return original(root, items, *args)

    monkeypatch.setattr(detector_module, "probe_many", spy)
    return seen


def test_the_commits_files_are_taken_without_being_read_again(
    setup: _Setup, probed: list[str]
) -> None:
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    stager.settle(final, dirs, view, setup.monitor)
    view.close()
    index = setup.monitor.snapshot()
    assert index["m.txt"].hash == bytes_hash(b"new\n")
    assert index["d/new.txt"].hash == bytes_hash(b"made\n")
    assert not {"m.txt", "d/new.txt"} & set(probed)


def test_a_write_racing_the_commit_is_read_not_taken_for_the_staged_content(
    setup: _Setup, probed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor rewrites a committed file right after its rename, same size, same inode:
    only its mtime (now, at or after the window opened) tells it from the staged file."""
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    original = stager_module.apply

    def apply_then_edit(*args: Any, **kwargs: Any) -> int:
        applied = original(*args, **kwargs)
        with open(setup.workspace / "m.txt", "r+b") as f:  # in place: the same inode
            f.write(b"NEW\n")
        return applied

    monkeypatch.setattr(stager_module, "apply", apply_then_edit)
    settled = stager.settle(final, dirs, view, setup.monitor)
    view.close()
    assert settled.recorded  # the commit itself went through
    assert setup.monitor.snapshot()["m.txt"].hash == bytes_hash(b"NEW\n")
    assert "m.txt" in probed and "d/new.txt" not in probed
    # The next call sees the file as the editor left it: nothing left to report.
    watch = setup.monitor.begin_call()
    assert setup.monitor.finish_call(watch).effects == ()


def test_a_staged_file_written_in_the_windows_first_tick_is_read_again(
    setup: _Setup, probed: list[str]
) -> None:
    """A staged mtime not older than the window's opening cannot vouch for the content:
    a write after the rename in that same tick would keep it."""
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    later = time.time_ns() + 3600 * 10**9  # at or after any opening cookie of this test
    os.utime(dirs.upper / "m.txt", ns=(later, later))
    stager.settle(final, dirs, view, setup.monitor)
    view.close()
    assert "m.txt" in probed and "d/new.txt" not in probed
    assert setup.monitor.snapshot()["m.txt"].hash == bytes_hash(b"new\n")


def test_the_commits_own_file_events_are_dropped(
    setup: _Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observer does not handle the events of the files the commit moves in: the
    window's close looks at them anyway. (d/new.txt is in a directory the commit makes,
    unwatched when the commit names its files: its events are handled.)"""
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    seen: list[str] = []
    original = setup.monitor.on_dirty

    def spy(path: str, is_dir: bool) -> None:
        seen.append(path)
        original(path, is_dir)

    monkeypatch.setattr(setup.monitor, "on_dirty", spy)
    stager.settle(final, dirs, view, setup.monitor)
    view.close()
    setup.assert_committed("call-1")
    assert "m.txt" not in seen and "d" in seen
    assert setup.monitor.snapshot()["m.txt"].hash == bytes_hash(b"new\n")
    (setup.workspace / "m.txt").write_text("edited after\n")  # the events are back
    setup.monitor.flush()
    assert "m.txt" in seen
    assert setup.monitor.snapshot()["m.txt"].hash == bytes_hash(b"edited after\n")


def test_the_commit_applies_the_upper_as_its_effects_listed_it(
    setup: _Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upper is listed once per commit (its command has ended: nothing writes it);
    start-up, finishing a commit a crash cut short, lists it itself."""
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)

    def no_second_listing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the upper was listed again")

    monkeypatch.setattr(commit_module, "entries", no_second_listing)
    settled = stager.settle(final, dirs, view, setup.monitor)
    view.close()
    assert settled.recorded
    setup.assert_committed("call-1")


def test_the_commits_effects_are_serialised_once_for_its_two_writes(
    setup: _Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    stager = setup.stager()
    final, dirs, view = setup.stage(stager)
    serialised: list[str] = []
    original = ledger_module._effect_to_json

    def spy(effect: Any) -> Any:
        serialised.append(effect.path)
        return original(effect)

    monkeypatch.setattr(ledger_module, "_effect_to_json", spy)
    stager.settle(final, dirs, view, setup.monitor)
    view.close()
    assert sorted(serialised) == ["d/new.txt", "m.txt"]  # the journal's; the final reuses it
    setup.assert_committed("call-1")
