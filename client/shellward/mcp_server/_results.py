"""Answers as the model reads them: the daemon's result as text plus structured content.

The text is what most hosts show the model: the daemon's sentence first (it says what to do
next), then the output. The structured content is the same result as data, in the shape of
``_tools.RESULT_SCHEMA``; a client error (no daemon, refused arguments) gets the same shape
with the code it stands for, so a model never has to parse an exception.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from shellward import _render
from shellward._exceptions import (
    DaemonUnavailable,
    DeadlineExceeded,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ShellwardError,
)
from shellward.types import Code, CommandResult, RecoveryItem, Verdict, network_effect_dict

# What the model can do about an approval: it cannot approve, it can come back.
APPROVAL_NOTE = (
    "You cannot approve it yourself: tell the user the command above. Once approved it runs; "
    "call again with the same step_id to get its answer."
)

# The code a client-side error stands for; anything else is INTERNAL.
_ERROR_CODES: dict[type[ShellwardError], str] = {
    DaemonUnavailable: "UNAVAILABLE",
    InvalidRequest: "INVALID_ARGUMENT",
    PermissionDenied: "PERMISSION_DENIED",
    NotFound: "NOT_FOUND",
    DeadlineExceeded: "SIDE_EFFECT_UNCERTAIN",
}


def verdict_data(verdict: Verdict | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {
        "idempotency": verdict.idempotency.value,
        "replay_policy": verdict.replay_policy.value,
        "reason": verdict.reason,
        "needs_approval": verdict.needs_approval,
        "needs_network": verdict.needs_network,
    }


def command_result(result: CommandResult, *, streamed: bool = False) -> types.CallToolResult:
    """``streamed``: the output already went out as progress; the text still carries it,
    because a host may drop progress notifications."""
    data = {
        "ok": result.ok,
        "code": result.code.value,
        "content": result.content,
        "exit_code": result.exit_code,
        "call_id": result.call_id,
        "status": result.status.value,
        "replayed": result.replayed,
        "retryable": result.retryable,
        "verdict": verdict_data(result.verdict),
        "effects": [{"path": e.path, "kind": e.kind.value} for e in result.file_effects],
        "network_effects": [network_effect_dict(e) for e in result.network_effects],
        "output": result.output,
    }
    lines = [f"[{result.code.value}] {result.content}"]
    if result.code is Code.NEEDS_APPROVAL:
        lines.append(APPROVAL_NOTE)
    if result.call_id:
        lines.append(f"call_id: {result.call_id}" + (" (replayed)" if result.replayed else ""))
    if result.output is not None:
        lines.append(_render.to_json(result.output))
    for name, captured in (("stdout", result.stdout), ("stderr", result.stderr)):
        if captured.data:
            cut = f" (truncated; {captured.total_bytes} bytes in all)" if captured.truncated else ""
            lines.append(f"--- {name}{cut}\n{captured.text.rstrip()}")
    return types.CallToolResult(
        content=[types.TextContent(text="\n".join(lines))],
        structured_content=data,
        is_error=not result.ok,
    )


def error_result(exc: ShellwardError) -> types.CallToolResult:
    code = next((c for kind, c in _ERROR_CODES.items() if isinstance(exc, kind)), "INTERNAL")
    data = {
        "ok": False,
        "code": code,
        "content": exc.message,
        "exit_code": None,
        "call_id": "",
        "verdict": None,
        "effects": [],
    }
    return types.CallToolResult(
        content=[types.TextContent(text=f"[{code}] {exc.message}")],
        structured_content=data,
        is_error=True,
    )


def classify_result(verdict: Verdict) -> types.CallToolResult:
    data = {
        **(verdict_data(verdict) or {}),
        "parts": [
            {
                "program": part.program,
                "idempotency": part.idempotency.value,
                "replay_policy": part.replay_policy.value,
                "reason": part.reason,
            }
            for part in verdict.parts
        ],
    }
    return types.CallToolResult(
        content=[types.TextContent(text=_render.explain(verdict, _render.Style()))],
        structured_content=data,
        is_error=False,
    )


def recover_result(run_id: str, items: list[RecoveryItem]) -> types.CallToolResult:
    steps = [
        {
            "step_id": item.call.step_id,
            "call_id": item.call.call_id,
            "tool": item.call.tool_name,
            "command": item.call.command,
            "status": item.call.status.value,
            "action": item.action,
            "reason": item.reason,
        }
        for item in items
    ]
    if steps:
        text = "\n".join(
            f"step {s['step_id'] or '-'} ({s['tool']}: {s['command'] or s['call_id']}): "
            f"{s['action']}: {s['reason']}"
            for s in steps
        )
    else:
        text = f"Every step of run {run_id} ended cleanly: nothing to recover."
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"run_id": run_id, "steps": steps},
        is_error=False,
    )
