"""Compensation of a business tool call: whether a recorded call may be compensated, and the
call of its compensating tool that does it (``shellward compensate``, the Compensate RPC).

Choices, and why
- **Through the ledger, keyed by the original.** A compensation is an ordinary call of the
  compensating tool, with an identity derived from the original call: its run (or
  ``call:<call_id>`` when it had none) and the step ``compensate:<call_id>``. Compensating
  twice is a retry of that step, so the replay table answers the first result and sends
  nothing; two compensations at once meet the ledger's claim on the step (IN_PROGRESS).
  A compensating tool with a key template gets its own key from that identity, so the
  service dedupes too.
- **Only what is known to have happened is compensated** (fail closed):

  ===============================================  ======================================
  the original call                                answer
  ===============================================  ======================================
  not a business tool (a command, a file tool)     INVALID_ARGUMENT: use ``shellward undo``
  its tool has no ``compensate``                   INVALID_ARGUMENT, naming the tool
  waiting for approval, or running                 IN_PROGRESS: wait for it first
  failed, denied, ended before it started          INVALID_ARGUMENT: nothing to revert
  uncertain: sent, its server never answered       runs, if the template reads only
                                                   ``input.``; else SIDE_EFFECT_UNCERTAIN
                                                   (the answer it needs is unknown)
  uncertain for any other reason (the daemon       SIDE_EFFECT_UNCERTAIN: it may never
  stopped under it): maybe never sent              have been sent
  older than the retention                         RECORD_EXPIRED
  succeeded                                        runs
  ===============================================  ======================================
- **The input is what was sent.** ``input.<key_argument>`` is the idempotency key shellward
  put there, not what the model wrote; ``output`` is the recorded structured answer (a
  capped answer has no fields left: its placeholders are missing, and the call is refused).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from shellward.types import CallStatus, Code, LedgerEntry
from shellwardd import requests
from shellwardd.errors import (
    InProgress,
    InvalidArgument,
    RecordExpired,
    SideEffectUncertain,
)
from shellwardd.requests import ToolRequest
from shellwardd.tools.compensation import Compensation, render
from shellwardd.tools.registry import RegisteredTool

STEP_PREFIX = "compensate:"
# In the note of a business call that was sent and got no answer (calls.mcp_tool): the one
# kind of uncertain call known to have reached its server.
SENT_UNANSWERED = "sent to its server, which did not answer"


def identity(original: LedgerEntry) -> tuple[str, str]:
    """The compensation's (run_id, step_id): one per original call, whoever asks."""
    return original.run_id or f"call:{original.call_id}", STEP_PREFIX + original.call_id


def hint(original: LedgerEntry, tool: RegisteredTool) -> str:
    """The sentence that names the compensation, or "" when it would be refused."""
    compensation = tool.pin.compensate if tool.pin is not None else None
    if compensation is None or _problem(original, tool, compensation) is not None:
        return ""
    return (
        f"To revert it, run its compensation: `shellward compensate {original.call_id}` (the "
        f"Compensate RPC) calls {tool.server}.{compensation.tool}; ask the user first."
    )


def request_for(
    original: LedgerEntry, tool: RegisteredTool, *, now: float, retention: float
) -> ToolRequest:
    """The compensating call of ``original``; a ShellwardError says why there is none."""
    compensation = tool.pin.compensate if tool.pin is not None else None
    if compensation is None:
        raise InvalidArgument(
            f"{tool.qualified_name} has no compensation configured, so call {original.call_id} "
            "cannot be compensated; nothing was sent. The operator can name one in its [[tool]] "
            'table (compensate = { tool = "...", arguments = { ... } }); until then revert it '
            "by hand or ask the user."
        )
    if now - original.created_at > retention:
        raise RecordExpired(
            f"The record of call {original.call_id} expired (kept {retention / 3600:g} h); "
            "shellward no longer vouches for what it did, so it will not compensate it. "
            "Nothing was sent."
        )
    problem = _problem(original, tool, compensation)
    if problem is not None:
        raise problem
    given = dict(requests.tool_from_json(original.input_json).arguments)
    key_argument = tool.pin.key_argument if tool.pin is not None else ""
    if key_argument:
        given.pop(key_argument, None)
        if original.idempotency_key:
            given[key_argument] = original.idempotency_key
    answer: Any = json.loads(original.output_json) if original.output_json else {}
    arguments = render(compensation, given, answer)
    recorded = requests.tool_from_json(original.input_json)
    run_id, step_id = identity(original)
    return replace(
        recorded,
        tool=f"{tool.server}.{compensation.tool}",
        arguments=arguments,
        timeout_seconds=0.0,
        run_id=run_id,
        step_id=step_id,
        rerun=False,
    )


def _problem(
    original: LedgerEntry, tool: RegisteredTool, compensation: Compensation
) -> Exception | None:
    """Why ``original`` may not be compensated now, as the error to raise (None: it may)."""
    call = f"call {original.call_id} ({tool.qualified_name})"
    if original.status is CallStatus.PENDING_APPROVAL or not original.status.is_final:
        return InProgress(
            f"{call} is {original.status.value}, not finished: there is nothing to compensate "
            f"yet. Wait for it (shellward wait {original.call_id}), then decide."
        )
    if original.status is CallStatus.SUCCEEDED:
        return None
    if original.status is CallStatus.UNCERTAIN:
        if SENT_UNANSWERED not in original.note or original.code is not Code.SIDE_EFFECT_UNCERTAIN:
            return SideEffectUncertain(
                f"{call} is uncertain because the daemon stopped under it: it may never have "
                "been sent, and compensating something that never happened can do harm. "
                "Nothing was sent. Find out whether it took effect first (its status tool, or "
                "ask the user)."
            )
        if compensation.needs_output:
            return SideEffectUncertain(
                f"{call} was sent but never answered, and its compensation "
                f"({compensation.tool}) needs values from that answer. Nothing was sent. Find "
                "out whether it took effect (its status tool, or ask the user) and revert it "
                "by hand if it did."
            )
        return None
    return InvalidArgument(
        f"{call} {original.status.value} ({original.code.value}): it did not take effect, so "
        "there is nothing to compensate. Nothing was sent."
    )
