"""The command kind: a shell command line, classified, run in the sandbox.

Everything the model reads about a command's own outcome (timeout, exit status, a sandbox
that could not start, a first run that needs approval) is said here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from shellward.types import CallStatus, Code, Idempotency, LedgerEntry, Verdict
from shellwardd import requests
from shellwardd.config import Config, merge_limits
from shellwardd.errors import InvalidArgument
from shellwardd.requests import TOOL_RUN_COMMAND, CommandRequest
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from shellwardd.watch.paths import COOKIE_DIR

from .lifecycle import CallListener, CancelFlag, Execution, Plan, planned_entry

# (command, cwd, workspace, the request's env) → verdict
Classify = Callable[[str, str | None, str | None, Mapping[str, str]], Verdict]


class CommandKind:
    def __init__(self, config: Config, classify: Classify, sandbox: Sandbox) -> None:
        self._config = config
        self._classify = classify
        self._sandbox = sandbox

    def parse(self, input_json: str) -> CommandRequest:
        return requests.from_json(input_json)

    def input_hash(self, request: CommandRequest) -> str:
        return requests.input_hash(request)

    def planned(self, call_id: str, input_hash: str, request: CommandRequest) -> LedgerEntry:
        return planned_entry(
            call_id, input_hash, request, TOOL_RUN_COMMAND, requests.printable(request.command)
        )

    def classify(
        self, command: str, cwd: Path, workspace: Path, env: Mapping[str, str] | None = None
    ) -> Verdict:
        try:
            return self._classify(command, str(cwd), str(workspace), env or {})
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from exc

    def plan(self, entry: LedgerEntry, request: CommandRequest) -> Plan:
        timeout = requests.check_timeout(self._config, request.timeout_seconds)
        requests.check_command(request.command)
        requests.check_env(request.env)
        workspace, cwd = requests.resolve_cwd(self._config, request.cwd)
        verdict = self.classify(request.command, cwd, workspace, request.env)
        entry = replace(
            entry,
            cwd=str(cwd),
            workspace=str(workspace),
            network_granted=request.network or verdict.needs_network,
            timeout_seconds=timeout,
            input_json=requests.to_json(request),
        )
        approval = (
            f"This command needs a human's approval before its first run ({verdict.reason}). "
            "Nothing ran yet."
            if verdict.needs_approval
            else ""
        )
        return Plan(entry, verdict, self._execution(request, verdict.idempotency), approval)

    def resume(self, entry: LedgerEntry) -> Execution:
        return self._execution(requests.from_json(entry.input_json), entry.idempotency)

    def _execution(self, request: CommandRequest, idempotency: Idempotency) -> Execution:
        def work(started: LedgerEntry, cancel: CancelFlag, listener: CallListener) -> LedgerEntry:
            outcome = self._sandbox.run(
                self._spec(started, request), listener.output, cancel, call_id=started.call_id
            )
            return finished_entry(started, outcome, time.time(), cancel.why)

        return Execution(work, exclusive=idempotency is not Idempotency.IDEMPOTENT)

    def _spec(self, started: LedgerEntry, request: CommandRequest) -> SandboxSpec:
        """How this call runs in the sandbox (its entry says where, for how long, with what
        network; the request adds its env and limits)."""
        workspace = Path(started.workspace)
        return SandboxSpec(
            command=request.command,
            workspace=workspace,
            cwd=Path(started.cwd),
            env={**request.env, "SHELLWARD_CALL_ID": started.call_id},
            network=started.network_granted,
            timeout=started.timeout_seconds,
            limits=merge_limits(self._config.limits, request.limits),
            output_cap=self._config.output_cap_bytes,
            hidden=(self._config.state_dir, self._config.socket.parent),
            read_only=(workspace / COOKIE_DIR,),
            toolchains=self._config.toolchains,
        )


def finished_entry(
    entry: LedgerEntry, outcome: ProcessOutcome, now: float, cancelled_by: str = ""
) -> LedgerEntry:
    """The final ledger entry for a call that was started: status, code and sentence
    (``cancelled_by``: who cancelled it, when it was)."""
    known_idempotent = entry.idempotency is Idempotency.IDEMPOTENT
    common: dict[str, Any] = {
        "finished_at": now,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "exit_code": outcome.exit_code,
    }
    check = f"Check its effects first (`shellward show {entry.call_id}`) or ask the user."
    why = cancelled_by or "the daemon shut down"
    if not outcome.started and outcome.cancelled:  # killed before bwrap spawned the command
        return replace(
            entry, status=CallStatus.FAILED, code=Code.INTERRUPTED, **common,
            note="; ".join(filter(None, [entry.note, f"cancelled: {why}"])),
            content=f"The call was cancelled before the command started ({why}). Nothing ran.",
        )  # fmt: skip
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
        why = cancelled_by or "the daemon shut down"
        return replace(
            entry, status=CallStatus.UNCERTAIN, code=code, **common,
            note="; ".join(filter(None, [entry.note, f"cancelled: {why}"])),
            content=f"The command was killed while it ran ({why}). {advice}",
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
