"""What to do when a call identity (run_id, step_id) comes again: the replay decision table.

Pure: the previous ledger entry and the new request's facts in, a decision out. The
runtime carries the decision out. See DESIGN.md, Replay decision table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from shellward.types import CallStatus, Code, LedgerEntry, ReplayPolicy


class Action(enum.Enum):
    RUN = "run"  # run the command (again)
    RETURN_RECORDED = "return_recorded"  # answer with the recorded result, run nothing
    REFUSE = "refuse"  # answer with an error, run nothing


@dataclass(frozen=True)
class Decision:
    action: Action
    code: Code = Code.OK
    content: str = ""
    retryable: bool = False


def mismatch(run_id: str, step_id: str, call_id: str) -> Decision:
    return Decision(
        Action.REFUSE,
        Code.IDEMPOTENCY_KEY_MISMATCH,
        f"step {step_id!r} of run {run_id!r} was already used for a different input (call "
        f"{call_id}). Nothing ran. Use a new step_id for a new command; reuse a step_id only "
        "to retry the exact same call.",
    )


def in_progress(run_id: str, step_id: str, call_id: str) -> Decision:
    return Decision(
        Action.REFUSE,
        Code.IN_PROGRESS,
        f"step {step_id!r} of run {run_id!r} is still running as call {call_id}; it was not "
        "started a second time. Wait for it and fetch its result with GetCall.",
        retryable=True,
    )


def decide(previous: LedgerEntry, *, input_hash: str, rerun: bool) -> Decision:
    """Decide for a retry of ``previous`` whose new input hashes to ``input_hash``."""
    if previous.input_hash != input_hash:
        return mismatch(previous.run_id, previous.step_id, previous.call_id)
    if not previous.status.is_final:
        return in_progress(previous.run_id, previous.step_id, previous.call_id)
    if previous.status is CallStatus.SUCCEEDED:
        if rerun and previous.replay_policy is ReplayPolicy.AUTO:
            return Decision(Action.RUN)
        return Decision(Action.RETURN_RECORDED)
    if previous.started_at is None:
        # Failed before it started (invalid input, denied, sandbox error): same answer again.
        return Decision(Action.RETURN_RECORDED)
    if previous.replay_policy is ReplayPolicy.AUTO:
        return Decision(Action.RUN)
    what = "may have partly or fully run" if previous.status is CallStatus.UNCERTAIN else "failed"
    return Decision(
        Action.REFUSE,
        Code.SIDE_EFFECT_UNCERTAIN,
        f"step {previous.step_id!r} of run {previous.run_id!r} (call {previous.call_id}) {what} "
        f"and is {previous.idempotency.value}, so it is not run again automatically. Check its "
        f"effects first (shellward show {previous.call_id}), then ask the user, or start a new "
        "step if it must run again.",
    )
