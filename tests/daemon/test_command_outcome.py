"""A command's final entry: a cancel that lands while bwrap is still setting up (the
command never started) is an interrupted call with nothing run, not a sandbox failure."""

from __future__ import annotations

from shellward.types import CallStatus, CapturedOutput, Code, Idempotency, LedgerEntry, ReplayPolicy
from shellwardd.calls.command import finished_entry
from shellwardd.sandbox import ProcessOutcome


def _outcome(*, started: bool, cancelled: bool) -> ProcessOutcome:
    return ProcessOutcome(
        started=started, exit_code=None, timed_out=False, cancelled=cancelled,
        stdout=CapturedOutput(), stderr=CapturedOutput(),
        sandbox_error="" if started else "bwrap exited -9",
    )  # fmt: skip


ENTRY = LedgerEntry(
    call_id="c1", run_id="", step_id="", tool_name="run_command", input_hash="h",
    status=CallStatus.STARTED, idempotency=Idempotency.NON_IDEMPOTENT,
    replay_policy=ReplayPolicy.NEVER, command="touch x", cwd="/ws", workspace="/ws",
)  # fmt: skip


def test_a_cancel_before_the_command_started_is_interrupted_not_a_sandbox_error() -> None:
    final = finished_entry(ENTRY, _outcome(started=False, cancelled=True), 1.0, "a client left")
    assert (final.status, final.code) == (CallStatus.FAILED, Code.INTERRUPTED)
    assert "a client left" in final.note and "Nothing ran" in final.content


def test_a_cancel_while_it_ran_is_uncertain_and_says_who() -> None:
    final = finished_entry(ENTRY, _outcome(started=True, cancelled=True), 1.0, "a client left")
    assert (final.status, final.code) == (CallStatus.UNCERTAIN, Code.SIDE_EFFECT_UNCERTAIN)
    assert "a client left" in final.content and "cancelled: a client left" in final.note
