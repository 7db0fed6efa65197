"""The undo kind: put back the files a recorded call changed, as a ledgered call itself.

An undo is a tool call named ``undo`` (``arguments = {"call_id": ...}``) whose identity the
runtime derives from the call it undoes (step ``undo:<call_id>``), so undoing twice is a
retry of one step. Whether a call may be undone is checked before anything is recorded
(:meth:`UndoKind.check`, refusals by status); the same check runs again inside the
workspace's exclusive window, right before the files are restored, because a writer may
have changed them in between. Its own file effects are observed like any writer's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from shellward.types import (
    CallStatus,
    Code,
    Idempotency,
    LedgerEntry,
    ReplayPolicy,
    Verdict,
)
from shellwardd import requests
from shellwardd.builtin_tools import BUILTIN_TOOLS
from shellwardd.config import Config
from shellwardd.errors import InvalidArgument, PermissionDenied, ShellwardError, Unavailable
from shellwardd.requests import TOOL_RUN_COMMAND, ToolRequest
from shellwardd.staging.blobs import BlobStore, store_path
from shellwardd.undo import UndoPlan, plan_undo, restore

from .lifecycle import CallListener, Execution, Plan, ToolRequests, planned_entry

TOOL_UNDO = "undo"
STEP_PREFIX = "undo:"
VERDICT = Verdict(
    Idempotency.CONDITIONAL,
    ReplayPolicy.ASK,
    "undo: puts back the files a call changed, only where they are still as it left them",
)

# call_id → its entry (the ledger), None when unknown.
GetEntry = Callable[[str], LedgerEntry | None]


def identity(original: LedgerEntry) -> tuple[str, str]:
    """The undo's (run_id, step_id): one per undone call, whoever asks."""
    return original.run_id or f"call:{original.call_id}", STEP_PREFIX + original.call_id


def request_for(original: LedgerEntry, cwd: str) -> ToolRequest:
    run_id, step_id = identity(original)
    return ToolRequest(
        tool=TOOL_UNDO, arguments={"call_id": original.call_id}, cwd=cwd,
        run_id=run_id, step_id=step_id,
    )  # fmt: skip


class UndoKind(ToolRequests):
    def __init__(self, config: Config, get: GetEntry, here: Callable[[], str]) -> None:
        self._config = config
        self._get = get
        self._here = here
        self.blobs = BlobStore(store_path(config.state_dir))

    def planned(self, call_id: str, input_hash: str, request: ToolRequest) -> LedgerEntry:
        target = str(request.arguments.get("call_id", ""))
        return planned_entry(call_id, input_hash, request, TOOL_UNDO, f"undo {target}", VERDICT)

    def check(self, original: LedgerEntry, cwd: str) -> UndoPlan:
        """Whether ``original`` may be undone from the workspace of ``cwd`` now: the plan,
        or the ShellwardError that says why not (nothing recorded, nothing restored)."""
        workspace, _ = requests.resolve_cwd(self._config, cwd)
        call = f"call {original.call_id}"
        if original.tool_name not in (TOOL_RUN_COMMAND, TOOL_UNDO, *BUILTIN_TOOLS):
            raise InvalidArgument(
                f"{call} is the business tool {original.tool_name}: its effect is outside the "
                f"workspace, so there are no files to undo. Use `shellward compensate "
                f"{original.call_id}` if its tool has a compensation."
            )
        if original.workspace != str(workspace):
            raise PermissionDenied(
                f"{call} ran in another workspace ({original.workspace or 'none'}), not in "
                f"{workspace}: an undo only restores files of the workspace it is asked from. "
                "Nothing was restored."
            )
        if original.daemon_id and original.daemon_id != self._here():
            raise Unavailable(
                f"{call} ran on daemon {original.daemon_id!r}, which holds its workspace and "
                "before-images; ask that daemon to undo it. Nothing was restored."
            )
        if not original.status.is_final:
            raise InvalidArgument(
                f"{call} is {original.status.value}: wait for it to finish (shellward wait "
                f"{original.call_id}) before undoing it. Nothing was restored."
            )
        if original.started_at is None or not original.effects_recorded:
            why = "never started" if original.started_at is None else "has no observed effects"
            raise InvalidArgument(
                f"{call} {why}, so there is nothing shellward can undo. Nothing was restored."
            )
        if not original.file_effects:
            raise InvalidArgument(f"{call} changed no files: there is nothing to undo.")
        return plan_undo(original.call_id, workspace, original.file_effects, self.blobs)

    def plan(self, entry: LedgerEntry, request: ToolRequest) -> Plan:
        workspace, cwd = requests.resolve_cwd(self._config, request.cwd)
        entry = replace(
            entry,
            cwd=str(cwd),
            workspace=str(workspace),
            timeout_seconds=requests.check_timeout(self._config, request.timeout_seconds),
            input_json=requests.tool_to_json(request),
        )
        return Plan(entry, VERDICT, self._execution(request))

    def resume(self, entry: LedgerEntry) -> Execution:
        return self._execution(requests.tool_from_json(entry.input_json))

    def _execution(self, request: ToolRequest) -> Execution:
        target = str(request.arguments.get("call_id", ""))

        def work(
            started: LedgerEntry, cancel: threading.Event, listener: CallListener
        ) -> LedgerEntry:
            try:
                original = self._get(target)
                if original is None:
                    raise InvalidArgument(f"call {target} is no longer in the ledger")
                # Again, now that this call holds the workspace alone.
                plan = self.check(original, request.cwd)
                restore(Path(started.workspace), plan, self.blobs)
            except ShellwardError as exc:
                return replace(started, status=CallStatus.FAILED, code=exc.code,
                               content=exc.message, finished_at=time.time())  # fmt: skip
            shown = ", ".join(plan.paths[:10]) + (
                f" and {len(plan.paths) - 10} more" if len(plan.paths) > 10 else ""
            )
            return replace(
                started, status=CallStatus.SUCCEEDED, code=Code.OK, finished_at=time.time(),
                content=f"Undid call {target}: {len(plan.paths)} path(s) are as they were "
                f"before it ({shown}).",
            )  # fmt: skip

        return Execution(work, exclusive=True)
