"""The runtime in-process: a fake sandbox, a real ledger, a real write detector.

Each test breaks one thing a call depends on (the ledger, the index, the daemon's own
code) at one step of the life cycle, and checks that the answer and the ledger row agree
and that nothing the call took stays taken.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from shellward.types import (
    CallStatus,
    CapturedOutput,
    Code,
    Idempotency,
    OutputChunk,
    ReplayPolicy,
    Verdict,
)
from shellwardd.calls import Silent
from shellwardd.config import Config, load_config
from shellwardd.errors import InvalidArgument
from shellwardd.ledger import SqliteLedger
from shellwardd.requests import CommandRequest
from shellwardd.runtime import Runtime
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from shellwardd.watch import WorkspaceMonitor

NO_OUTPUT = CapturedOutput(b"", 0, False, "")


@dataclass
class FakeSandbox:
    """Runs nothing: appends the command to a file of the workspace, as a command would."""

    ran: list[str] = field(default_factory=list)

    def run(
        self,
        spec: SandboxSpec,
        on_output: Callable[[OutputChunk], None],
        cancel: threading.Event,
        on_spawn: Callable[[], None] | None = None,
        *,
        call_id: str = "",
    ) -> ProcessOutcome:
        self.ran.append(spec.command)
        with (spec.workspace / "effects.txt").open("a") as out:
            out.write(spec.command + "\n")
        return ProcessOutcome(True, 0, False, False, CapturedOutput(b"ok\n", 3, False, "x"),
                              NO_OUTPUT)  # fmt: skip


def writes(command: str, cwd: str | None, workspace: str | None, env: Mapping[str, str]) -> Verdict:
    return Verdict(Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER, "it writes (test verdict)")


@dataclass
class Setup:
    config: Config
    ledger: SqliteLedger
    sandbox: FakeSandbox
    workspace: Path

    def runtime(
        self, monitor: WorkspaceMonitor, classify: Callable[..., Verdict] = writes
    ) -> Runtime:
        sandbox: Sandbox = self.sandbox  # type: ignore[assignment]
        return Runtime(self.config, self.ledger, classify, sandbox, {self.workspace: monitor})

    def break_ledger(self, status: CallStatus) -> Callable[[], None]:
        """Make every write of ``status`` fail, as a full disk would; returns the repair."""
        with sqlite3.connect(self.ledger.path) as db:
            db.execute(
                f"CREATE TRIGGER fail_{status.value} BEFORE UPDATE OF status ON calls "
                f"WHEN NEW.status = '{status.value}' "
                "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )

        def repair() -> None:
            with sqlite3.connect(self.ledger.path) as db:
                db.execute(f"DROP TRIGGER fail_{status.value}")

        return repair


@pytest.fixture
def setup(tmp_path: Path, workspace: Path) -> Iterator[Setup]:
    state = tmp_path / "state"
    config = load_config(
        ["--state-dir", str(state), "--workspace", str(workspace),
         "--socket", str(tmp_path / "run" / "s.sock")],
        env={},
    )  # fmt: skip
    ledger = SqliteLedger(config.ledger_path)
    yield Setup(config, ledger, FakeSandbox(), config.workspaces[0])
    ledger.close()


@pytest.fixture
def monitor(setup: Setup) -> Iterator[WorkspaceMonitor]:
    monitor = WorkspaceMonitor(setup.workspace, setup.config.state_dir / "index")
    monitor.start()
    assert monitor.wait_ready(30)
    yield monitor
    monitor.stop()


def test_a_failed_start_record_releases_the_workspace(
    setup: Setup, monitor: WorkspaceMonitor
) -> None:
    runtime = setup.runtime(monitor)
    repair = setup.break_ledger(CallStatus.STARTED)
    first = runtime.run_command(CommandRequest("echo one"), Silent())
    assert (first.ok, first.code, first.status) == (False, Code.UNAVAILABLE, CallStatus.FAILED)
    assert "Nothing ran" in first.content
    assert setup.ledger.get(first.call_id).status is CallStatus.FAILED  # type: ignore[union-attr]
    assert setup.sandbox.ran == []
    repair()
    # A writing call needs the workspace alone: it must be free again at once.
    second = runtime.run_command(CommandRequest("echo two", timeout_seconds=3), Silent())
    assert second.ok, second.content
    assert setup.sandbox.ran == ["echo two"]


def test_a_failed_index_ends_the_recorded_call(setup: Setup, tmp_path: Path) -> None:
    # The index's directory is a file: the index cannot be built, the monitor is degraded.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    broken = WorkspaceMonitor(setup.workspace, blocker)
    broken.start()
    try:
        assert broken.wait_ready(30)
        result = setup.runtime(broken).run_command(CommandRequest("echo x"), Silent())
    finally:
        broken.stop()
    assert (result.ok, result.code, result.status) == (False, Code.UNAVAILABLE, CallStatus.FAILED)
    assert "write detector" in result.content and "nothing ran" in result.content
    row = setup.ledger.get(result.call_id)
    assert row is not None and row.status is CallStatus.FAILED
    assert setup.sandbox.ran == []


def test_a_failed_final_record_answers_what_the_row_says(
    setup: Setup, monitor: WorkspaceMonitor
) -> None:
    runtime = setup.runtime(monitor)
    setup.break_ledger(CallStatus.SUCCEEDED)
    result = runtime.run_command(CommandRequest("echo x", run_id="r", step_id="s"), Silent())
    assert setup.sandbox.ran == ["echo x"]
    row = setup.ledger.get(result.call_id)
    assert row is not None
    assert result.status is row.status is CallStatus.UNCERTAIN
    assert result.code is Code.SIDE_EFFECT_UNCERTAIN and not result.ok
    assert "could not record its result" in result.content
    # The claim is released and the row is final: a retry meets the replay table, not
    # "still in progress", and does not run the command twice.
    again = runtime.run_command(CommandRequest("echo x", run_id="r", step_id="s"), Silent())
    assert again.code is Code.SIDE_EFFECT_UNCERTAIN
    assert setup.sandbox.ran == ["echo x"]


def test_an_internal_error_before_the_record_does_not_point_to_show(
    setup: Setup, monitor: WorkspaceMonitor
) -> None:
    def broken(command: str, cwd: str | None, workspace: str | None) -> Verdict:
        raise RuntimeError("a bug in the classifier")

    result = setup.runtime(monitor, broken).run_command(CommandRequest("echo x"), Silent())
    assert result.code is Code.INTERNAL
    assert setup.ledger.get(result.call_id) is None
    assert "shellward show" not in result.content
    assert "not recorded" in result.content


def test_a_busy_ledger_answers_unavailable_and_runs_nothing(
    setup: Setup, monitor: WorkspaceMonitor
) -> None:
    runtime = setup.runtime(monitor)
    holder = sqlite3.connect(setup.ledger.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the busy timeout
    try:
        result = runtime.run_command(CommandRequest("echo x"), Silent())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (result.ok, result.code, result.retryable) == (False, Code.UNAVAILABLE, True)
    assert "Nothing ran" in result.content and "shellward show" not in result.content
    assert setup.sandbox.ran == []
    assert runtime.run_command(CommandRequest("echo y"), Silent()).ok


def test_work_that_raises_ends_uncertain_and_frees_the_workspace(
    setup: Setup, monitor: WorkspaceMonitor
) -> None:
    class Exploding(FakeSandbox):
        def run(self, spec: SandboxSpec, *args: object, **kwargs: object) -> ProcessOutcome:
            self.ran.append(spec.command)
            raise RuntimeError("a bug while the command ran")

    setup.sandbox = Exploding()
    runtime = setup.runtime(monitor)
    result = runtime.run_command(CommandRequest("echo x", run_id="r", step_id="s"), Silent())
    row = setup.ledger.get(result.call_id)
    assert row is not None
    assert result.status is row.status is CallStatus.UNCERTAIN
    assert "may have partly or fully run" in row.content
    setup.sandbox = FakeSandbox()
    assert setup.runtime(monitor).run_command(CommandRequest("echo y", timeout_seconds=3),
                                              Silent()).ok  # fmt: skip


def test_a_late_denial_never_overwrites_a_call_that_ran(
    setup: Setup, monitor: WorkspaceMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    def needs_approval(
        command: str, cwd: str | None, workspace: str | None, env: Mapping[str, str]
    ) -> Verdict:
        return replace(writes(command, cwd, workspace, env), needs_approval=True)

    runtime = setup.runtime(monitor, needs_approval)
    pending = runtime.run_command(CommandRequest("echo x"), Silent())
    assert pending.code is Code.NEEDS_APPROVAL
    stale = setup.ledger.get(pending.call_id)
    runtime.approve(pending.call_id, True)
    assert runtime.wait_call(pending.call_id, 30).ok
    # A second human answered "deny" on what they saw before the approval landed.
    monkeypatch.setattr(runtime, "get_call", lambda call_id: stale)
    with pytest.raises(InvalidArgument, match="another answer came first"):
        runtime.approve(pending.call_id, False)
    row = setup.ledger.get(pending.call_id)
    assert row is not None and row.status is CallStatus.SUCCEEDED
    assert setup.sandbox.ran == ["echo x"]


class CountingLedger(SqliteLedger):
    """Counts committed transactions (each is one durable commit: one WAL fsync)."""

    commits = 0

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with super()._transaction() as db:
            yield db
        self.commits += 1


@dataclass
class SpyingSandbox(FakeSandbox):
    """Notes, at the spawn, what another connection reads of the ledger and how many
    commits were made: what is durable before the command runs."""

    ledger: CountingLedger | None = None
    seen: list[tuple[int, list[str]]] = field(default_factory=list)

    def run(self, spec: SandboxSpec, *args: Any, **kwargs: Any) -> ProcessOutcome:
        assert self.ledger is not None
        with sqlite3.connect(self.ledger.path) as db:
            history = [s for (s,) in db.execute("SELECT status FROM transitions ORDER BY at")]
        self.seen.append((self.ledger.commits, history))
        return super().run(spec, *args, **kwargs)


def test_a_new_call_is_planned_and_started_in_one_commit_before_it_runs(
    setup: Setup, monitor: WorkspaceMonitor, tmp_path: Path
) -> None:
    ledger = CountingLedger(tmp_path / "counted.sqlite3")
    sandbox = SpyingSandbox(ledger=ledger)
    runtime = Runtime(setup.config, ledger, writes, sandbox, {setup.workspace: monitor})  # type: ignore[arg-type]
    before = ledger.commits
    result = runtime.run_command(CommandRequest("echo one"), Silent())
    assert result.ok, result.content
    ((commits, history),) = sandbox.seen
    assert history == ["planned", "started"]  # both durable before the spawn
    assert commits - before == 1  # was 2: planned, then started
    assert [t.status for t in ledger.transitions(result.call_id)] == [
        CallStatus.PLANNED, CallStatus.STARTED, CallStatus.SUCCEEDED,
    ]  # fmt: skip
    ledger.close()


def test_a_call_that_waits_for_its_workspace_is_visible_as_planned(
    setup: Setup, monitor: WorkspaceMonitor
) -> None:
    runtime = setup.runtime(monitor)
    holder = monitor.begin_call(exclusive=True)  # another writer holds the workspace
    results: list[Any] = []
    call = threading.Thread(
        target=lambda: results.append(
            runtime.run_command(CommandRequest("echo waited", timeout_seconds=20), Silent())
        )
    )
    call.start()
    try:
        deadline = time.monotonic() + 20
        while not setup.ledger.list() and time.monotonic() < deadline:
            time.sleep(0.01)
        (waiting,) = setup.ledger.list()
        assert waiting.status is CallStatus.PLANNED and setup.sandbox.ran == []
    finally:
        monitor.finish_call(holder)
        call.join(timeout=30)
    (result,) = results
    assert result.ok, result.content
    assert [t.status for t in setup.ledger.transitions(result.call_id)] == [
        CallStatus.PLANNED, CallStatus.STARTED, CallStatus.SUCCEEDED,
    ]  # fmt: skip
