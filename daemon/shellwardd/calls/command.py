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

from shellward.types import ArgumentKind, CallStatus, Code, Idempotency, LedgerEntry, Verdict
from shellwardd import requests
from shellwardd.classifier.toolchains import NO_TOOLCHAINS, Toolchains
from shellwardd.config import Config, merge_limits
from shellwardd.egress.policy import EgressPolicy, as_network, url_host
from shellwardd.errors import InvalidArgument, PermissionDenied
from shellwardd.outcomes import reconcile_network
from shellwardd.requests import TOOL_RUN_COMMAND, CommandRequest
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from shellwardd.staging.area import StagingArea
from shellwardd.watch.paths import COOKIE_DIR

from .lifecycle import CallListener, CancelFlag, Execution, Plan, planned_entry

# (command, cwd, workspace, the request's env) → verdict
Classify = Callable[[str, str | None, str | None, Mapping[str, str]], Verdict]


class CommandKind:
    def __init__(
        self,
        config: Config,
        classify: Classify,
        sandbox: Sandbox,
        toolchains: Toolchains = NO_TOOLCHAINS,
        staging: StagingArea | None = None,
    ) -> None:
        self._config = config
        self._classify = classify
        self._sandbox = sandbox
        self._toolchains = toolchains
        # None: commands write the workspace directly (no sandbox to mount an overlay in).
        self._staging = staging

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
        requests.check_stdin(request.stdin)
        workspace, cwd = requests.resolve_cwd(self._config, request.cwd)
        verdict = self.classify(request.command, cwd, workspace, request.env)
        verdict, asked = self._destinations(verdict)
        entry = replace(
            entry,
            cwd=str(cwd),
            workspace=str(workspace),
            # The verdict decides; a request's `network` only asks (docs/network.md).
            network_granted=verdict.needs_network,
            note="; ".join(
                filter(None, [entry.note, _network_note(request.network, verdict.needs_network)])
            ),
            timeout_seconds=timeout,
            input_json=requests.to_json(request),
        )
        approval = " ".join(
            filter(None, [
                f"This command needs a human's approval before its first run ({verdict.reason})."
                if verdict.needs_approval else "",
                f"It asks for {', '.join(asked)}, not on its allow-list: a human's approval "
                "lets this call reach it (or the operator adds it with --allow-domain)."
                if asked else "",
            ])
        )  # fmt: skip
        approval += " Nothing ran yet." if approval else ""
        return Plan(entry, verdict, self._execution(request, verdict.idempotency), approval)

    def resume(self, entry: LedgerEntry) -> Execution:
        return self._execution(requests.from_json(entry.input_json), entry.idempotency)

    def _execution(self, request: CommandRequest, idempotency: Idempotency) -> Execution:
        def work(started: LedgerEntry, cancel: CancelFlag, listener: CallListener) -> LedgerEntry:
            outcome = self._sandbox.run(
                self.spec(started, request), listener.output, cancel, call_id=started.call_id
            )
            final = finished_entry(started, outcome, time.time(), cancel.why)
            return reconcile_network(final, outcome.network_effects)

        return Execution(
            work,
            exclusive=idempotency is not Idempotency.IDEMPOTENT,
            staged=self._staging is not None,
        )

    def _destinations(self, verdict: Verdict) -> tuple[Verdict, list[str]]:
        """The hosts the command's URL arguments name that its allow-list lacks: one the
        operator denies refuses the call; the others ask a human, whose approval adds them
        to this call's destinations."""
        if not verdict.needs_network:
            return verdict, []
        policy = self._egress_policy(verdict)
        named = [
            host
            for part in verdict.parts
            if part.needs_network
            for fact in part.arguments
            if fact.kind is ArgumentKind.NETWORK and (host := url_host(fact.text))
        ]
        for host in named:
            if policy.denies(host):
                raise PermissionDenied(
                    f"This command asks for {host}, which the operator denies (--deny-domain); "
                    "nothing ran. Use another destination, or ask the user."
                )
            if as_network(host) is not None and policy.refuse_name(host):
                raise PermissionDenied(
                    f"This command asks for the address {host}; only the operator can allow an "
                    f"address (--allow-domain {host}). Nothing ran: use the service's name, or "
                    "ask the user."
                )
        asked = [h for h in dict.fromkeys(named) if policy.refuse_name(h)]
        return replace(verdict, destinations=(*verdict.destinations, *asked)), asked

    def _egress_policy(self, verdict: Verdict | None) -> EgressPolicy:
        """Where a call granted network may go: its rules' destinations and the operator's
        allow-list, less the operator's denials."""
        config = self._config
        return EgressPolicy(
            domains=frozenset(verdict.destinations if verdict else ()),
            operator=frozenset(config.allow_domains),
            denied=frozenset(config.deny_domains),
        )

    def spec(self, started: LedgerEntry, request: CommandRequest) -> SandboxSpec:
        """How this call runs in the sandbox (its entry says where, for how long, with what
        network; the request adds its env and limits). bench/bare.py spawns this too."""
        workspace = Path(started.workspace)
        return SandboxSpec(
            command=request.command,
            workspace=workspace,
            cwd=Path(started.cwd),
            env={**request.env, "SHELLWARD_CALL_ID": started.call_id},
            network=self._egress_policy(started.verdict) if started.network_granted else None,
            timeout=started.timeout_seconds,
            limits=merge_limits(self._config.limits, request.limits),
            output_cap=self._config.output_cap_bytes,
            hidden=(self._config.state_dir, self._config.socket.parent),
            read_only=(workspace / COOKIE_DIR,),
            toolchains=tuple(Path(t.path) for t in self._toolchains.for_workspace(str(workspace))),
            stdin=request.stdin,
            staged=self._staging.dirs(started.call_id) if self._staging else None,
        )


def _network_note(asked: bool, needed: bool) -> str:
    if asked and not needed:
        return (
            "network was asked for, but no part of this command needs it by the rules, so it "
            "ran without network"
        )
    return ""


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
