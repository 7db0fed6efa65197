"""What a call's outcome means for the model, whatever its kind: the sentences of the life
cycle (not started, crashed, not recorded), of reconciliation and of replay.

Pure functions from what happened (observed file effects, a replay decision, a failure of
the daemon's own) to ledger entries and ``CommandResult``s. What a command's or a tool's
own outcome means is said by its kind (``shellwardd.calls``).
"""

from __future__ import annotations

from dataclasses import replace

from shellward.types import (
    CallStatus,
    CapturedOutput,
    Code,
    CommandResult,
    Idempotency,
    LedgerEntry,
    NetworkEffect,
    ReplayPolicy,
)
from shellwardd.egress.policy import allowed
from shellwardd.errors import ShellwardError
from shellwardd.replay import READS, TRANSIENT_CODES, Action, Decision
from shellwardd.watch import CallEffects
from shellwardd.watch.hashing import bytes_hash


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


def reconcile_network(entry: LedgerEntry, effects: tuple[NetworkEffect, ...]) -> LedgerEntry:
    """Put the proxy's record on the entry. A call classified idempotent that sent a
    request other than GET/HEAD, or reached a destination its verdict does not name, is
    downgraded like one that wrote files (``unexpected_network``)."""
    if not effects:
        return entry
    content, notes = entry.content, []
    refused = [e for e in effects if e.refused]
    if refused:
        content += f" The network proxy refused {len(refused)} connection(s): " + "; ".join(
            dict.fromkeys(e.refused for e in refused[:3])
        ) + " (docs/network.md says how the operator allows a destination)."  # fmt: skip
    named = entry.verdict.destinations if entry.verdict else ()
    surprising = [
        e
        for e in effects
        if not e.refused and (e.method not in READS | {"CONNECT"} or not allowed(e.host, named))
    ]
    changes: dict[str, object] = {}
    if surprising and entry.idempotency is Idempotency.IDEMPOTENT:
        shown = ", ".join(dict.fromkeys(_shown(e) for e in surprising[:5]))
        notes.append(
            f"classified idempotent but its network traffic was more than reads from its "
            f"rules' destinations ({shown}); replay now needs a check (at least ask)"
        )
        content += (
            f" It was expected to only read, but it sent {shown} over the network, so "
            "replaying it now needs a check."
        )
        changes = {
            "unexpected_network": True,
            "idempotency": Idempotency.CONDITIONAL,
            "replay_policy": max(entry.replay_policy, ReplayPolicy.ASK),
        }
    return replace(
        entry,
        content=content,
        network_effects=effects,
        note="; ".join(filter(None, [entry.note, *notes])),
        **changes,  # type: ignore[arg-type]
    )


def _shown(effect: NetworkEffect) -> str:
    if effect.method == "CONNECT":
        return f"a connection to {effect.host}:{effect.port}"
    return f"{effect.method} http://{effect.host}:{effect.port}{effect.path}"


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
        network_effects=entry.network_effects,
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


def conflict_content(
    call_id: str,
    previous: LedgerEntry,
    conflicts: tuple[str, ...],
    unknown: str = "",
    remedy: str = "",
) -> str:
    """Why a new attempt waits for a human: files changed since (``conflicts``), or effects
    that cannot be checked (``unknown``, why), which is not a change by anyone. ``remedy``:
    how to revert ``previous`` instead (its compensation), when there is one."""
    shown = ", ".join(conflicts[:5]) + (
        f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
    )
    why = (
        f"{unknown}, so whether its changes are in place cannot be checked"
        if unknown
        else f"files it changed were changed by someone else since ({shown})"
    )
    return (
        f"Running call {previous.call_id} again is not safe without a look: {why}. Nothing "
        f"ran. A human must approve the new attempt, call {call_id} (shellward approve "
        f"{call_id}); wait for it with WaitCall." + (f" {remedy}" if remedy else "")
    )


def captured(data: bytes, cap: int) -> CapturedOutput:
    """A tool's answer as a call's output, capped like a command's (``--output-cap``):
    the first ``cap`` bytes kept, the size and digest of the whole."""
    return CapturedOutput(data[:cap], len(data), len(data) > cap, bytes_hash(data))


def ask_approval(call_id: str, why: str) -> str:
    """A first run that waits for a human: the kind's reason, then how to ask."""
    return (
        f"{why} Ask the user to approve call {call_id} (shellward approve {call_id}), then wait "
        "for it with WaitCall."
    )


def not_started(entry: LedgerEntry, error: ShellwardError, now: float) -> LedgerEntry:
    """A recorded call that could not start: nothing ran."""
    return replace(
        entry, status=CallStatus.FAILED, code=error.code, content=error.message, finished_at=now
    )


def workspace_busy(entry: LedgerEntry, done: int, total: int) -> str:
    return (
        f"The workspace was busy (indexing: {done:,} / {total:,} files, or another writing "
        f"call) for the whole timeout of {entry.timeout_seconds:g}s; nothing ran. Retry in "
        "a moment."
    )


def unwatchable(entry: LedgerEntry, problem: str) -> str:
    return (
        f"The write detector cannot watch {entry.workspace} ({problem}), so the call could not "
        "be recorded safely; nothing ran. Tell the user: the daemon's log says why, and a "
        "restart of the daemon rebuilds the index."
    )


def unstageable(entry: LedgerEntry, problem: str) -> str:
    return (
        f"The daemon could not prepare the overlay this call writes into ({problem}); nothing "
        "ran. This is a problem of the daemon's set-up; tell the user."
    )


def previewed(content: str, diff: str) -> str:
    """The pending sentence of a call whose preview ran (its writes staged)."""
    changes = f"Its file changes:\n{diff}" if diff else "It changed no files."
    return (
        f"{content} A preview ran with its writes staged (nothing applied): approving commits "
        f"exactly this result without running it again; denying discards it. {changes}"
    )


def commit_failed(final: LedgerEntry) -> LedgerEntry:
    """A staged call whose commit failed part-way: some of its writes may be applied."""
    return replace(
        final,
        status=CallStatus.UNCERTAIN,
        code=Code.SIDE_EFFECT_UNCERTAIN,
        content="The command ran, but applying its file writes to the workspace failed "
        "part-way; some may be applied. Check its effects first "
        f"(`shellward show {final.call_id}`) or ask the user.",
    )


def ledger_busy(problem: str) -> str:
    return f"shellward could not record the call ({problem}). Nothing ran. Retry in a moment."


def crashed(entry: LedgerEntry, now: float) -> LedgerEntry:
    """A started call whose work raised (a bug of the daemon): it may have partly run."""
    return replace(
        entry, status=CallStatus.UNCERTAIN, code=Code.SIDE_EFFECT_UNCERTAIN, finished_at=now,
        content="shellward hit an internal error while the call ran; it may have partly or "
        f"fully run. Check its effects first (`shellward show {entry.call_id}`) or ask the "
        "user.",
    )  # fmt: skip


def unrecorded(final: LedgerEntry, problem: str) -> LedgerEntry:
    """A call whose final record failed: the smallest entry that keeps the answer and the
    row in agreement (uncertain; the output, which may be what did not fit, is dropped)."""
    return replace(
        final,
        status=CallStatus.UNCERTAIN,
        code=Code.SIDE_EFFECT_UNCERTAIN,
        stdout=replace(final.stdout, data=b""),
        stderr=replace(final.stderr, data=b""),
        output_json="",
        content=f"The call ran ({final.status.value}, {final.code.value}), but shellward could "
        f"not record its result ({problem}), so its output is lost. Check its effects first "
        f"(`shellward show {final.call_id}`) or ask the user.",
    )


def internal_error(call_id: str, recorded: bool) -> Decision:
    """The answer to a request the daemon failed on (a bug): point to the record if any."""
    where = (
        f"Check `shellward show {call_id}` before retrying."
        if recorded
        else "The call was not recorded; retrying is safe once the daemon is healthy."
    )
    return Decision(
        Action.REFUSE, Code.INTERNAL,
        f"shellward hit an internal error; the daemon log has the details. {where}",
    )  # fmt: skip
