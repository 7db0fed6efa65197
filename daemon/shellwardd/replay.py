"""What to do when a call comes again: the replay decision table (docs/architecture.md).

=============================  ===================  ==================  =======================
ledger says                    idempotent + auto    conditional + ask   non_idempotent + never
=============================  ===================  ==================  =======================
succeeded                      recorded result      recorded result     recorded result
succeeded, ``rerun`` asked     run again            check the effects   refuse
uncertain / failed after start run again            check the effects   SIDE_EFFECT_UNCERTAIN
failed before start / denied   the same answer again; nothing runs (busy: run)
=============================  ===================  ==================  =======================

"Check" compares the call's recorded file effects with the workspace now
(:func:`check_effects`): all at their after-hash → ALREADY_APPLIED (nothing runs); all at
their before-hash → run again; anything else → CONFLICT, and a human must approve. A call
whose network effects include more than plain GET/HEAD requests (an HTTPS tunnel's content
is not visible) is always CONFLICT: what it sent cannot be compared with the workspace.

:func:`decide` is the table; :func:`resolve` settles its "check" against the workspace; a
new request (the runtime) and ``shellward recover`` (:func:`recovery_item`) both read the
table through :func:`resolve`, so they cannot disagree. Pure, apart from reading file
hashes through the ``hash_of`` they are given.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shellward.types import CallStatus, Code, EffectKind, LedgerEntry, RecoveryItem, ReplayPolicy

# Network requests that only read (plain HTTP, where the method is visible).
READS = frozenset({"GET", "HEAD"})
# Codes of calls that ended before they started for a passing reason (the daemon was busy
# or shutting down): a retry of the same step runs, where any other early end repeats.
TRANSIENT_CODES = frozenset({Code.UNAVAILABLE, Code.INTERRUPTED})


class Action(enum.Enum):
    RUN = "run"  # run the command (again)
    RETURN_RECORDED = "return_recorded"  # answer with the recorded result, run nothing
    CHECK = "check"  # compare the recorded file effects with the workspace first
    REFUSE = "refuse"  # answer with an error, run nothing
    # After a check (resolve):
    ALREADY_APPLIED = "already_applied"  # its effects are in place: answer so, run nothing
    ASK = "ask"  # someone else changed its files: a new attempt waits for a human


@dataclass(frozen=True)
class Decision:
    action: Action
    code: Code = Code.OK
    content: str = ""
    retryable: bool = False
    # Set by resolve(): the recorded effects were compared with the workspace, and what
    # that found (the files in conflict, for ASK; or why they could not be compared).
    checked: bool = False
    conflicts: tuple[str, ...] = ()
    unknown: str = ""


def _step(entry: LedgerEntry) -> str:
    if entry.run_id and entry.step_id:
        return f"step {entry.step_id!r} of run {entry.run_id!r} (call {entry.call_id})"
    return f"call {entry.call_id}"


def mismatch(run_id: str, step_id: str, call_id: str) -> Decision:
    return Decision(
        Action.REFUSE,
        Code.IDEMPOTENCY_KEY_MISMATCH,
        f"step {step_id!r} of run {run_id!r} was already used for a different input (call "
        f"{call_id}). Nothing ran. Use a new step_id for a new command; reuse a step_id only "
        "to retry the exact same call.",
    )


def in_progress(run_id: str, step_id: str, call_id: str) -> Decision:
    what = f"step {step_id!r} of run {run_id!r}" if run_id and step_id else "it"
    return Decision(
        Action.REFUSE,
        Code.IN_PROGRESS,
        f"Call {call_id} is still in progress; {what} was not started a second time. Wait "
        f"for its result with WaitCall (shellward wait {call_id}) or fetch it later with "
        "GetCall.",
        retryable=True,
    )


def key_taken(key: str, holder: LedgerEntry) -> Decision:
    """Another step owns the business idempotency key ``key`` (any daemon of the fleet)."""
    if holder.status is CallStatus.SUCCEEDED:
        return Decision(Action.RETURN_RECORDED)
    if not holder.status.is_final:
        return still_running(holder)
    return Decision(
        Action.REFUSE,
        Code.SIDE_EFFECT_UNCERTAIN,
        f"The business idempotency key {key!r} belongs to {_step(holder)}, which ended "
        f"{holder.status.value}: {holder.content} Nothing ran. Settle that step first "
        f"(shellward show {holder.call_id}), or change the request so that it names another "
        "object.",
    )


def elsewhere(previous: LedgerEntry, here: str) -> Decision:
    """A check of ``previous``'s file effects asked of a daemon that does not hold them."""
    return Decision(
        Action.REFUSE,
        Code.UNAVAILABLE,
        f"{_step(previous).capitalize()} ran on daemon {previous.daemon_id!r}, which holds its "
        f"workspace; this daemon ({here!r}) cannot check its file effects, and checking its "
        f"own files would answer for the wrong ones. Nothing ran. Send this retry to "
        f"{previous.daemon_id!r} (or run `shellward recover` against it).",
    )


def awaiting_approval(entry: LedgerEntry) -> Decision:
    return Decision(
        Action.REFUSE,
        Code.NEEDS_APPROVAL,
        f"{_step(entry).capitalize()} is waiting for a human's approval; nothing ran. Ask the "
        f"user to approve it (shellward approve {entry.call_id}), then wait for it with "
        f"WaitCall (shellward wait {entry.call_id}).",
        retryable=True,
    )


def still_running(entry: LedgerEntry) -> Decision:
    """The answer for a call that is not final yet (waiting for a human, or running)."""
    if entry.status is CallStatus.PENDING_APPROVAL:
        return awaiting_approval(entry)
    return in_progress(entry.run_id, entry.step_id, entry.call_id)


def decide(
    previous: LedgerEntry, *, input_hash: str, rerun: bool, now: float, retention: float
) -> Decision:
    """Decide for a new request of ``previous``'s identity whose input hashes to ``input_hash``."""
    if previous.input_hash != input_hash:
        return mismatch(previous.run_id, previous.step_id, previous.call_id)
    if not previous.status.is_final:
        return still_running(previous)
    if now - previous.created_at > retention:
        return Decision(
            Action.REFUSE,
            Code.RECORD_EXPIRED,
            f"The record of {_step(previous)} expired (kept {retention / 3600:g} h), so "
            "shellward can no longer tell whether running it again is safe; nothing ran. "
            "If it must run again, use a new step_id.",
        )
    if previous.status is CallStatus.FAILED and previous.code in TRANSIENT_CODES:
        return Decision(Action.RUN)  # nothing ran, for a passing cause
    if previous.started_at is None:
        # Ended before it started (invalid input, denied, sandbox error): same answer again.
        return Decision(Action.RETURN_RECORDED)
    policy = previous.replay_policy
    if previous.status is CallStatus.SUCCEEDED:
        if not rerun:
            return Decision(Action.RETURN_RECORDED)
        if policy is ReplayPolicy.AUTO:
            return Decision(Action.RUN)
        if policy is ReplayPolicy.ASK:
            return Decision(Action.CHECK)
        return Decision(
            Action.REFUSE,
            Code.SIDE_EFFECT_UNCERTAIN,
            f"{_step(previous)} already succeeded and is {previous.idempotency.value}: running "
            "it again would repeat its side effects. Nothing ran. If a second run is really "
            "intended, use a new step_id.",
        )
    if policy is ReplayPolicy.AUTO:
        return Decision(Action.RUN)
    if policy is ReplayPolicy.ASK:
        return Decision(Action.CHECK)
    what = "may have partly or fully run" if previous.status is CallStatus.UNCERTAIN else "failed"
    return Decision(
        Action.REFUSE,
        Code.SIDE_EFFECT_UNCERTAIN,
        f"{_step(previous)} {what} and is {previous.idempotency.value}, so it is not run again "
        f"automatically; nothing ran. Check its effects first (shellward show "
        f"{previous.call_id}), then ask the user, or start a new step if it must run again.",
    )


class EffectsState(enum.Enum):
    ALREADY_APPLIED = "already_applied"  # every recorded effect is in place
    AT_BEFORE = "at_before"  # nothing of it is in place: running again is safe
    CONFLICT = "conflict"  # someone else changed the files, or the effects are unknown


@dataclass(frozen=True)
class EffectsCheck:
    state: EffectsState
    # Files neither at their before- nor at their after-hash.
    conflicts: tuple[str, ...] = ()
    # Why the effects cannot be compared at all ("" when they were): nobody is known to
    # have changed anything, and the wording must not say so.
    unknown: str = ""


# Why a call's effects cannot be checked, as a clause of a sentence.
NEVER_OBSERVED = (
    "which files it changed was never recorded (the daemon stopped, or the call was cut "
    "short, before its effects were observed)"
)
OUTSIDE_WORKSPACE = "it ran outside the workspace, where its effects are not watched"


def check_effects(
    previous: LedgerEntry, workspace: Path, hash_of: Callable[[Path], str]
) -> EffectsCheck:
    """Compare ``previous``'s recorded file effects with the workspace now."""
    if not previous.workspace:
        return EffectsCheck(EffectsState.CONFLICT, unknown=OUTSIDE_WORKSPACE)
    if not previous.effects_recorded:
        return EffectsCheck(EffectsState.CONFLICT, unknown=NEVER_OBSERVED)
    sent = [e for e in previous.network_effects if not e.refused and e.method not in READS]
    if sent:
        # What it sent elsewhere cannot be compared with the workspace.
        shown = ", ".join(f"{e.method} {e.host}:{e.port}{e.path}" for e in sent[:5])
        return EffectsCheck(
            EffectsState.CONFLICT, unknown=f"it sent requests the workspace cannot show ({shown})"
        )
    if not previous.file_effects:
        return EffectsCheck(EffectsState.AT_BEFORE)
    at_after = at_before = True
    conflicts = []
    for effect in previous.file_effects:
        if effect.path.endswith("/.git/") or effect.path == ".git/":
            # Git internals are not hashed: a write there cannot be checked.
            conflicts.append(effect.path)
            at_after = at_before = False
            continue
        now = hash_of(workspace / effect.path)
        if effect.kind is EffectKind.RENAMED:
            old = hash_of(workspace / effect.renamed_from)
            is_after = now == effect.after_hash and old == ""
            is_before = now == "" and old == effect.before_hash
        else:
            is_after = now == ("" if effect.kind is EffectKind.DELETED else effect.after_hash)
            is_before = now == effect.before_hash
        at_after &= is_after
        at_before &= is_before
        if not (is_after or is_before):
            conflicts.append(effect.path)
    if at_after:
        return EffectsCheck(EffectsState.ALREADY_APPLIED)
    if at_before:
        return EffectsCheck(EffectsState.AT_BEFORE)
    return EffectsCheck(EffectsState.CONFLICT, tuple(conflicts) or ("(a mix of old and new)",))


def resolve(
    previous: LedgerEntry,
    *,
    input_hash: str,
    rerun: bool,
    now: float,
    retention: float,
    hash_of: Callable[[Path], str],
    here: str = "",
) -> Decision:
    """:func:`decide`, with a CHECK settled against the workspace now (never CHECK).

    ``here`` is the deciding daemon's id: a CHECK of a call another daemon recorded is
    refused (:func:`elsewhere`), its workspace is not this host's."""
    decision = decide(previous, input_hash=input_hash, rerun=rerun, now=now, retention=retention)
    if decision.action is not Action.CHECK:
        return decision
    if previous.daemon_id and previous.daemon_id != here:
        return elsewhere(previous, here)
    check = check_effects(previous, Path(previous.workspace), hash_of)
    if check.state is EffectsState.CONFLICT:
        return Decision(
            Action.ASK, Code.CONFLICT, checked=True, conflicts=check.conflicts,
            unknown=check.unknown,
        )  # fmt: skip
    if check.state is EffectsState.ALREADY_APPLIED and previous.status is CallStatus.FAILED:
        why = "it failed, and its files are as it left them: Replay runs it again"
        return Decision(Action.RUN, content=why, checked=True)
    if check.state is EffectsState.ALREADY_APPLIED:
        return Decision(Action.ALREADY_APPLIED, Code.ALREADY_APPLIED, checked=True)
    why = "none of its recorded file effects is in place: Replay runs it again"
    return Decision(Action.RUN, content=why, checked=True)


def recovery_item(
    entry: LedgerEntry,
    *,
    now: float,
    retention: float,
    hash_of: Callable[[Path], str],
    here: str = "",
) -> RecoveryItem | None:
    """What ``shellward recover`` says of a step whose newest attempt is ``entry``
    (None: it ended cleanly, or before it started: nothing to recover)."""
    if entry.status is CallStatus.PENDING_APPROVAL:
        return RecoveryItem(entry, "ask", entry.content)
    if not entry.status.is_final:
        return RecoveryItem(entry, "wait", f"still {entry.status.value}; wait for it")
    decision = resolve(
        entry, input_hash=entry.input_hash, rerun=False, now=now, retention=retention,
        hash_of=hash_of, here=here,
    )  # fmt: skip
    if decision.action is Action.RETURN_RECORDED:
        return None
    if decision.action is Action.REFUSE:
        return RecoveryItem(entry, "refuse", decision.content)
    if decision.action is Action.ASK:
        if decision.unknown:
            return RecoveryItem(entry, "ask", f"not checkable: {decision.unknown}: ask a human")
        shown = ", ".join(decision.conflicts)
        return RecoveryItem(entry, "ask", f"changed since by someone else: {shown}: ask a human")
    if decision.action is Action.ALREADY_APPLIED:
        why = "its recorded file effects are all in place: Replay answers ALREADY_APPLIED"
        return RecoveryItem(entry, "check", why)
    if decision.checked:
        return RecoveryItem(entry, "check", decision.content)
    why = f"{entry.status.value} and {entry.idempotency.value}: Replay runs it again"
    return RecoveryItem(entry, "replay", why)
