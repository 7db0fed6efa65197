"""One call, end to end: validate, identify, classify, record, run, record, answer.

The runtime is where the mechanisms meet (DESIGN.md, One call, end to end); each of them
(classifier, ledger, sandbox, write detector) is passed in, so this module holds the order
of things: the replay table is in ``replay.py``, the sentences the model reads in
``outcomes.py``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from shellward.types import (
    CallStatus,
    Code,
    CommandResult,
    Idempotency,
    LedgerEntry,
    OutputChunk,
    RecoveryItem,
    ReplayPolicy,
    ToolInfo,
    Verdict,
    WorkspaceStatus,
)
from shellwardd import requests
from shellwardd.builtin_tools import BUILTIN_TOOLS, BuiltinTool, Prepared
from shellwardd.config import Config
from shellwardd.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ShellwardError,
    Unavailable,
)
from shellwardd.ledger import Ledger
from shellwardd.outcomes import (
    already_applied,
    captured,
    conflict_content,
    finished_entry,
    mcp_finished_entry,
    reconcile,
    refusal,
    result_from_entry,
)
from shellwardd.replay import (
    Action,
    Decision,
    EffectsState,
    check_effects,
    decide,
    in_progress,
    mismatch,
    still_running,
)
from shellwardd.requests import TOOL_RUN_COMMAND, CommandRequest, ToolRequest
from shellwardd.sandbox import Sandbox, SandboxSpec
from shellwardd.tools.registry import RegisteredTool, ToolRegistry
from shellwardd.watch import WorkspaceMonitor, content_hash
from shellwardd.watch.paths import COOKIE_DIR

log = logging.getLogger("shellwardd.runtime")

MAX_WAIT_SECONDS = 600.0


class CallListener(Protocol):
    """Receives a call's events as they happen (the server streams them)."""

    def accepted(self, call_id: str, verdict: Verdict) -> None: ...

    def output(self, chunk: OutputChunk) -> None: ...


class _Silent:
    """The listener of a call nobody streams (one run after its approval)."""

    def accepted(self, call_id: str, verdict: Verdict) -> None:
        pass

    def output(self, chunk: OutputChunk) -> None:
        pass


# (command, cwd, workspace, the request's env) → verdict
Classify = Callable[[str, str | None, str | None, Mapping[str, str]], Verdict]
AnyRequest = CommandRequest | ToolRequest
# Starts a new attempt: (call_id, input_hash, request, listener, approval) → result.
RunNew = Callable[..., CommandResult]


class Runtime:
    def __init__(
        self,
        config: Config,
        ledger: Ledger,
        classify: Classify,
        sandbox: Sandbox,
        monitors: Mapping[Path, WorkspaceMonitor],
        registry: ToolRegistry | None = None,
    ) -> None:
        self._config = config
        self._registry = registry
        self._ledger = ledger
        self._classify = classify
        self._sandbox = sandbox
        self._monitors = monitors
        self._lock = threading.Lock()
        # (run_id, step_id) → (call_id, input_hash) of the request being decided or run.
        self._claimed: dict[tuple[str, str], tuple[str, str]] = {}
        self._running: dict[str, threading.Event] = {}
        self._workers: set[threading.Thread] = set()
        # Notified whenever a call reaches a final state (for drain and WaitCall).
        self._changed = threading.Condition(self._lock)
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
        requests.check_command(command)
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
        with self._changed:
            while not entry.status.is_final:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    waiting = still_running(entry)
                    return refusal(waiting, call_id, (entry.run_id, entry.step_id), entry)
                self._changed.wait(min(remaining, 1.0))
                entry = self.get_call(call_id)
        return result_from_entry(entry)

    def recover(self, run_id: str) -> list[RecoveryItem]:
        """Every step of ``run_id`` that did not end cleanly, with its action and why."""
        if not run_id:
            raise InvalidArgument("give the run_id to recover")
        latest: dict[str, LedgerEntry] = {}
        for entry in self._ledger.list(run_id=run_id, limit=100_000):
            latest.setdefault(entry.step_id, entry)  # newest first: keep each step's newest
        items = []
        for entry in sorted(latest.values(), key=lambda e: e.created_at):
            item = self._recovery_item(entry)
            if item is not None:
                items.append(item)
        return items

    def _recovery_item(self, entry: LedgerEntry) -> RecoveryItem | None:
        if entry.status is CallStatus.PENDING_APPROVAL:
            return RecoveryItem(entry, "ask", entry.content)
        if not entry.status.is_final:
            return RecoveryItem(entry, "wait", f"still {entry.status.value}; wait for it")
        decision = decide(
            entry, input_hash=entry.input_hash, rerun=False, now=time.time(),
            retention=self._config.retention_seconds,
        )  # fmt: skip
        if decision.action is Action.RETURN_RECORDED:
            return None  # succeeded, or ended before it started: nothing to recover
        if decision.action is Action.RUN:
            return RecoveryItem(
                entry, "replay",
                f"{entry.status.value} and {entry.idempotency.value}: Replay runs it again",
            )  # fmt: skip
        if decision.action is Action.REFUSE:
            return RecoveryItem(entry, "refuse", decision.content)
        check = check_effects(entry, Path(entry.workspace), content_hash)
        if check.state is EffectsState.ALREADY_APPLIED and entry.status is CallStatus.FAILED:
            reason = "it failed, and its files are as it left them: Replay runs it again"
        elif check.state is EffectsState.ALREADY_APPLIED:
            reason = "its recorded file effects are all in place: Replay answers ALREADY_APPLIED"
        elif check.state is EffectsState.AT_BEFORE:
            reason = "none of its recorded file effects is in place: Replay runs it again"
        else:
            reason = f"changed since by someone else: {', '.join(check.conflicts)}: ask a human"
            return RecoveryItem(entry, "ask", reason)
        return RecoveryItem(entry, "check", reason)

    # --- running -------------------------------------------------------------------

    def run_command(self, request: CommandRequest, listener: CallListener) -> CommandResult:
        """Run one command (or answer from the ledger). Never raises for bad input."""
        return self._call(request, requests.input_hash(request), listener, self._run_new)

    def call_tool(self, request: ToolRequest) -> CommandResult:
        """Call a built-in tool (or answer from the ledger). Never raises for bad input."""
        return self._call(request, requests.tool_input_hash(request), _Silent(), self._run_tool_new)

    def _call(
        self, request: AnyRequest, input_hash: str, listener: CallListener, run_new: RunNew
    ) -> CommandResult:
        """The identity part of every call: a new step runs; a known one meets the table."""
        call_id = str(uuid.uuid4())
        identity = request.identity
        try:
            if identity is None:
                return run_new(call_id, input_hash, request, listener, None)
            answer = self._claim(identity, call_id, input_hash)
            if answer is not None:
                return answer
            try:
                previous = self._ledger.latest_for_step(*identity)
                if previous is None:
                    return run_new(call_id, input_hash, request, listener, None)
                return self._again(previous, call_id, input_hash, request, listener, run_new)
            finally:
                with self._lock:
                    self._claimed.pop(identity, None)
        except Exception:
            log.exception("internal error", extra={"call_id": call_id})
            internal = Decision(
                Action.REFUSE, Code.INTERNAL,
                "shellward hit an internal error; the daemon log has the details. Check "
                f"`shellward show {call_id}` before retrying.",
            )  # fmt: skip
            return refusal(internal, call_id, (request.run_id, request.step_id))

    def replay(
        self,
        call_id: str,
        run_id: str,
        step_id: str,
        rerun: bool,
        listener: CallListener,
    ) -> CommandResult:
        """Apply the replay table to a recorded call (its step's newest attempt)."""
        previous = self.get_call(call_id, run_id, step_id)
        if not previous.input_json:
            decision = Decision(
                Action.REFUSE, previous.code,
                f"Call {previous.call_id} was refused before it started ({previous.code.value}): "
                f"there is nothing to replay. {previous.content}",
            )  # fmt: skip
            return refusal(decision, previous.call_id, (previous.run_id, previous.step_id))
        run_new: RunNew
        if previous.tool_name == TOOL_RUN_COMMAND:
            request: AnyRequest = requests.from_json(previous.input_json)
            run_new = self._run_new
        else:
            request = requests.tool_from_json(previous.input_json)
            run_new = self._run_tool_new
        request = replace(request, run_id=previous.run_id, step_id=previous.step_id, rerun=rerun)
        if request.identity is not None:
            return self._call(request, previous.input_hash, listener, run_new)
        call_id = str(uuid.uuid4())
        return self._again(previous, call_id, previous.input_hash, request, listener, run_new)

    def _claim(
        self, identity: tuple[str, str], call_id: str, input_hash: str
    ) -> CommandResult | None:
        """Take the identity for this request (None), or answer at once: another request
        for it is being decided or run right now."""
        with self._lock:
            holder = self._claimed.get(identity)
            if holder is None:
                self._claimed[identity] = (call_id, input_hash)
                return None
        held_call, held_hash = holder
        make = in_progress if held_hash == input_hash else mismatch
        return refusal(make(*identity, held_call), held_call, identity)

    def _again(
        self,
        previous: LedgerEntry,
        call_id: str,
        input_hash: str,
        request: AnyRequest,
        listener: CallListener,
        run_new: RunNew,
    ) -> CommandResult:
        """A request for a step the ledger has seen: the replay table decides."""
        decision = decide(
            previous, input_hash=input_hash, rerun=request.rerun, now=time.time(),
            retention=self._config.retention_seconds,
        )  # fmt: skip
        if decision.action is Action.RETURN_RECORDED:
            return result_from_entry(previous, replayed=True)
        if decision.action is Action.REFUSE:
            return refusal(
                decision, previous.call_id, (previous.run_id, previous.step_id), previous
            )
        if decision.action is Action.CHECK:
            check = check_effects(previous, Path(previous.workspace), content_hash)
            if check.state is EffectsState.ALREADY_APPLIED and previous.status is not (
                CallStatus.FAILED
            ):
                return already_applied(previous)
            if check.state is EffectsState.CONFLICT:
                content = conflict_content(call_id, previous, check.conflicts)
                return run_new(call_id, input_hash, request, listener, (Code.CONFLICT, content))
        return run_new(call_id, input_hash, request, listener, None)

    def _run_new(
        self,
        call_id: str,
        input_hash: str,
        request: CommandRequest,
        listener: CallListener,
        approval: tuple[Code, str] | None = None,
    ) -> CommandResult:
        """A new attempt: validate, classify, record; then run, or wait for a human when
        ``approval`` (code, sentence) says so or the verdict needs a first-run approval."""
        base = _planned(call_id, input_hash, request, TOOL_RUN_COMMAND,
                        requests.printable(request.command))  # fmt: skip
        try:
            if not self._accepting:
                raise Unavailable("the daemon is shutting down; retry once it is back")
            timeout = self._timeout(request.timeout_seconds)
            requests.check_command(request.command)
            requests.check_env(request.env)
            workspace, cwd = self._resolve_cwd(request.cwd)
            verdict = self._classify_or_invalid(
                request.command, str(cwd), str(workspace), request.env
            )
        except ShellwardError as exc:
            return self._fail_before_start(base, exc.code, exc.message)

        entry = replace(
            base,
            cwd=str(cwd),
            workspace=str(workspace),
            idempotency=verdict.idempotency,
            replay_policy=verdict.replay_policy,
            verdict=verdict,
            network_granted=request.network or verdict.needs_network,
            timeout_seconds=timeout,
            input_json=requests.to_json(request),
        )
        if approval is None and verdict.needs_approval:
            approval = (
                Code.NEEDS_APPROVAL,
                f"This command needs a human's approval before its first run ({verdict.reason}). "
                f"Nothing ran yet. Ask the user to approve call {call_id} (shellward approve "
                f"{call_id}), then wait for it with WaitCall.",
            )
        if not self._record(entry, verdict, approval, listener):
            return result_from_entry(self._ledger.get(call_id) or entry)
        return self._execute(entry, request, listener)

    def _record(
        self,
        entry: LedgerEntry,
        verdict: Verdict,
        approval: tuple[Code, str] | None,
        listener: CallListener,
    ) -> bool:
        """Record a new call: planned (True: run it now) or waiting for a human (False)."""
        if approval is not None:
            code, content = approval
            entry = replace(entry, status=CallStatus.PENDING_APPROVAL, code=code, content=content)
            self._ledger.record(entry, f"waits for a human: {code.value}")
            listener.accepted(entry.call_id, verdict)
            return False
        self._ledger.record(entry)
        listener.accepted(entry.call_id, verdict)
        return True

    def _run_tool_new(
        self,
        call_id: str,
        input_hash: str,
        request: ToolRequest,
        listener: CallListener,
        approval: tuple[Code, str] | None = None,
    ) -> CommandResult:
        """A new attempt of a built-in tool: check and prepare its work, record, run."""
        tool = BUILTIN_TOOLS.get(request.tool)
        if tool is None and self._registry is not None:
            return self._run_mcp_new(call_id, input_hash, request, listener, approval)
        base = _planned(
            call_id, input_hash, request, request.tool,
            tool.summary(request.arguments) if tool else request.tool,
            tool.verdict if tool else None,
        )  # fmt: skip
        try:
            if not self._accepting:
                raise Unavailable("the daemon is shutting down; retry once it is back")
            if tool is None:
                known = ", ".join(sorted(BUILTIN_TOOLS))
                raise NotFound(
                    f"there is no tool {request.tool!r}; the tools are: {known} (business "
                    "tools come from MCP servers configured with --tools-config)"
                )
            timeout = self._timeout(request.timeout_seconds)
            workspace, cwd = self._resolve_cwd(request.cwd)
            prepared = tool.prepare(workspace, request.arguments)
        except ShellwardError as exc:
            return self._fail_before_start(base, exc.code, exc.message)
        entry = replace(
            base,
            cwd=str(cwd),
            workspace=str(workspace),
            idempotency=tool.verdict.idempotency,
            replay_policy=tool.verdict.replay_policy,
            verdict=tool.verdict,
            timeout_seconds=timeout,
            input_json=requests.tool_to_json(request),
        )
        if not self._record(entry, tool.verdict, approval, listener):
            return result_from_entry(self._ledger.get(call_id) or entry)
        return self._execute_tool(entry, tool, prepared)

    def _run_mcp_new(
        self,
        call_id: str,
        input_hash: str,
        request: ToolRequest,
        listener: CallListener,
        approval: tuple[Code, str] | None,
    ) -> CommandResult:
        """A new attempt of a business tool: resolve it, build its key, record, send."""
        assert self._registry is not None
        base = _planned(call_id, input_hash, request, request.tool, _mcp_summary(request))
        try:
            if not self._accepting:
                raise Unavailable("the daemon is shutting down; retry once it is back")
            tool = self._registry.resolve(request.tool)
            key = self._registry.key_for(
                tool, user=request.user or self._config.user, run_id=request.run_id,
                step_id=request.step_id, arguments=request.arguments,
            )  # fmt: skip
            # 0: the server's own deadline.
            timeout = self._timeout(request.timeout_seconds) if request.timeout_seconds else 0.0
        except ShellwardError as exc:
            return self._fail_before_start(base, exc.code, exc.message)
        verdict = Verdict(
            tool.verdict.idempotency,
            tool.verdict.replay_policy,
            f"{tool.qualified_name}: {tool.verdict.reason}",
            needs_approval=tool.verdict.needs_approval,
        )
        entry = replace(
            base,
            tool_name=tool.qualified_name,
            idempotency=verdict.idempotency,
            replay_policy=verdict.replay_policy,
            verdict=verdict,
            idempotency_key=key or "",
            network_granted=True,
            timeout_seconds=timeout,
            input_json=requests.tool_to_json(request),
        )
        if approval is None and verdict.needs_approval:
            approval = (
                Code.NEEDS_APPROVAL,
                f"{tool.qualified_name} needs a human's approval before it runs; nothing was "
                f"sent. Ask the user to approve call {call_id} (shellward approve {call_id}), "
                "then wait for it with WaitCall.",
            )
        if not self._record(entry, verdict, approval, listener):
            return result_from_entry(self._ledger.get(call_id) or entry)
        return self._execute_mcp(entry, tool, request.arguments, key)

    def _execute_mcp(
        self,
        entry: LedgerEntry,
        tool: RegisteredTool,
        arguments: Mapping[str, Any],
        key: str | None,
    ) -> CommandResult:
        registry = self._registry
        assert registry is not None

        def work(started: LedgerEntry, cancel: threading.Event) -> LedgerEntry:
            outcome = registry.call(
                tool.qualified_name, arguments, key=key, timeout=entry.timeout_seconds or None
            )
            return mcp_finished_entry(started, tool, outcome, key, time.time())

        return self._started(entry, False, work, watch=False)

    def _execute_tool(
        self, entry: LedgerEntry, tool: BuiltinTool, prepared: Prepared
    ) -> CommandResult:
        def work(started: LedgerEntry, cancel: threading.Event) -> LedgerEntry:
            try:
                answer = prepared()
            except ShellwardError as exc:
                return replace(started, status=CallStatus.FAILED, code=exc.code,
                               content=exc.message, finished_at=time.time())  # fmt: skip
            return replace(
                started,
                status=CallStatus.SUCCEEDED,
                code=Code.OK,
                content=answer.summary,
                stdout=captured(answer.data),
                output_json=json.dumps(answer.output, ensure_ascii=False),
                finished_at=time.time(),
            )

        return self._started(entry, tool.writes, work)

    def _execute(
        self, entry: LedgerEntry, request: CommandRequest, listener: CallListener
    ) -> CommandResult:
        """Run a planned or approved command in the sandbox."""

        def work(started: LedgerEntry, cancel: threading.Event) -> LedgerEntry:
            workspace = Path(started.workspace)
            spec = SandboxSpec(
                command=request.command,
                workspace=workspace,
                cwd=Path(started.cwd),
                env={**request.env, "SHELLWARD_CALL_ID": started.call_id},
                network=started.network_granted,
                timeout=started.timeout_seconds,
                limits=request.limits or self._config.limits,
                output_cap=self._config.output_cap_bytes,
                hidden=(self._config.state_dir, self._config.socket.parent),
                read_only=(workspace / COOKIE_DIR,),
                toolchains=self._config.toolchains,
            )
            outcome = self._sandbox.run(spec, listener.output, cancel)
            return finished_entry(started, outcome, time.time())

        return self._started(entry, entry.idempotency is not Idempotency.IDEMPOTENT, work)

    def _started(
        self,
        entry: LedgerEntry,
        writes: bool,
        work: Callable[[LedgerEntry, threading.Event], LedgerEntry],
        *,
        watch: bool = True,
    ) -> CommandResult:
        """Watch the workspace, record ``started`` (durable), do the work, record the end.

        ``watch=False`` for work outside any workspace (a business tool's service)."""
        monitor, watched = None, None
        if watch:
            monitor = self._monitors.get(Path(entry.workspace))
            if monitor is None:
                return self._fail_planned(
                    entry, Code.PERMISSION_DENIED,
                    f"{entry.workspace} is no longer one of the daemon's workspaces; nothing ran.",
                )  # fmt: skip
            # Calls that may write run alone in their workspace: inotify cannot tell two
            # writers apart. Read-only calls share it.
            try:
                watched = monitor.begin_call(exclusive=writes, timeout=entry.timeout_seconds)
            except TimeoutError:
                progress = monitor.progress()
                return self._fail_planned(
                    entry, Code.UNAVAILABLE,
                    f"The workspace was busy (indexing: {progress.files_done:,} / "
                    f"{progress.files_total:,} files, or another writing call) for the whole "
                    f"timeout of {entry.timeout_seconds:g}s; nothing ran. Retry in a moment.",
                )  # fmt: skip
        cancel = threading.Event()
        with self._lock:
            self._running[entry.call_id] = cancel
        try:
            started_at = time.time()
            self._ledger.mark_started(entry.call_id, started_at)
            started = replace(entry, status=CallStatus.STARTED, started_at=started_at)
            try:
                final = work(started, cancel)
            finally:
                # Always close the watch window, or the workspace stays locked.
                effects = monitor.finish_call(watched) if monitor and watched else None
            if effects is not None:
                final = reconcile(final, effects)
            self._ledger.finish(final)
        finally:
            with self._changed:
                del self._running[entry.call_id]
                self._changed.notify_all()
        log.info(
            "call finished",
            extra={"call_id": final.call_id, "tool": final.tool_name,
                   "status": final.status.value, "code": final.code.value,
                   "exit_code": final.exit_code,
                   "duration": round((final.finished_at or started_at) - started_at, 3)},
        )  # fmt: skip
        return result_from_entry(final)

    def _fail_planned(self, entry: LedgerEntry, code: Code, message: str) -> CommandResult:
        """A recorded call that could not start: nothing ran."""
        final = replace(
            entry, status=CallStatus.FAILED, code=code, content=message, finished_at=time.time()
        )
        self._finish(final, f"not started: {code.value}")
        return result_from_entry(final)

    def _fail_before_start(self, entry: LedgerEntry, code: Code, message: str) -> CommandResult:
        final = replace(
            entry, status=CallStatus.FAILED, code=code, content=message, finished_at=time.time()
        )
        self._ledger.record(final, f"refused before start: {code.value}")
        log.info("call refused", extra={"call_id": entry.call_id, "code": code.value})
        return result_from_entry(final)

    def _finish(self, entry: LedgerEntry, detail: str) -> None:
        self._ledger.finish(entry, detail)
        with self._changed:
            self._changed.notify_all()

    # --- approvals -----------------------------------------------------------------

    def approve(self, call_id: str, approve: bool, reason: str = "") -> LedgerEntry:
        """A human's answer to a pending call: approved calls start now, in the background."""
        entry = self.get_call(call_id)
        if entry.status is not CallStatus.PENDING_APPROVAL:
            raise InvalidArgument(
                f"call {call_id} is {entry.status.value}, not waiting for approval; see "
                "`shellward approvals` for the calls that are"
            )
        why = f": {reason}" if reason else ""
        if not approve:
            denied = replace(
                entry,
                status=CallStatus.DENIED,
                code=Code.PERMISSION_DENIED,
                content=f"A human denied this call{why}. Nothing ran. Do not retry it; ask the "
                "user what to do instead.",
                finished_at=time.time(),
            )
            self._finish(denied, f"denied{why}")
            return denied
        if not self._accepting:
            raise Unavailable("the daemon is shutting down; approve the call once it is back")
        self._ledger.transition(
            call_id, CallStatus.PENDING_APPROVAL, CallStatus.APPROVED, f"approved{why}"
        )
        approved = replace(entry, status=CallStatus.APPROVED)
        worker = threading.Thread(
            target=self._run_approved, args=(approved,), name=f"approved-{call_id}", daemon=True
        )
        with self._lock:
            self._workers.add(worker)
        worker.start()
        return approved

    def _run_approved(self, entry: LedgerEntry) -> None:
        try:
            if entry.tool_name == TOOL_RUN_COMMAND:
                self._execute(entry, requests.from_json(entry.input_json), _Silent())
            else:
                self._execute_approved_tool(entry)
        except Exception:
            log.exception("approved call failed", extra={"call_id": entry.call_id})
        finally:
            with self._lock:
                self._workers.discard(threading.current_thread())

    def _execute_approved_tool(self, entry: LedgerEntry) -> None:
        request = requests.tool_from_json(entry.input_json)
        if request.tool not in BUILTIN_TOOLS:
            self._execute_approved_mcp(entry, request)
            return
        tool = BUILTIN_TOOLS[request.tool]
        arguments = dict(request.arguments)
        if entry.code is Code.CONFLICT:
            # The human approved writing over someone else's change: the stale base_hash
            # that caused the conflict must not refuse it now.
            arguments.pop("base_hash", None)
        try:
            prepared = tool.prepare(Path(entry.workspace), arguments)
        except ShellwardError as exc:
            self._fail_planned(entry, exc.code, exc.message)
            return
        self._execute_tool(entry, tool, prepared)

    def _execute_approved_mcp(self, entry: LedgerEntry, request: ToolRequest) -> None:
        try:
            if self._registry is None:
                raise NotFound("the daemon no longer has MCP servers configured")
            tool = self._registry.resolve(request.tool)
        except ShellwardError as exc:
            self._fail_planned(entry, exc.code, exc.message)
            return
        self._execute_mcp(entry, tool, request.arguments, entry.idempotency_key or None)

    def expire_approvals(self) -> list[str]:
        """Pending calls older than the approval timeout are denied (nothing ran)."""
        timeout = self._config.approval_timeout
        expired = self._ledger.expire_pending(
            time.time() - timeout,
            f"No human answered within {timeout:g}s, so the call was denied. Nothing ran. "
            "Ask the user before trying again.",
        )
        if expired:
            log.info("approvals expired", extra={"call_ids": expired})
            with self._changed:
                self._changed.notify_all()
        return expired

    # --- shutdown ------------------------------------------------------------------

    def stop_accepting(self) -> None:
        self._accepting = False

    def drain(self, grace_period: float) -> int:
        """Wait up to ``grace_period`` for running calls, then kill the rest.

        Returns how many calls were killed; they end ``uncertain``.
        """
        deadline = time.monotonic() + grace_period
        with self._changed:
            while self._running and time.monotonic() < deadline:
                self._changed.wait(timeout=max(deadline - time.monotonic(), 0.01))
            killed = list(self._running.values())
            for cancel in killed:
                cancel.set()
            while self._running:
                self._changed.wait(timeout=1.0)
            workers = list(self._workers)
        for worker in workers:
            worker.join(timeout=5.0)
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

    def _classify_or_invalid(
        self, command: str, cwd: str, workspace: str, env: Mapping[str, str] | None = None
    ) -> Verdict:
        try:
            return self._classify(command, cwd, workspace, env or {})
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from exc


def _planned(
    call_id: str,
    input_hash: str,
    request: AnyRequest,
    tool_name: str,
    command: str,
    verdict: Verdict | None = None,
) -> LedgerEntry:
    """A new attempt's entry before its checks: strictest verdict unless one is known."""
    return LedgerEntry(
        call_id=call_id,
        run_id=request.run_id,
        step_id=request.step_id,
        tool_name=tool_name,
        input_hash=input_hash,
        status=CallStatus.PLANNED,
        idempotency=verdict.idempotency if verdict else Idempotency.NON_IDEMPOTENT,
        replay_policy=verdict.replay_policy if verdict else ReplayPolicy.NEVER,
        command=command,
        cwd=request.cwd,
        created_at=time.time(),
    )


def _mcp_summary(request: ToolRequest) -> str:
    """A one-line description of a business tool call for the ledger's command column."""
    arguments = json.dumps(request.arguments, ensure_ascii=False, sort_keys=True)
    return f"{request.tool} {arguments[:200]}"
