"""One call's life cycle, written once: plan, record, start (durably), execute, finish.

Choices, and why
- **Kinds supply only what differs.** A command, a built-in file tool and a business
  (MCP) tool differ in how a request is checked and what it does; they share everything
  else. A :class:`Kind` turns a request into a :class:`Plan` (its entry, verdict, the work,
  whether it may write, and the approval sentence of a first run) or, for an approved call,
  its recorded entry back into an :class:`Execution`. The order of things is here alone.
- **A bracket.** :meth:`Lifecycle.run` takes the workspace (the write detector's window,
  exclusive for a call that may write) and the call's slot among the running calls in one
  ``ExitStack``: whatever fails after a step, each taken thing is released, in reverse
  order. Once the call is recorded it is always finished: a failure before ``started`` is a
  ``failed`` row (nothing ran); a failure of the work itself is ``uncertain`` (it may have
  run); a final record that fails is retried as ``uncertain`` without its output (what did
  not fit), so the answer and the row agree.
- **Started before the effect.** ``started`` is committed (fsync'd) before the work runs;
  if that commit fails, nothing ran and the answer says so.
- **One commit for a call that waits for nothing.** A new call whose workspace and running
  slot are free at once is recorded ``planned`` and ``started`` in one transaction, after
  both are taken (one fsync instead of two, the same history). A call that must wait (a
  busy or still indexing workspace) or was cancelled already takes the two-step path, so
  that it is visible while it waits; so does one whose combined commit fails (the planned
  row may still be written, and the failure with it), except for a busy ledger, which is
  answered at once as for the planned record: nothing recorded, nothing ran.
- **Errors are the daemon's tree.** A kind raises :class:`~shellwardd.errors.ShellwardError`
  for anything the caller can fix or wait out; before the record that is a ``failed`` row
  with the error's code and sentence. A busy or failing ledger before the record leaves
  here as :class:`~shellwardd.errors.LedgerError`: nothing was recorded, nothing ran.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from shellward.types import (
    CallStatus,
    Code,
    CommandResult,
    Idempotency,
    LedgerEntry,
    OutputChunk,
    ReplayPolicy,
    Verdict,
)
from shellwardd import outcomes, requests
from shellwardd.errors import (
    Interrupted,
    LedgerBusy,
    LedgerError,
    PermissionDenied,
    ShellwardError,
    Unavailable,
)
from shellwardd.ledger import Committed, KeyTaken, LedgerStore
from shellwardd.outcomes import reconcile, refusal, result_from_entry
from shellwardd.replay import Action, key_taken
from shellwardd.requests import ToolRequest
from shellwardd.staging import preview
from shellwardd.staging.area import StagedDirs, StagingError
from shellwardd.staging.stager import Settled, Stager
from shellwardd.watch import CallEffects, CallWatch, WorkspaceMonitor
from shellwardd.watch.detector import StagedView

log = logging.getLogger("shellwardd.calls")


class CallListener(Protocol):
    """Receives a call's events as they happen (the server streams them)."""

    def accepted(self, call_id: str, verdict: Verdict) -> None: ...

    def output(self, chunk: OutputChunk) -> None: ...


class Silent:
    """The listener of a call nobody streams (one run after its approval)."""

    def accepted(self, call_id: str, verdict: Verdict) -> None:
        pass

    def output(self, chunk: OutputChunk) -> None:
        pass


class CancelFlag(threading.Event):
    """A running call's cancel flag, and who set it (the call's final sentence says so)."""

    def __init__(self) -> None:
        super().__init__()
        self.why = ""

    def cancel(self, why: str) -> None:
        if not self.is_set():  # the first reason wins: it is what stopped the call
            self.why = why
            self.set()


# The effect itself: (the started entry, a cancel flag, the listener) → the final entry.
Work = Callable[[LedgerEntry, CancelFlag, CallListener], LedgerEntry]


@dataclass(frozen=True)
class Execution:
    """What a call does, and how it is watched."""

    work: Work
    exclusive: bool  # may write: runs alone in its workspace (inotify cannot tell writers apart)
    watch: bool = True  # False: the effect is outside any workspace (a business tool)
    # Writes into its own overlay, committed after the work (shellwardd.staging): runs
    # beside any other call, whatever ``exclusive`` says; only its commit is exclusive.
    staged: bool = False


@dataclass(frozen=True)
class Plan:
    """A new attempt, checked and ready to record."""

    entry: LedgerEntry  # where and how it runs (cwd, workspace, timeout, input_json, ...)
    verdict: Verdict
    execution: Execution
    # Non-empty: why a human must approve the first run (the model reads it, then how to ask).
    approval: str = ""


class Kind(Protocol):
    """What differs between a command, a file tool and a business tool."""

    def parse(self, input_json: str) -> Any:
        """The request recorded as ``input_json`` (for a replay)."""

    def input_hash(self, request: Any) -> str: ...

    def planned(self, call_id: str, input_hash: str, request: Any) -> LedgerEntry:
        """The entry before any check (what a refusal records)."""

    def plan(self, entry: LedgerEntry, request: Any) -> Plan:
        """Check the request and prepare its work; ShellwardError if it cannot run."""

    def resume(self, entry: LedgerEntry) -> Execution:
        """The work of a recorded (approved) call; ShellwardError if it cannot run now."""


class ToolRequests:
    """The request side the tool kinds share (a command has its own)."""

    def parse(self, input_json: str) -> ToolRequest:
        return requests.tool_from_json(input_json)

    def input_hash(self, request: ToolRequest) -> str:
        return requests.tool_input_hash(request)


def planned_entry(
    call_id: str,
    input_hash: str,
    request: Any,
    tool_name: str,
    command: str,
    verdict: Verdict | None = None,
) -> LedgerEntry:
    """A new attempt's entry before its checks: the strictest verdict unless one is known."""
    return LedgerEntry(
        call_id=call_id,
        run_id=request.run_id,
        step_id=request.step_id,
        tool_name=tool_name,
        input_hash=input_hash,
        status=CallStatus.PLANNED,
        idempotency=verdict.idempotency if verdict else Idempotency.NON_IDEMPOTENT,
        replay_policy=verdict.replay_policy if verdict else ReplayPolicy.NEVER,
        verdict=verdict,
        command=command,
        cwd=request.cwd,
        created_at=time.time(),
    )


class Tracker:
    """The calls in flight: each one's cancel flag, and a condition notified whenever a call
    reaches a final state (for WaitCall and the drain at shutdown)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.accepting = True
        self._running: dict[str, CancelFlag] = {}
        # Calls cancelled before they took their running slot, with who cancelled them.
        self._doomed: dict[str, str] = {}

    @property
    def count(self) -> int:
        with self.changed:
            return len(self._running)

    def check_accepting(self) -> None:
        if not self.accepting:
            raise Unavailable("the daemon is shutting down; retry once it is back")

    @contextlib.contextmanager
    def running(self, call_id: str) -> Iterator[CancelFlag]:
        cancel = CancelFlag()
        with self.changed:
            self._running[call_id] = cancel
            if call_id in self._doomed:
                cancel.cancel(self._doomed.pop(call_id))
        try:
            yield cancel
        finally:
            with self.changed:
                del self._running[call_id]
                self.changed.notify_all()

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def cancel(self, call_id: str, why: str) -> None:
        """Cancel a call: at once if it runs, else as soon as it would start (it then ends
        without starting: a call that waits for its workspace is cancelled too)."""
        with self.changed:
            flag = self._running.get(call_id)
            if flag is None:
                self._doomed[call_id] = why
            else:
                flag.cancel(why)

    def drain(self, grace_period: float) -> int:
        """Wait up to ``grace_period`` for running calls, then cancel the rest and wait for
        them to be recorded. Returns how many were cancelled."""
        deadline = time.monotonic() + grace_period
        with self.changed:
            while self._running and time.monotonic() < deadline:
                self.changed.wait(timeout=max(deadline - time.monotonic(), 0.01))
            cancelled = list(self._running.values())
            for cancel in cancelled:
                cancel.cancel("the daemon shut down")
            while self._running:
                self.changed.wait(timeout=1.0)
        return len(cancelled)


class _MustWait(Exception):
    """The workspace cannot take the call at once (busy, indexing, or failing)."""


class _Window:
    """A call's watch window on its workspace; closing it twice is a no-op."""

    def __init__(self, monitor: WorkspaceMonitor, watch: CallWatch) -> None:
        self._monitor = monitor
        self._watch: CallWatch | None = watch

    def close(self) -> CallEffects | None:
        watch, self._watch = self._watch, None
        return self._monitor.finish_call(watch) if watch is not None else None


class _Staged:
    """A staged call's view of its workspace and its overlay; :meth:`settle` commits it.
    Without a view it is an approved preview: :meth:`commit_preview` commits its result."""

    def __init__(
        self,
        stager: Stager,
        monitor: WorkspaceMonitor,
        view: StagedView | None,
        dirs: StagedDirs,
    ) -> None:
        self._stager = stager
        self._monitor = monitor
        self._view = view
        self._dirs = dirs
        self._settled = False
        # What the final write must do (see Settled), once settled.
        self.committed: Committed | None = None
        self.recorded = False

    @property
    def previewed(self) -> bool:
        return self._view is None

    def settle(self, final: LedgerEntry) -> LedgerEntry:
        self._settled = True  # whatever happens now, the commit journal or settle decides
        return self._keep(self._stager.settle(final, self._dirs, self._view, self._monitor))

    def commit_preview(self, started: LedgerEntry) -> LedgerEntry:
        final, effects = preview.load(self._dirs.root, started)
        final = replace(final, finished_at=time.time())
        return self._keep(self._stager.settle(final, self._dirs, None, self._monitor, effects))

    def _keep(self, settled: Settled) -> LedgerEntry:
        self.committed, self.recorded = settled.committed, settled.recorded
        return settled.entry

    def release(self) -> None:
        """Discard the overlay when no command ran in it (the call stopped before it
        started, or its first attempt to start fell back to the waiting path)."""
        if not self._settled and self._view is not None:
            self._stager.area.discard(self._dirs)


class Lifecycle:
    def __init__(
        self,
        ledger: LedgerStore,
        monitors: Mapping[Path, WorkspaceMonitor],
        tracker: Tracker,
        stager: Stager | None = None,
    ) -> None:
        self._ledger = ledger
        self._monitors = monitors
        self._tracker = tracker
        self._stager = stager

    def attempt(
        self,
        kind: Kind,
        call_id: str,
        input_hash: str,
        request: Any,
        listener: CallListener,
        approval: tuple[Code, str] | None = None,
    ) -> CommandResult:
        """A new attempt: check, record; then run, or wait for a human when ``approval``
        (code, sentence) says so or the kind asks for a first-run approval."""
        entry = kind.planned(call_id, input_hash, request)
        try:
            self._tracker.check_accepting()
            plan = kind.plan(entry, request)
        except ShellwardError as exc:
            refused = outcomes.not_started(entry, exc, time.time())
            self._ledger.record(refused, f"refused before start: {exc.code.value}")
            log.info("call refused", extra={"call_id": call_id, "code": exc.code.value})
            return result_from_entry(refused)
        verdict = plan.verdict
        entry = replace(
            plan.entry, verdict=verdict, idempotency=verdict.idempotency,
            replay_policy=verdict.replay_policy,
        )  # fmt: skip
        first_run = approval is None and bool(plan.approval)
        if approval is None and plan.approval:
            approval = (Code.NEEDS_APPROVAL, outcomes.ask_approval(call_id, plan.approval))
        if approval is not None:
            code, content = approval
            entry = replace(entry, status=CallStatus.PENDING_APPROVAL, code=code, content=content)
            taken = self._record_new(entry, f"waits for a human: {code.value}")
            if taken is not None:
                return taken
            listener.accepted(call_id, verdict)
            if first_run and plan.execution.staged and not entry.network_granted:
                entry = self._preview(entry, plan.execution)
            return result_from_entry(entry)
        return self._run_new(entry, verdict, plan.execution, listener)

    def _preview(self, entry: LedgerEntry, execution: Execution) -> LedgerEntry:
        """Run a call waiting for its first approval staged (staging/preview.py) and put its
        file changes in the pending sentence; the entry unchanged when no preview can run."""
        monitor = self._monitors.get(Path(entry.workspace))
        if self._stager is None or monitor is None:
            return entry
        try:
            view = monitor.begin_staged(timeout=entry.timeout_seconds)
        except (TimeoutError, ShellwardError):
            return entry
        try:
            dirs = self._stager.area.create(
                entry.call_id, Path(entry.workspace), self._stager.sandbox_owner
            )
            with self._tracker.running(entry.call_id) as cancel:
                final = execution.work(entry, cancel, Silent())
            diff = self._stager.preview(final, dirs, view)
        except Exception:
            log.exception("the preview failed", extra={"call_id": entry.call_id})
            self.discard_preview(entry.call_id)
            return entry
        finally:
            view.close()
        if diff is None:
            return entry
        content = outcomes.previewed(entry.content, diff)
        if not self._ledger.annotate_pending(entry.call_id, content, "previewed: writes staged"):
            return entry
        return replace(entry, content=content)

    def discard_preview(self, call_id: str) -> None:
        """Remove what a preview staged (its approval was denied)."""
        if self._stager is not None:
            self._stager.area.discard(self._stager.area.dirs(call_id))

    def _record_new(self, entry: LedgerEntry, detail: str) -> CommandResult | None:
        """Record a new attempt; the answer instead when its business idempotency key
        belongs to another step (that step's result, or why nothing ran): nothing is
        recorded and nothing runs."""
        try:
            self._ledger.record(entry, detail)
        except KeyTaken as taken:
            return self._key_taken(entry, taken)
        return None

    def _key_taken(self, entry: LedgerEntry, taken: KeyTaken) -> CommandResult:
        log.info("business key taken", extra={"call_id": entry.call_id,
                                              "holder": taken.holder.call_id})  # fmt: skip
        decision = key_taken(taken.key, taken.holder)
        if decision.action is Action.RETURN_RECORDED:
            return result_from_entry(taken.holder, replayed=True)
        holder = taken.holder
        return refusal(decision, holder.call_id, (holder.run_id, holder.step_id), holder)

    def _run_new(
        self, entry: LedgerEntry, verdict: Verdict, execution: Execution, listener: CallListener
    ) -> CommandResult:
        """A new call: recorded and started in one commit when nothing is in its way, else
        recorded, then :meth:`run` (which waits, and records whatever stops it)."""
        cancelled: str | None = None
        with contextlib.ExitStack() as taken:
            try:
                window, free = self._open_window(entry, execution, taken, wait=False), True
            except (_MustWait, ShellwardError):
                window, free = None, False  # the two-step path waits, or records why not
            if free:
                cancel = taken.enter_context(self._tracker.running(entry.call_id))
                if cancel.is_set():
                    cancelled = cancel.why
                else:
                    started_at = time.time()
                    try:
                        self._ledger.record_started(entry, started_at)
                    except KeyTaken as exc:
                        return self._key_taken(entry, exc)
                    except LedgerBusy:
                        raise  # as for the planned record: nothing recorded, nothing ran
                    except LedgerError:
                        pass  # the two-step path records the call, or says it cannot
                    else:
                        listener.accepted(entry.call_id, verdict)
                        started = replace(entry, status=CallStatus.STARTED, started_at=started_at)
                        final = self._execute(execution, started, cancel, listener, window)
                        return self._finish(final, window)
        if cancelled is not None:  # taking the slot consumed the cancel: run() ends the call
            self._tracker.cancel(entry.call_id, cancelled)
        refused = self._record_new(entry, "")
        if refused is not None:
            return refused
        listener.accepted(entry.call_id, verdict)
        return self.run(entry, execution, listener)

    def resume(self, kind: Kind, entry: LedgerEntry) -> CommandResult:
        """Run a recorded call a human approved."""
        try:
            execution = kind.resume(entry)
        except ShellwardError as exc:
            return self._not_started(entry, exc)
        return self.run(entry, execution, Silent())

    def run(
        self, entry: LedgerEntry, execution: Execution, listener: CallListener
    ) -> CommandResult:
        """The bracket: take the workspace and a running slot, record ``started``, do the
        work, record the end; release what was taken whatever happens."""
        with contextlib.ExitStack() as taken:
            try:
                window = self._open_window(entry, execution, taken)
                cancel = taken.enter_context(self._tracker.running(entry.call_id))
                if cancel.is_set():
                    raise Interrupted(f"The call was cancelled before it started ({cancel.why}).")
                started_at = time.time()
                self._ledger.mark_started(entry.call_id, started_at)
            except LedgerError as exc:
                return self._not_started(entry, Unavailable(outcomes.ledger_busy(exc.message)))
            except ShellwardError as exc:
                return self._not_started(entry, exc)
            started = replace(entry, status=CallStatus.STARTED, started_at=started_at)
            final = self._execute(execution, started, cancel, listener, window)
            return self._finish(final, window)

    def _open_window(
        self,
        entry: LedgerEntry,
        execution: Execution,
        taken: contextlib.ExitStack,
        wait: bool = True,
    ) -> _Window | _Staged | None:
        """The call's watch window or overlay (None: nothing to watch). ``wait=False``: only
        if the workspace is free now, else :class:`_MustWait`."""
        if not execution.watch:
            return None
        monitor = self._monitors.get(Path(entry.workspace))
        if monitor is None:
            raise PermissionDenied(
                f"{entry.workspace} is no longer one of the daemon's workspaces; nothing ran."
            )
        timeout = entry.timeout_seconds if wait else 0.0
        try:
            if execution.staged and self._stager is not None:
                if self._stager.has_preview(entry.call_id):  # approved: commit its result
                    dirs = self._stager.area.dirs(entry.call_id)
                    return _Staged(self._stager, monitor, None, dirs)
                view = monitor.begin_staged(timeout=timeout)
                taken.callback(view.close)
                dirs = self._stager.area.create(
                    entry.call_id, Path(entry.workspace), self._stager.sandbox_owner
                )
                staged = _Staged(self._stager, monitor, view, dirs)
                taken.callback(staged.release)
                return staged
            watch = monitor.begin_call(exclusive=execution.exclusive, timeout=timeout)
        except TimeoutError as exc:  # IndexNotReady too: still indexing
            if not wait:
                raise _MustWait from exc
            progress = monitor.progress()
            raise Unavailable(
                outcomes.workspace_busy(entry, progress.files_done, progress.files_total)
            ) from exc
        except ShellwardError as exc:  # WatchError: the index failed
            if not wait:
                raise _MustWait from exc
            log.error("workspace cannot be watched", extra={"call_id": entry.call_id,
                                                            "problem": exc.message})  # fmt: skip
            raise Unavailable(outcomes.unwatchable(entry, exc.message)) from exc
        except StagingError as exc:
            if not wait:
                raise _MustWait from exc
            raise Unavailable(outcomes.unstageable(entry, str(exc))) from exc
        window = _Window(monitor, watch)
        taken.callback(window.close)
        return window

    def _execute(
        self,
        execution: Execution,
        started: LedgerEntry,
        cancel: CancelFlag,
        listener: CallListener,
        window: _Window | _Staged | None,
    ) -> LedgerEntry:
        """Do the work and observe its effects; never raises."""
        if isinstance(window, _Staged) and window.previewed:
            try:
                return window.commit_preview(started)
            except Exception:
                log.exception("the preview's commit failed", extra={"call_id": started.call_id})
                return outcomes.commit_failed(outcomes.crashed(started, time.time()))
        try:
            final = execution.work(started, cancel, listener)
        except Exception:
            log.exception("a call's work failed", extra={"call_id": started.call_id})
            final = outcomes.crashed(started, time.time())
        if window is None:
            return final
        if isinstance(window, _Staged):
            try:
                return window.settle(final)
            except Exception:
                # The row may be committing: the next start-up finishes it from the journal.
                log.exception("the commit failed", extra={"call_id": started.call_id})
                return outcomes.commit_failed(final)
        try:
            effects = window.close()
        except Exception:
            log.exception("the write detector failed", extra={"call_id": started.call_id})
            note = "the write detector failed: the file effects are unknown"
            return replace(final, note="; ".join(filter(None, [final.note, note])))
        return reconcile(final, effects) if effects is not None else final

    def _finish(self, final: LedgerEntry, window: _Window | _Staged | None = None) -> CommandResult:
        # A committed staged call's final state is written by its commit (see Settled).
        staged = window if isinstance(window, _Staged) else None
        try:
            if staged is None or not staged.recorded:
                self._ledger.finish(final, committed=staged.committed if staged else None)
        except LedgerError as exc:
            log.error("final record failed", extra={"call_id": final.call_id,
                                                    "problem": exc.message})  # fmt: skip
            final = outcomes.unrecorded(final, exc.message)
            try:
                self._ledger.finish(final, "the final record failed")
            except LedgerError:
                # The row stays ``started``: the next start-up makes it uncertain, which
                # is what this answer says.
                log.exception("uncertain record failed too", extra={"call_id": final.call_id})
        started_at = final.started_at or final.created_at
        log.info(
            "call finished",
            extra={"call_id": final.call_id, "tool": final.tool_name,
                   "status": final.status.value, "code": final.code.value,
                   "exit_code": final.exit_code,
                   "duration": round((final.finished_at or started_at) - started_at, 3)},
        )  # fmt: skip
        return result_from_entry(final)

    def _not_started(self, entry: LedgerEntry, error: ShellwardError) -> CommandResult:
        """A recorded call that could not start: nothing ran."""
        final = outcomes.not_started(entry, error, time.time())
        self._ledger.finish(final, f"not started: {error.code.value}")
        self._tracker.notify()
        return result_from_entry(final)
