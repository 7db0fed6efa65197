"""What a call's outcome means for the model: final states, codes and the sentences it reads.

Pure functions from what happened (a process outcome, observed file effects, a replay
decision) to ledger entries and ``CommandResult``s.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from shellward.types import (
    CallStatus,
    CapturedOutput,
    Code,
    CommandResult,
    Idempotency,
    LedgerEntry,
    ReplayPolicy,
)
from shellwardd.replay import TRANSIENT_CODES, Decision
from shellwardd.sandbox import ProcessOutcome
from shellwardd.tools.mcp_client import OutcomeKind, ToolCallOutcome
from shellwardd.tools.registry import RegisteredTool, uncertain_content
from shellwardd.watch import CallEffects
from shellwardd.watch.hashing import bytes_hash


def finished_entry(entry: LedgerEntry, outcome: ProcessOutcome, now: float) -> LedgerEntry:
    """The final ledger entry for a call that was started: status, code and sentence."""
    known_idempotent = entry.idempotency is Idempotency.IDEMPOTENT
    common: dict[str, Any] = {
        "finished_at": now,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "exit_code": outcome.exit_code,
    }
    check = f"Check its effects first (`shellward show {entry.call_id}`) or ask the user."
    if not outcome.started:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.SANDBOX_ERROR, **common,
            content=f"The sandbox could not start the command: {outcome.sandbox_error}. Nothing "
            "ran. This is a problem of the daemon's set-up, not of the command; tell the user.",
        )  # fmt: skip
    if outcome.timed_out:
        if known_idempotent:
            return replace(
                entry, status=CallStatus.FAILED, code=Code.TIMEOUT, **common,
                content=f"The command did not finish within {entry.timeout_seconds:g}s and was "
                "killed. It only reads, so retrying is safe: give it a longer timeout or a "
                "narrower scope.",
            )  # fmt: skip
        return replace(
            entry, status=CallStatus.UNCERTAIN, code=Code.SIDE_EFFECT_UNCERTAIN, **common,
            content=f"The command did not finish within {entry.timeout_seconds:g}s and was "
            f"killed; it may have partly or fully run. Do not retry automatically. {check}",
        )  # fmt: skip
    if outcome.cancelled:
        code = Code.INTERRUPTED if known_idempotent else Code.SIDE_EFFECT_UNCERTAIN
        advice = "It only reads, so running it again is safe." if known_idempotent else check
        return replace(
            entry, status=CallStatus.UNCERTAIN, code=code, **common,
            content=f"The daemon shut down while the command ran and killed it. {advice}",
        )  # fmt: skip
    if outcome.exit_code == 0:
        return replace(
            entry, status=CallStatus.SUCCEEDED, code=Code.OK, **common,
            content="The command succeeded (exit status 0).",
        )  # fmt: skip
    return replace(
        entry, status=CallStatus.FAILED, code=Code.COMMAND_FAILED, **common,
        content=f"The command exited with status {outcome.exit_code}; stderr says why. Fix the "
        "cause before running it again.",
    )  # fmt: skip


def reconcile(entry: LedgerEntry, observed: CallEffects) -> LedgerEntry:
    """Put the observed file effects on the entry; a "read-only" call that wrote is
    downgraded for replay, with the reason naming the files."""
    notes = [observed.note] if observed.note else []
    changes: dict[str, object] = {}
    content = entry.content
    if observed.effects:
        paths = [effect.path for effect in observed.effects]
        shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        content += f" It changed {len(paths)} file(s): {shown}."
    if observed.effects and entry.idempotency is Idempotency.IDEMPOTENT:
        notes.append(
            f"classified idempotent but wrote {len(paths)} file(s): {shown}; replay now needs "
            "a check (at least ask)"
        )
        content += " It was expected to only read, so replaying it now needs a check."
        changes = {
            "unexpected_writes": True,
            "idempotency": Idempotency.CONDITIONAL,
            "replay_policy": max(entry.replay_policy, ReplayPolicy.ASK),
        }
    return replace(
        entry,
        content=content,
        file_effects=observed.effects,
        effects_from_rescan=observed.from_rescan,
        effects_recorded=True,
        note="; ".join(filter(None, [entry.note, *notes])),
        **changes,  # type: ignore[arg-type]
    )


def retryable(entry: LedgerEntry) -> bool:
    """May the agent simply send this call again?"""
    if entry.status is CallStatus.SUCCEEDED:
        return False
    if entry.started_at is None:
        # Nothing ran: retrying the same input only helps where the cause was transient.
        return entry.code in TRANSIENT_CODES
    return entry.replay_policy is ReplayPolicy.AUTO


def result_from_entry(entry: LedgerEntry, *, replayed: bool = False) -> CommandResult:
    content = entry.content
    if replayed:
        content = f"Recorded result of call {entry.call_id}, replayed: nothing ran now. {content}"
    return CommandResult(
        ok=entry.status is CallStatus.SUCCEEDED,
        code=entry.code,
        content=content,
        call_id=entry.call_id,
        retryable=retryable(entry),
        idempotency=entry.idempotency,
        replay_policy=entry.replay_policy,
        status=entry.status,
        exit_code=entry.exit_code,
        replayed=replayed,
        stdout=entry.stdout,
        stderr=entry.stderr,
        verdict=entry.verdict,
        file_effects=entry.file_effects,
        run_id=entry.run_id,
        step_id=entry.step_id,
        started_at=entry.started_at,
        finished_at=entry.finished_at,
        output_json=entry.output_json,
        idempotency_key=entry.idempotency_key,
    )


def refusal(
    decision: Decision,
    call_id: str,
    identity: tuple[str, str],
    previous: LedgerEntry | None = None,
) -> CommandResult:
    """An answer that runs nothing; it names the call it is about, without its output.

    Without ``previous`` the call named is one being started right now (IN_PROGRESS) or
    one this request never got to record."""
    unrecorded = CallStatus.STARTED if decision.code is Code.IN_PROGRESS else CallStatus.FAILED
    return CommandResult(
        ok=False,
        code=decision.code,
        content=decision.content,
        call_id=call_id,
        retryable=decision.retryable,
        idempotency=previous.idempotency if previous else Idempotency.NON_IDEMPOTENT,
        replay_policy=previous.replay_policy if previous else ReplayPolicy.NEVER,
        status=previous.status if previous else unrecorded,
        verdict=previous.verdict if previous else None,
        run_id=identity[0],
        step_id=identity[1],
    )


def already_applied(previous: LedgerEntry) -> CommandResult:
    """A conditional call whose recorded effects are all in place: nothing to run."""
    paths = ", ".join(e.path for e in previous.file_effects[:5])
    return replace(
        result_from_entry(previous, replayed=True),
        ok=True,
        code=Code.ALREADY_APPLIED,
        content=f"Call {previous.call_id} already applied its changes (its files, {paths}, are "
        "as it left them), so nothing ran now. Continue with the next step.",
        retryable=False,
    )


def conflict_content(call_id: str, previous: LedgerEntry, conflicts: tuple[str, ...]) -> str:
    shown = ", ".join(conflicts[:5]) + (
        f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
    )
    return (
        f"Running call {previous.call_id} again is not safe without a look: files it changed "
        f"were changed by someone else since ({shown}). Nothing ran. A human must approve the "
        f"new attempt, call {call_id} (shellward approve {call_id}); wait for it with WaitCall."
    )


def captured(data: bytes, cap: int) -> CapturedOutput:
    """A tool's answer as a call's output, capped like a command's (``--output-cap``):
    the first ``cap`` bytes kept, the size and digest of the whole."""
    return CapturedOutput(data[:cap], len(data), len(data) > cap, bytes_hash(data))


def _capped_text(output: CapturedOutput) -> str:
    """The kept start of a capped answer as text, saying what was cut."""
    if not output.truncated:
        return output.text
    return (
        f"{output.text}\n[shellward kept the first {len(output.data)} of {output.total_bytes}"
        f" bytes of this answer (its --output-cap); {output.sha256}]"
    )


def _capped_json(value: Any, cap: int) -> str:
    """``value`` as JSON, or, past ``cap`` bytes, what it was: its size and digest."""
    text = json.dumps(value)
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text
    return json.dumps({"truncated": True, "total_bytes": len(data), "sha256": bytes_hash(data)})


def mcp_finished_entry(
    entry: LedgerEntry,
    tool: RegisteredTool,
    outcome: ToolCallOutcome,
    key: str | None,
    now: float,
    *,
    cap: int,
) -> LedgerEntry:
    """The final entry of a business tool call, from what its server answered (or not)."""
    name = tool.name
    # The answer is stored three ways (raw, as the sentence, as JSON): each is capped.
    answer = captured(outcome.content.encode("utf-8"), cap)
    text = _capped_text(answer)
    common: dict[str, Any] = {"finished_at": now}
    if outcome.kind in (OutcomeKind.OK, OutcomeKind.ERROR):  # the server answered
        structured = outcome.structured
        common["stdout"] = answer
        common["output_json"] = _capped_json(
            structured if structured is not None else {"content": text}, cap
        )
    if outcome.kind is OutcomeKind.OK:
        return replace(
            entry, status=CallStatus.SUCCEEDED, code=Code.OK, **common,
            content=text or f"{name} succeeded.",
        )  # fmt: skip
    if outcome.kind is OutcomeKind.ERROR:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.COMMAND_FAILED, **common,
            content=f"{name} answered with an error: {text or outcome.detail}. Fix the "
            "cause before calling it again.",
        )  # fmt: skip
    if outcome.kind is OutcomeKind.UNAVAILABLE:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.UNAVAILABLE, **common,
            content=f"{name} was not sent: {outcome.detail}. Nothing happened; retry in a moment.",
        )  # fmt: skip
    if entry.idempotency is Idempotency.IDEMPOTENT:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.TIMEOUT, **common,
            content=f"{name} did not answer ({outcome.detail}). It only reads, so retrying is "
            "safe, with a longer timeout if it is slow.",
        )  # fmt: skip
    return replace(
        entry, status=CallStatus.UNCERTAIN, code=Code.SIDE_EFFECT_UNCERTAIN, **common,
        content=uncertain_content(tool, outcome, key),
    )  # fmt: skip
