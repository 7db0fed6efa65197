"""A staged call's commit in process (no daemon, no overlay: the upper is filled by hand):
how many durable ledger writes it costs, and that a crash between any two of its steps
still ends right at the next start-up."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from shellward.types import CallStatus, Idempotency, LedgerEntry, ReplayPolicy
from shellwardd.errors import LedgerError
from shellwardd.ledger import SqliteLedger
from shellwardd.staging import stager as stager_module
from shellwardd.staging.area import StagedDirs, StagingArea
from shellwardd.staging.blobs import BlobStore
from shellwardd.staging.stager import Stager
from shellwardd.watch import WorkspaceMonitor
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
