"""The daemon's calls, end to end: identity, claims, dispatch by kind, approvals, waiting
and draining.

The life cycle of one call (plan, record, start, execute, finish) is in
``shellwardd.calls.lifecycle``, and what differs per kind of call in its sibling modules;
the replay table is in ``replay.py``; the kind-neutral sentences the model reads in
``outcomes.py``. This module decides *which* call runs: a new step, a known step met by
the replay table, a call a human approved.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from shellward.types import (
    CallStatus,
    Code,
    CommandResult,
    LedgerEntry,
    RecoveryItem,
    ToolInfo,
    ToolServerStatus,
    Verdict,
    WorkspaceStatus,
)
from shellwardd import compensate, metrics, outcomes, requests
from shellwardd.builtin_tools import BUILTIN_TOOLS
from shellwardd.calls import (
    CallListener,
    CommandKind,
    FileToolKind,
    Kind,
    Lifecycle,
    McpToolKind,
    Silent,
    Tracker,
    UndoKind,
    undo,
)
from shellwardd.calls.command import Classify
from shellwardd.classifier.toolchains import NO_TOOLCHAINS, Toolchains
from shellwardd.config import Config
from shellwardd.errors import (
    InvalidArgument,
    LedgerError,
    NotFound,
    ShellwardError,
    Unavailable,
)
from shellwardd.ledger import LedgerStore
from shellwardd.outcomes import already_applied, conflict_content, refusal, result_from_entry
from shellwardd.replay import (
    Action,
    Decision,
    in_progress,
    mismatch,
    recovery_item,
    resolve,
    still_running,
)
from shellwardd.requests import TOOL_RUN_COMMAND, CommandRequest, ToolRequest
from shellwardd.sandbox import Sandbox
from shellwardd.sandbox.profile import sandbox_path
from shellwardd.staging.stager import Stager
from shellwardd.tools.registry import ToolRegistry
from shellwardd.undo import Collected, KeptCall, collect, images_needed
from shellwardd.watch import WorkspaceMonitor, content_hash

log = logging.getLogger("shellwardd.runtime")

MAX_WAIT_SECONDS = 600.0


# How long CancelCall waits for the killed call to be recorded (a kill takes milliseconds;
# the write detector's barrier after it, a little more).
CANCEL_WAIT_SECONDS = 30.0


class Runtime:
    def __init__(
        self,
        config: Config,
        ledger: LedgerStore,
        classify: Classify,
        sandbox: Sandbox,
        monitors: Mapping[Path, WorkspaceMonitor],
        registry: ToolRegistry | None = None,
        *,
        stager: Stager | None = None,
        toolchains: Toolchains = NO_TOOLCHAINS,
    ) -> None:
        self._config = config
        self._toolchains = toolchains
        self._sandbox = sandbox
        self._registry = registry
        self._ledger = ledger
        self._monitors = monitors
        self._tracker = Tracker()
        self._lifecycle = Lifecycle(ledger, monitors, self._tracker, stager)
        self._commands = CommandKind(
            config, classify, sandbox, toolchains, stager.area if stager else None
        )
        # The dispatch table: tool name → kind; any other name is a business tool.
        file_tools = FileToolKind(config)
        self._kinds: dict[str, Kind] = {
            TOOL_RUN_COMMAND: self._commands,
            **{name: file_tools for name in BUILTIN_TOOLS},
        }
        self._business = McpToolKind(config, registry)
        self._undo = UndoKind(config, ledger.get, lambda: ledger.daemon_id)
        self._kinds[undo.TOOL_UNDO] = self._undo
        self._lock = threading.Lock()
        self._workers: set[threading.Thread] = set()
        # Approved calls this daemon started, kept for its life: an approval here and the
        # main loop's pick-up of calls approved elsewhere (a list read before the call
        # started may be stale) must never start one twice.
        self._resumed: set[str] = set()
        self._lease_renewed = time.monotonic()  # main.Daemon renews it at start-up

    def _kind(self, tool_name: str) -> Kind:
        return self._kinds.get(tool_name, self._business)

    # --- queries -------------------------------------------------------------------

    @property
    def running_count(self) -> int:
        return self._tracker.count

    def workspace_status(self) -> tuple[WorkspaceStatus, ...]:
        statuses = []
        for root, monitor in self._monitors.items():
            progress = monitor.progress()
            toolchains = self._toolchains.for_workspace(str(root))
            statuses.append(
                WorkspaceStatus(
                    str(root),
                    progress.state,
                    progress.files_done,
                    progress.files_total,
                    progress.note,
                    path=sandbox_path(t.path for t in toolchains),
                    path_notes=self._toolchains.notes(str(root), self._sandbox.reaches),
                )
            )
        return tuple(statuses)

    def tool_servers(self) -> tuple[ToolServerStatus, ...]:
        if self._registry is None:
            return ()
        return tuple(
            ToolServerStatus(name, **asdict(status))
            for name, status in sorted(self._registry.status().items())
        )

    def classify(self, command: str, cwd: str = "") -> Verdict:
        requests.check_command(command)
        workspace, resolved_cwd = requests.resolve_cwd(self._config, cwd)
        return self._commands.classify(command, resolved_cwd, workspace)

    def get_call(self, call_id: str = "", run_id: str = "", step_id: str = "") -> LedgerEntry:
        if call_id:
            entry = self._ledger.get(call_id)
            if entry is None:
                raise NotFound(
                    f"no call {call_id!r} in the ledger; ListCalls lists the recent ones"
                )
            return entry
        if run_id and step_id:
            entry = self._ledger.latest_for_step(run_id, step_id)
            if entry is None:
                raise NotFound(f"no call for step {step_id!r} of run {run_id!r} in the ledger")
            return entry
        raise InvalidArgument("give a call_id, or both run_id and step_id")

    def show_call(self, call_id: str = "", run_id: str = "", step_id: str = "") -> LedgerEntry:
        """A call with its history (the ledger's transitions), for GetCall."""
        entry = self.get_call(call_id, run_id, step_id)
        return replace(entry, transitions=tuple(self._ledger.transitions(entry.call_id)))

    def list_calls(
        self, run_id: str = "", limit: int = 50, before: tuple[float, str] | None = None
    ) -> list[LedgerEntry]:
        """Newest first, at most ``limit``; ``before``: the page after that call."""
        return self._ledger.list(run_id=run_id, limit=limit, before=before)

    def tools(self) -> tuple[ToolInfo, ...]:
        return tuple(
            ToolInfo(
                name=tool.name,
                server="builtin",
                description=tool.description,
                idempotency=tool.verdict.idempotency,
                replay_policy=tool.verdict.replay_policy,
                reason=tool.verdict.reason,
                source="builtin",
                trust="builtin",
                input_schema_json=json.dumps(tool.input_schema, default=dict),
            )
            for tool in BUILTIN_TOOLS.values()
        ) + tuple(
            ToolInfo(
                name=tool.qualified_name,
                server=tool.server,
                description=tool.description,
                idempotency=tool.verdict.idempotency,
                replay_policy=tool.verdict.replay_policy,
                reason=tool.verdict.reason,
                source=tool.verdict.source.value,
                trust=tool.trust.value,
                needs_approval=tool.verdict.needs_approval,
                changed=tool.changed,
                input_schema_json=json.dumps(tool.input_schema, default=dict),
            )
            for tool in (self._registry.list() if self._registry else ())
        )

    def list_approvals(self) -> list[LedgerEntry]:
        return self._ledger.list(status=CallStatus.PENDING_APPROVAL, limit=1000)

    def wait_call(self, call_id: str, timeout: float) -> CommandResult:
        """The call's result once it is final; IN_PROGRESS if that takes over ``timeout``."""
        if timeout < 0 or timeout != timeout:
            raise InvalidArgument("timeout_seconds must be 0 (60 s) or positive")
        deadline = time.monotonic() + min(timeout or 60.0, MAX_WAIT_SECONDS)
        entry = self.get_call(call_id)
        with self._tracker.changed:
            while not entry.status.is_final:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    waiting = still_running(entry)
                    return refusal(waiting, call_id, (entry.run_id, entry.step_id), entry)
                self._tracker.changed.wait(min(remaining, 1.0))
                entry = self.get_call(call_id)
        return result_from_entry(entry)

    def cancel(self, call_id: str, why: str) -> LedgerEntry:
        """Kill a running call; it ends as the replay table says of a killed call (a call
        that may have written is uncertain). Returns its entry once recorded."""
        if not call_id:
            raise InvalidArgument("give the call_id of the running call to cancel")
        entry = self.get_call(call_id)
        if entry.status.is_final:
            raise InvalidArgument(
                f"call {call_id} is already {entry.status.value}; there is nothing to cancel"
            )
        if entry.status is CallStatus.PENDING_APPROVAL:
            raise InvalidArgument(
                f"call {call_id} has not started: it waits for approval; deny it instead "
                "(Approve with approve=false)"
            )
        self._tracker.cancel(call_id, why)
        self.wait_call(call_id, CANCEL_WAIT_SECONDS)
        return self.get_call(call_id)

    def recover(self, run_id: str) -> list[RecoveryItem]:
        """Every step of ``run_id`` that did not end cleanly, with its action and why."""
        if not run_id:
            raise InvalidArgument("give the run_id to recover")
        latest: dict[str, LedgerEntry] = {}
        for entry in self._ledger.list(run_id=run_id, limit=100_000):
            latest.setdefault(entry.step_id, entry)  # newest first: keep each step's newest
        items = []
        for entry in sorted(latest.values(), key=lambda e: e.created_at):
            item = recovery_item(
                entry, now=time.time(), retention=self._config.retention_seconds,
                hash_of=content_hash, here=self._ledger.daemon_id,
            )  # fmt: skip
            if item is not None:
                items.append(item)
        return items

    # --- running -------------------------------------------------------------------

    def run_command(self, request: CommandRequest, listener: CallListener) -> CommandResult:
        """Run one command (or answer from the ledger). Never raises for bad input."""
        request = replace(request, cwd=requests.canonical_cwd(self._config, request.cwd))
        result = self._call(self._commands, request, self._commands.input_hash(request), listener)
        metrics.observe_call("command", result)
        return result

    def call_tool(self, request: ToolRequest) -> CommandResult:
        """Call a built-in or business tool (or answer from the ledger). Never raises for
        bad input."""
        if request.tool == undo.TOOL_UNDO:
            refused = Decision(
                Action.REFUSE, Code.INVALID_ARGUMENT,
                "undo is not called as a tool: use the Undo RPC (shellward undo CALL_ID), "
                "which checks the call and keys the undo by it. Nothing ran.",
            )  # fmt: skip
            return refusal(refused, "", (request.run_id, request.step_id))
        kind = self._kind(request.tool)
        request = replace(request, cwd=requests.canonical_cwd(self._config, request.cwd))
        result = self._call(kind, request, kind.input_hash(request), Silent())
        metrics.observe_call("tool", result)
        return result

    def _call(
        self, kind: Kind, request: Any, input_hash: str, listener: CallListener
    ) -> CommandResult:
        """The identity part of every call: a new step runs; a known one meets the table."""
        call_id = str(uuid.uuid4())
        identity: tuple[str, str] | None = request.identity
        try:
            if identity is None:
                return self._lifecycle.attempt(kind, call_id, input_hash, request, listener)
            answer = self._claim(identity, call_id, input_hash)
            if answer is not None:
                return answer
            try:
                previous = self._ledger.latest_for_step(*identity)
                if previous is None:
                    return self._lifecycle.attempt(kind, call_id, input_hash, request, listener)
                return self._again(kind, previous, call_id, input_hash, request, listener)
            finally:
                self._release(identity, call_id)
        except LedgerError as exc:
            # Raised only where nothing ran (a started call is always finished).
            log.error("ledger unavailable", extra={"call_id": call_id, "problem": exc.message})
            busy = Decision(Action.REFUSE, Code.UNAVAILABLE, outcomes.ledger_busy(exc.message),
                            retryable=True)  # fmt: skip
            return refusal(busy, call_id, (request.run_id, request.step_id))
        except Exception:
            log.exception("internal error", extra={"call_id": call_id})
            internal = outcomes.internal_error(call_id, recorded=self._recorded(call_id))
            return refusal(internal, call_id, (request.run_id, request.step_id))

    def _recorded(self, call_id: str) -> bool:
        try:
            return self._ledger.get(call_id) is not None
        except LedgerError:
            return False

    def replay(
        self,
        call_id: str,
        run_id: str,
        step_id: str,
        rerun: bool,
        listener: CallListener,
    ) -> CommandResult:
        """Apply the replay table to a recorded call (its step's newest attempt)."""
        result = self._replay(self.get_call(call_id, run_id, step_id), rerun, listener)
        metrics.observe_call("replay", result)
        return result

    def _replay(self, previous: LedgerEntry, rerun: bool, listener: CallListener) -> CommandResult:
        if not previous.input_json:
            decision = Decision(
                Action.REFUSE, previous.code,
                f"Call {previous.call_id} was refused before it started ({previous.code.value}): "
                f"there is nothing to replay. {previous.content}",
            )  # fmt: skip
            return refusal(decision, previous.call_id, (previous.run_id, previous.step_id))
        kind = self._kind(previous.tool_name)
        request = replace(
            kind.parse(previous.input_json),
            run_id=previous.run_id, step_id=previous.step_id, rerun=rerun,
        )  # fmt: skip
        if request.identity is not None:
            return self._call(kind, request, previous.input_hash, listener)
        call_id = str(uuid.uuid4())
        return self._again(kind, previous, call_id, previous.input_hash, request, listener)

    def _claim(
        self, identity: tuple[str, str], call_id: str, input_hash: str
    ) -> CommandResult | None:
        """Take the identity for this request (None), or answer at once: another request
        for it is being decided or run right now, on this daemon or another of the fleet
        (the ledger's claims table decides)."""
        holder = self._ledger.claim(*identity, call_id, input_hash)
        if holder is None:
            return None
        held_call, held_hash = holder
        make = in_progress if held_hash == input_hash else mismatch
        return refusal(make(*identity, held_call), held_call, identity)

    def _release(self, identity: tuple[str, str], call_id: str) -> None:
        try:
            self._ledger.release(*identity, call_id)
        except LedgerError as exc:
            # The claim stays until this daemon restarts or its lease lapses: retries of
            # the step answer IN_PROGRESS meanwhile, which is safe.
            log.error("claim not released", extra={"call_id": call_id, "problem": exc.message})

    def _again(
        self,
        kind: Kind,
        previous: LedgerEntry,
        call_id: str,
        input_hash: str,
        request: Any,
        listener: CallListener,
    ) -> CommandResult:
        """A request for a step the ledger has seen: the replay table decides."""
        decision = resolve(
            previous, input_hash=input_hash, rerun=request.rerun, now=time.time(),
            retention=self._config.retention_seconds, hash_of=content_hash,
            here=self._ledger.daemon_id,
        )  # fmt: skip
        if decision.action is Action.RETURN_RECORDED:
            return result_from_entry(previous, replayed=True)
        if decision.action is Action.REFUSE:
            remedy = self._remedy(previous) if decision.code is Code.SIDE_EFFECT_UNCERTAIN else ""
            if remedy:
                decision = replace(decision, content=f"{decision.content} {remedy}")
            return refusal(
                decision, previous.call_id, (previous.run_id, previous.step_id), previous
            )
        if decision.action is Action.ALREADY_APPLIED:
            return already_applied(previous)
        approval = None
        if decision.action is Action.ASK:
            why = conflict_content(
                call_id, previous, decision.conflicts, decision.unknown, self._remedy(previous)
            )
            approval = (Code.CONFLICT, why)
        return self._lifecycle.attempt(kind, call_id, input_hash, request, listener, approval)

    # --- undo ----------------------------------------------------------------------

    def undo(self, call_id: str, cwd: str = "") -> CommandResult:
        """Put back the files ``call_id`` changed, as a ledgered call keyed by it: a second
        undo answers ALREADY_APPLIED. Refusals (conflict, another workspace, evicted
        images, ...) raise before anything is recorded."""
        if not call_id:
            raise InvalidArgument("give the call_id of the call whose file changes to undo")
        original = self.get_call(call_id)
        cwd = requests.canonical_cwd(self._config, cwd)
        done = self._ledger.latest_for_step(*undo.identity(original))
        if done is not None and done.status is CallStatus.SUCCEEDED:
            return replace(
                result_from_entry(done, replayed=True), code=Code.ALREADY_APPLIED,
                content=f"Call {original.call_id} was already undone by call {done.call_id}; "
                "nothing ran now.",
            )  # fmt: skip
        self._undo.check(original, cwd)
        request = undo.request_for(original, cwd)
        log.info("undoing", extra={"call_id": original.call_id})
        return self._call(self._undo, request, self._undo.input_hash(request), Silent())

    def undo_run(self, run_id: str, from_step: str, cwd: str = "") -> list[CommandResult]:
        """Undo the steps of ``run_id`` from its last back to ``from_step``, newest first,
        stopping at the first that cannot be undone (its refusal is the last result)."""
        if not run_id or not from_step:
            raise InvalidArgument("give the run_id and the step to undo back to (from_step)")
        latest: dict[str, LedgerEntry] = {}
        for entry in self._ledger.list(run_id=run_id, limit=100_000):
            latest.setdefault(entry.step_id, entry)  # newest first: each step's newest
        if from_step not in latest:
            raise NotFound(f"run {run_id!r} has no step {from_step!r} in the ledger")
        steps = sorted(latest.values(), key=lambda e: e.created_at)
        start = steps.index(latest[from_step])
        results: list[CommandResult] = []
        for entry in reversed(steps[start:]):
            if entry.step_id.startswith((undo.STEP_PREFIX, compensate.STEP_PREFIX)):
                continue  # the run's own undos and compensations are not undone again
            if entry.tool_name not in self._kinds or not entry.file_effects:
                continue  # business calls (compensate them) and calls that wrote nothing
            try:
                result = self.undo(entry.call_id, cwd)
            except ShellwardError as exc:
                result = refusal(
                    Decision(Action.REFUSE, exc.code, exc.message, retryable=exc.retryable),
                    entry.call_id, (entry.run_id, entry.step_id), entry,
                )  # fmt: skip
            results.append(result)
            if not result.ok:
                break
        return results

    def collect_undo_images(self) -> Collected:
        """Evict the before-images no kept call needs (past --retention, or the oldest
        calls' past --undo-max-bytes); at start-up and now and then from the main loop."""
        calls = [
            KeptCall(entry.created_at, images_needed(entry.file_effects))
            # Every daemon's calls: in a fleet, over-keeping is safe, under-keeping is not.
            for entry in self._ledger.list(limit=1_000_000)
            if entry.file_effects
        ]
        collected = collect(
            self._undo.blobs, calls, max_bytes=self._config.undo_max_bytes,
            retention=self._config.retention_seconds,
        )  # fmt: skip
        if collected.removed_blobs:  # a start-up with nothing to evict says nothing
            log.info("undo images collected", extra=asdict(collected))
        return collected

    # --- compensation --------------------------------------------------------------

    def compensate(self, call_id: str) -> CommandResult:
        """Run the compensation of a business tool call through the ledger, once: a second
        request answers the first one's result (``shellwardd.compensate``)."""
        if not call_id:
            raise InvalidArgument("give the call_id of the business tool call to compensate")
        original = self.get_call(call_id)
        if original.tool_name == TOOL_RUN_COMMAND or original.tool_name in BUILTIN_TOOLS:
            raise InvalidArgument(
                f"call {original.call_id} is {original.tool_name}: compensation is for business "
                "tools (MCP servers); its effects are files. Nothing was sent."
            )
        if self._registry is None:
            raise NotFound(
                f"call {original.call_id} used {original.tool_name}, but this daemon has no "
                "MCP servers configured (--tools-config), so nothing can compensate it"
            )
        tool = self._registry.resolve(original.tool_name)
        request = compensate.request_for(
            original, tool, now=time.time(), retention=self._config.retention_seconds
        )
        log.info("compensating", extra={"call_id": original.call_id, "tool": request.tool})
        return self._call(self._business, request, self._business.input_hash(request), Silent())

    def _remedy(self, previous: LedgerEntry) -> str:
        """The sentence naming ``previous``'s compensation, or "" when it has none."""
        if self._registry is None or previous.tool_name in self._kinds:
            return ""
        try:
            return compensate.hint(previous, self._registry.resolve(previous.tool_name))
        except ShellwardError:  # its server or tool is gone: nothing to offer
            return ""

    # --- approvals -----------------------------------------------------------------

    def approve(self, call_id: str, approve: bool, reason: str = "") -> LedgerEntry:
        """A human's answer to a pending call, given on any daemon of the fleet: an approved
        call starts now, in the background, on the daemon that recorded it (it holds the
        workspace): here, or on that daemon's next tick (:meth:`run_approved`)."""
        if not call_id:
            raise InvalidArgument("give the call_id of a call waiting for approval (ListApprovals)")
        entry = self.get_call(call_id)
        if entry.status is not CallStatus.PENDING_APPROVAL:
            raise InvalidArgument(
                f"call {call_id} is {entry.status.value}, not waiting for approval; ListApprovals "
                "lists the calls that are"
            )
        why = f": {reason}" if reason else ""
        if not approve:
            content = (
                f"A human denied this call{why}. Nothing ran. Do not retry it; ask the user "
                "what to do instead."
            )
            if not self._ledger.deny_pending(call_id, content, f"denied{why}"):
                raise _answered_already(call_id)
            self._lifecycle.discard_preview(call_id)
            self._tracker.notify()
            return self.get_call(call_id)
        mine = self._holds(entry)
        if mine and not self._tracker.accepting:
            raise Unavailable("the daemon is shutting down; approve the call once it is back")
        if not self._ledger.transition(
            call_id, CallStatus.PENDING_APPROVAL, CallStatus.APPROVED, f"approved{why}"
        ):
            raise _answered_already(call_id)
        approved = replace(entry, status=CallStatus.APPROVED)
        if mine:
            self._start_approved(approved)
        return approved

    def _holds(self, entry: LedgerEntry) -> bool:
        """Whether this daemon holds the call's workspace (it recorded the call)."""
        return entry.daemon_id in ("", self._ledger.daemon_id)

    def run_approved(self) -> None:
        """Start this daemon's calls that were approved on another daemon."""
        if not self._tracker.accepting:
            return
        mine = self._ledger.daemon_id
        for entry in self._ledger.list(status=CallStatus.APPROVED, daemon_id=mine, limit=100):
            self._start_approved(entry)

    def _start_approved(self, entry: LedgerEntry) -> None:
        with self._lock:
            if entry.call_id in self._resumed:
                return
            self._resumed.add(entry.call_id)
            worker = threading.Thread(
                target=self._run_approved, args=(entry,), name=f"approved-{entry.call_id}",
                daemon=True,
            )  # fmt: skip
            self._workers.add(worker)
        worker.start()

    def _run_approved(self, entry: LedgerEntry) -> None:
        try:
            result = self._lifecycle.resume(self._kind(entry.tool_name), entry)
            metrics.observe_call("command" if entry.tool_name == TOOL_RUN_COMMAND else "tool",
                                 result)  # fmt: skip
        except Exception:
            log.exception("approved call failed", extra={"call_id": entry.call_id})
        finally:
            with self._lock:
                self._workers.discard(threading.current_thread())

    def keep_lease(self) -> None:
        """Renew this daemon's lease once a third of it has passed (a renewal is a durable
        write: one a second would cost a lone SQLite daemon a disk flush a second); sweep
        the daemons whose lease lapsed (their running calls become uncertain for the fleet)."""
        if time.monotonic() - self._lease_renewed >= self._config.lease_seconds / 3:
            self._ledger.renew_lease(self._config.lease_seconds)
            self._lease_renewed = time.monotonic()
        swept = self._ledger.expire_leases(
            "its daemon stopped renewing its lease (it died, or lost the ledger)"
        )
        if swept:
            log.warning("calls of a lapsed daemon are now uncertain", extra={"call_ids": swept})
            self._tracker.notify()

    def expire_approvals(self) -> list[str]:
        """Pending calls older than the approval timeout are denied (nothing ran)."""
        timeout = self._config.approval_timeout
        expired = self._ledger.expire_pending(
            time.time() - timeout,
            f"No human answered within {timeout:g}s, so the call was denied. Nothing ran. "
            "Ask the user before trying again.",
        )
        for call_id in expired:
            self._lifecycle.discard_preview(call_id)
        if expired:
            log.info("approvals expired", extra={"call_ids": expired})
            self._tracker.notify()
        return expired

    # --- shutdown ------------------------------------------------------------------

    def stop_accepting(self) -> None:
        self._tracker.accepting = False

    def drain(self, grace_period: float) -> int:
        """Wait up to ``grace_period`` for running calls, then kill the rest.

        Returns how many calls were killed; they end ``uncertain``.
        """
        killed = self._tracker.drain(grace_period)
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(timeout=5.0)
        return killed


def _answered_already(call_id: str) -> InvalidArgument:
    return InvalidArgument(
        f"call {call_id} is no longer waiting for approval: another answer came first; "
        f"GetCall {call_id} shows it"
    )
