"""One call, end to end: validate, identify, classify, record, run, record, answer.

The runtime is where the mechanisms meet (DESIGN.md, One call, end to end); each of them
(classifier, ledger, sandbox) is passed in, so this module holds the order of things and
the sentences the model reads, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from shellward.types import (
    CallStatus,
    Code,
    CommandResult,
    Idempotency,
    LedgerEntry,
    OutputChunk,
    ReplayPolicy,
    Verdict,
    WorkspaceStatus,
)
from shellwardd.config import MAX_COMMAND_BYTES, Config, Limits
from shellwardd.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ShellwardError,
    Unavailable,
)
from shellwardd.ledger import Ledger
from shellwardd.replay import Action, Decision, decide, in_progress, mismatch
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from shellwardd.watch import CallEffects, WorkspaceMonitor
from shellwardd.watch.paths import COOKIE_DIR

log = logging.getLogger("shellwardd.runtime")

TOOL_RUN_COMMAND = "run_command"
MAX_ENV_ENTRIES = 256


@dataclass(frozen=True)
class CommandRequest:
    command: str
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 0.0
    run_id: str = ""
    step_id: str = ""
    network: bool = False
    rerun: bool = False
    limits: Limits | None = None


class CallListener(Protocol):
    """Receives a call's events as they happen (the server streams them)."""

    def accepted(self, call_id: str, verdict: Verdict) -> None: ...

    def output(self, chunk: OutputChunk) -> None: ...


Classify = Callable[[str, str | None, str | None], Verdict]


class Runtime:
    def __init__(
        self,
        config: Config,
        ledger: Ledger,
        classify: Classify,
        sandbox: Sandbox,
        monitors: Mapping[Path, WorkspaceMonitor],
    ) -> None:
        self._config = config
        self._ledger = ledger
        self._classify = classify
        self._sandbox = sandbox
        self._monitors = monitors
        self._lock = threading.Lock()
        # (run_id, step_id) → (call_id, input_hash) of the call being decided or run.
        self._claimed: dict[tuple[str, str], tuple[str, str]] = {}
        self._running: dict[str, threading.Event] = {}
        self._idle = threading.Condition(self._lock)
        self._accepting = True

    # --- queries -------------------------------------------------------------------

    @property
    def running_count(self) -> int:
        with self._lock:
            return len(self._running)

    def workspace_status(self) -> tuple[WorkspaceStatus, ...]:
        statuses = []
        for root, monitor in self._monitors.items():
            progress = monitor.progress()
            statuses.append(
                WorkspaceStatus(
                    str(root),
                    progress.state,
                    progress.files_done,
                    progress.files_total,
                    progress.note,
                )
            )
        return tuple(statuses)

    def classify(self, command: str, cwd: str = "") -> Verdict:
        _check_command(command)
        workspace, resolved_cwd = self._resolve_cwd(cwd)
        return self._classify_or_invalid(command, str(resolved_cwd), str(workspace))

    def get_call(self, call_id: str = "", run_id: str = "", step_id: str = "") -> LedgerEntry:
        if call_id:
            entry = self._ledger.get(call_id)
            if entry is None:
                raise NotFound(
                    f"no call {call_id!r} in the ledger; list recent calls with `shellward ledger`"
                )
            return entry
        if run_id and step_id:
            entry = self._ledger.latest_for_step(run_id, step_id)
            if entry is None:
                raise NotFound(f"no call for step {step_id!r} of run {run_id!r} in the ledger")
            return entry
        raise InvalidArgument("give a call_id, or both run_id and step_id")

    def list_calls(self, run_id: str = "", limit: int = 50) -> list[LedgerEntry]:
        return self._ledger.list(run_id=run_id, limit=max(1, min(limit or 50, 1000)))

    # --- running -------------------------------------------------------------------

    def run_command(self, request: CommandRequest, listener: CallListener) -> CommandResult:
        """Run one command (or answer from the ledger). Never raises for bad input."""
        call_id = str(uuid.uuid4())
        input_hash = _input_hash(request)
        identity = (request.run_id, request.step_id) if request.run_id and request.step_id else None
        try:
            if identity is not None:
                early = self._claim(identity, call_id, input_hash, request.rerun)
                if early is not None:
                    return early
            try:
                return self._run_new(call_id, input_hash, request, listener)
            finally:
                if identity is not None:
                    with self._lock:
                        self._claimed.pop(identity, None)
        except Exception:
            log.exception("internal error", extra={"call_id": call_id})
            internal = Decision(
                Action.REFUSE, Code.INTERNAL,
                "shellward hit an internal error; the daemon log has the details. Check "
                f"`shellward show {call_id}` before retrying.",
            )  # fmt: skip
            return _refusal(internal, call_id, (request.run_id, request.step_id))

    def _claim(
        self, identity: tuple[str, str], call_id: str, input_hash: str, rerun: bool
    ) -> CommandResult | None:
        """Take the identity for this call (None: go on and run), or answer at once."""
        with self._lock:
            holder = self._claimed.get(identity)
            if holder is None:
                self._claimed[identity] = (call_id, input_hash)
        if holder is not None:
            # Another request for this identity is being decided or run right now.
            held_call, held_hash = holder
            make = in_progress if held_hash == input_hash else mismatch
            return _refusal(make(*identity, held_call), held_call, identity)
        previous = self._ledger.latest_for_step(*identity)
        if previous is None:
            return None
        decision = decide(previous, input_hash=input_hash, rerun=rerun)
        if decision.action is Action.RUN:
            return None
        with self._lock:
            del self._claimed[identity]
        if decision.action is Action.RETURN_RECORDED:
            return _result_from_entry(previous, replayed=True)
        return _refusal(decision, previous.call_id, identity, previous)

    def _run_new(
        self, call_id: str, input_hash: str, request: CommandRequest, listener: CallListener
    ) -> CommandResult:
        now = time.time()
        base = LedgerEntry(
            call_id=call_id,
            run_id=request.run_id,
            step_id=request.step_id,
            tool_name=TOOL_RUN_COMMAND,
            input_hash=input_hash,
            status=CallStatus.PLANNED,
            idempotency=Idempotency.NON_IDEMPOTENT,
            replay_policy=ReplayPolicy.NEVER,
            command=_printable(request.command),
            cwd=request.cwd,
            created_at=now,
        )
        try:
            if not self._accepting:
                raise Unavailable("the daemon is shutting down; retry once it is back")
            timeout = self._timeout(request.timeout_seconds)
            _check_command(request.command)
            _check_env(request.env)
            workspace, cwd = self._resolve_cwd(request.cwd)
            verdict = self._classify_or_invalid(request.command, str(cwd), str(workspace))
        except ShellwardError as exc:
            return self._fail_before_start(base, exc.code, exc.message)

        network = request.network or verdict.needs_network
        entry = replace(
            base,
            cwd=str(cwd),
            workspace=str(workspace),
            idempotency=verdict.idempotency,
            replay_policy=verdict.replay_policy,
            verdict=verdict,
            network_granted=network,
            timeout_seconds=timeout,
        )
        if verdict.needs_approval:
            entry = replace(
                entry,
                status=CallStatus.PENDING_APPROVAL,
                code=Code.NEEDS_APPROVAL,
                content=f"This command needs a human's approval before its first run "
                f"({verdict.reason}). Ask the user to approve call {call_id}.",
            )
            self._ledger.record(entry, "first run needs approval")
            listener.accepted(call_id, verdict)
            return _result_from_entry(entry)

        self._ledger.record(entry)
        listener.accepted(call_id, verdict)
        monitor = self._monitors[workspace]
        # Calls that may write run alone in their workspace: inotify cannot tell two
        # writers apart. Read-only calls share it.
        try:
            watch = monitor.begin_call(
                exclusive=verdict.idempotency is not Idempotency.IDEMPOTENT, timeout=timeout
            )
        except TimeoutError:
            progress = monitor.progress()
            return self._fail_planned(
                entry, Code.UNAVAILABLE,
                f"The workspace was busy (indexing: {progress.files_done:,} / "
                f"{progress.files_total:,} files, or another writing call) for the whole "
                f"timeout of {timeout:g}s; nothing ran. Retry in a moment.",
            )  # fmt: skip
        cancel = threading.Event()
        with self._lock:
            self._running[call_id] = cancel
        try:
            started_at = time.time()
            self._ledger.mark_started(call_id, started_at)
            entry = replace(entry, status=CallStatus.STARTED, started_at=started_at)
            spec = SandboxSpec(
                command=request.command,
                workspace=workspace,
                cwd=cwd,
                env={**request.env, "SHELLWARD_CALL_ID": call_id},
                network=network,
                timeout=timeout,
                limits=request.limits or self._config.limits,
                output_cap=self._config.output_cap_bytes,
                hidden=(self._config.state_dir, self._config.socket.parent),
                read_only=(workspace / COOKIE_DIR,),
            )
            try:
                outcome = self._sandbox.run(spec, listener.output, cancel)
            finally:
                effects = monitor.finish_call(watch)
            final = _reconcile(_finish(entry, outcome, time.time()), effects)
            self._ledger.finish(final)
        finally:
            with self._lock:
                del self._running[call_id]
                self._idle.notify_all()
        log.info(
            "call finished",
            extra={"call_id": call_id, "status": final.status.value, "code": final.code.value,
                   "exit_code": final.exit_code, "duration": round(outcome.duration, 3)},
        )  # fmt: skip
        return _result_from_entry(final)

    def _fail_planned(self, entry: LedgerEntry, code: Code, message: str) -> CommandResult:
        """A planned call that could not start: nothing ran."""
        final = replace(
            entry, status=CallStatus.FAILED, code=code, content=message, finished_at=time.time()
        )
        self._ledger.finish(final, f"not started: {code.value}")
        return _result_from_entry(final)

    def _fail_before_start(self, entry: LedgerEntry, code: Code, message: str) -> CommandResult:
        final = replace(
            entry, status=CallStatus.FAILED, code=code, content=message, finished_at=time.time()
        )
        self._ledger.record(final, f"refused before start: {code.value}")
        log.info("call refused", extra={"call_id": entry.call_id, "code": code.value})
        return _result_from_entry(final)

    # --- shutdown ------------------------------------------------------------------

    def stop_accepting(self) -> None:
        self._accepting = False

    def drain(self, grace_period: float) -> int:
        """Wait up to ``grace_period`` for running calls, then kill the rest.

        Returns how many calls were killed; they end ``uncertain``.
        """
        deadline = time.monotonic() + grace_period
        with self._lock:
            while self._running and time.monotonic() < deadline:
                self._idle.wait(timeout=max(deadline - time.monotonic(), 0.01))
            killed = list(self._running.values())
            for cancel in killed:
                cancel.set()
            while self._running:
                self._idle.wait(timeout=1.0)
        return len(killed)

    # --- validation ----------------------------------------------------------------

    def _timeout(self, requested: float) -> float:
        if requested != requested or requested < 0:  # NaN or negative
            raise InvalidArgument(
                f"timeout_seconds must be 0 (the default, {self._config.default_timeout:g}s) "
                f"or positive; got {requested}"
            )
        if requested > self._config.max_timeout:
            raise InvalidArgument(
                f"timeout_seconds {requested:g} is over the daemon's limit of "
                f"{self._config.max_timeout:g}s; ask for less, or raise --max-timeout"
            )
        return requested or self._config.default_timeout

    def _resolve_cwd(self, cwd: str) -> tuple[Path, Path]:
        """The workspace containing ``cwd`` and the resolved cwd itself."""
        if not cwd:
            workspace = self._config.workspaces[0]
            return workspace, workspace
        if "\0" in cwd:
            raise InvalidArgument("cwd contains a NUL byte")
        path = Path(cwd)
        if not path.is_absolute():
            raise InvalidArgument(f"cwd {cwd!r} must be an absolute path")
        resolved = Path(os.path.realpath(path))
        for workspace in self._config.workspaces:
            if resolved == workspace or workspace in resolved.parents:
                if not resolved.is_dir():
                    raise InvalidArgument(f"cwd {cwd!r} does not exist or is not a directory")
                return workspace, resolved
        roots = ", ".join(str(w) for w in self._config.workspaces)
        raise PermissionDenied(
            f"cwd {cwd!r} is outside the daemon's workspaces ({roots}); run the command from "
            "inside one, or start the daemon with --workspace for that directory"
        )

    def _classify_or_invalid(self, command: str, cwd: str, workspace: str) -> Verdict:
        try:
            return self._classify(command, cwd, workspace)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from exc


# --- helpers ---------------------------------------------------------------------


def _check_command(command: str) -> None:
    if not command.strip():
        raise InvalidArgument("the command is empty; send the shell command line to run")
    if "\0" in command:
        raise InvalidArgument("the command contains a NUL byte, which no shell can run; remove it")
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        raise InvalidArgument(
            f"the command is {size} bytes, over the limit of {MAX_COMMAND_BYTES}; write long "
            "scripts to a file in the workspace and run that file instead"
        )


def _check_env(env: Mapping[str, str]) -> None:
    if len(env) > MAX_ENV_ENTRIES:
        raise InvalidArgument(f"env has {len(env)} entries; at most {MAX_ENV_ENTRIES} are allowed")
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InvalidArgument(
                f"env entry {key!r} is invalid: names must be non-empty without '=' or NUL, "
                "values without NUL"
            )


def _printable(command: str) -> str:
    """What the ledger keeps of a command: NULs made visible, capped at the size limit."""
    return command.replace("\0", "\\0")[:MAX_COMMAND_BYTES]


def _input_hash(request: CommandRequest) -> str:
    """Identity of the input: what the command is and where it runs, not how long it may take."""
    canonical = json.dumps(
        {
            "tool": TOOL_RUN_COMMAND,
            "command": request.command,
            "cwd": request.cwd,
            "env": sorted(request.env.items()),
            "network": request.network,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest}"


def _finish(entry: LedgerEntry, outcome: ProcessOutcome, now: float) -> LedgerEntry:
    """The final ledger entry for a call that was started: status, code and sentence."""
    known_idempotent = entry.idempotency is Idempotency.IDEMPOTENT
    common = {
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


def _reconcile(entry: LedgerEntry, observed: CallEffects) -> LedgerEntry:
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
        note="; ".join(filter(None, [entry.note, *notes])),
        **changes,  # type: ignore[arg-type]
    )


def _retryable(entry: LedgerEntry) -> bool:
    """May the agent simply send this call again?"""
    if entry.status is CallStatus.SUCCEEDED:
        return False
    if entry.started_at is None:
        # Nothing ran: retrying the same input only helps where the cause was transient.
        return entry.code in (Code.IN_PROGRESS, Code.INTERRUPTED)
    return entry.replay_policy is ReplayPolicy.AUTO


def _result_from_entry(entry: LedgerEntry, *, replayed: bool = False) -> CommandResult:
    content = entry.content
    if replayed:
        content = f"Recorded result of call {entry.call_id}, replayed: nothing ran now. {content}"
    return CommandResult(
        ok=entry.status is CallStatus.SUCCEEDED,
        code=entry.code,
        content=content,
        call_id=entry.call_id,
        retryable=_retryable(entry),
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
    )


def _refusal(
    decision: Decision,
    call_id: str,
    identity: tuple[str, str],
    previous: LedgerEntry | None = None,
) -> CommandResult:
    """An answer that runs nothing; it names the call it is about, without its output."""
    return CommandResult(
        ok=False,
        code=decision.code,
        content=decision.content,
        call_id=call_id,
        retryable=decision.retryable,
        idempotency=previous.idempotency if previous else Idempotency.NON_IDEMPOTENT,
        replay_policy=previous.replay_policy if previous else ReplayPolicy.NEVER,
        status=previous.status if previous else CallStatus.FAILED,
        verdict=previous.verdict if previous else None,
        run_id=identity[0],
        step_id=identity[1],
    )
