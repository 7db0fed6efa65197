"""The business tool kind: a tool of a configured MCP server, called by the daemon.

Its effect is outside any workspace (nothing to watch); its replay safety comes from its
verdict and, for a tool that creates things, an idempotency key the server honours. What
the model reads of the server's answer (or silence) is said here and, for an uncertain
call, by the registry (which knows the tool's status lookup).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shellward.types import CallStatus, CapturedOutput, Code, Idempotency, LedgerEntry, Verdict
from shellwardd import compensate, requests
from shellwardd.builtin_tools import BUILTIN_TOOLS
from shellwardd.config import Config
from shellwardd.errors import NotFound
from shellwardd.outcomes import captured
from shellwardd.requests import ToolRequest
from shellwardd.tools.connection import OutcomeKind, ToolCallOutcome
from shellwardd.tools.registry import RegisteredTool, ToolRegistry, uncertain_content
from shellwardd.watch.hashing import bytes_hash

from .lifecycle import CallListener, Execution, Plan, ToolRequests, planned_entry


class McpToolKind(ToolRequests):
    def __init__(self, config: Config, registry: ToolRegistry | None) -> None:
        self._config = config
        self._registry = registry

    def planned(self, call_id: str, input_hash: str, request: ToolRequest) -> LedgerEntry:
        arguments = json.dumps(request.arguments, ensure_ascii=False, sort_keys=True)
        return planned_entry(
            call_id, input_hash, request, request.tool, f"{request.tool} {arguments[:200]}"
        )

    def plan(self, entry: LedgerEntry, request: ToolRequest) -> Plan:
        registry, tool = self._resolve(request.tool)
        key = registry.key_for(
            tool, user=request.user or self._config.user, run_id=request.run_id,
            step_id=request.step_id, arguments=request.arguments,
        )  # fmt: skip
        # 0: the server's own deadline.
        timeout = (
            requests.check_timeout(self._config, request.timeout_seconds)
            if request.timeout_seconds
            else 0.0
        )
        verdict = Verdict(
            tool.verdict.idempotency,
            tool.verdict.replay_policy,
            f"{tool.qualified_name}: {tool.verdict.reason}",
            needs_approval=tool.verdict.needs_approval,
        )
        entry = replace(
            entry,
            tool_name=tool.qualified_name,
            idempotency_key=key or "",
            network_granted=True,
            timeout_seconds=timeout,
            input_json=requests.tool_to_json(request),
        )
        approval = (
            f"{tool.qualified_name} needs a human's approval before it runs; nothing was sent."
            if verdict.needs_approval
            else ""
        )
        return Plan(
            entry,
            verdict,
            _execution(registry, tool, request.arguments, key, self._config.output_cap_bytes),
            approval,
        )

    def resume(self, entry: LedgerEntry) -> Execution:
        request = requests.tool_from_json(entry.input_json)
        registry, tool = self._resolve(request.tool)
        return _execution(
            registry,
            tool,
            request.arguments,
            entry.idempotency_key or None,
            self._config.output_cap_bytes,
        )

    def _resolve(self, name: str) -> tuple[ToolRegistry, RegisteredTool]:
        if self._registry is None:
            known = ", ".join(sorted(BUILTIN_TOOLS))
            raise NotFound(
                f"there is no tool {name!r}; the tools are: {known} (business tools come "
                "from MCP servers configured with --tools-config)"
            )
        return self._registry, self._registry.resolve(name)


def _execution(
    registry: ToolRegistry,
    tool: RegisteredTool,
    arguments: Mapping[str, Any],
    key: str | None,
    cap: int,
) -> Execution:
    def work(started: LedgerEntry, cancel: threading.Event, listener: CallListener) -> LedgerEntry:
        outcome = registry.call(
            tool.qualified_name, arguments, key=key, timeout=started.timeout_seconds or None
        )
        return finished_entry(started, tool, outcome, key, time.time(), cap=cap)

    return Execution(work, exclusive=False, watch=False)


def finished_entry(
    entry: LedgerEntry,
    tool: RegisteredTool,
    outcome: ToolCallOutcome,
    key: str | None,
    now: float,
    *,
    cap: int,
) -> LedgerEntry:
    """The final entry of a business tool call, from what its server answered (or not)."""
    name = tool.name
    # The answer is stored three ways (raw, as the sentence, as JSON): each is capped.
    answer = captured(outcome.content.encode("utf-8"), cap)
    text = _capped_text(answer)
    common: dict[str, Any] = {"finished_at": now}
    if outcome.kind in (OutcomeKind.OK, OutcomeKind.ERROR):  # the server answered
        structured = outcome.structured
        common["stdout"] = answer
        common["output_json"] = _capped_json(
            structured if structured is not None else {"content": text}, cap
        )
    if outcome.kind is OutcomeKind.OK:
        return replace(
            entry, status=CallStatus.SUCCEEDED, code=Code.OK, **common,
            content=text or f"{name} succeeded.",
        )  # fmt: skip
    if outcome.kind is OutcomeKind.ERROR:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.COMMAND_FAILED, **common,
            content=f"{name} answered with an error: {text or outcome.detail}. Fix the "
            "cause before calling it again.",
        )  # fmt: skip
    if outcome.kind is OutcomeKind.UNAVAILABLE:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.UNAVAILABLE, **common,
            content=f"{name} was not sent: {outcome.detail}. Nothing happened; retry in a moment.",
        )  # fmt: skip
    if entry.idempotency is Idempotency.IDEMPOTENT:
        return replace(
            entry, status=CallStatus.FAILED, code=Code.TIMEOUT, **common,
            content=f"{name} did not answer ({outcome.detail}). It only reads, so retrying is "
            "safe, with a longer timeout if it is slow.",
        )  # fmt: skip
    uncertain = replace(
        entry, status=CallStatus.UNCERTAIN, code=Code.SIDE_EFFECT_UNCERTAIN, **common,
        note="; ".join(filter(None, [entry.note, compensate.SENT_UNANSWERED])),
    )  # fmt: skip
    remedy = compensate.hint(uncertain, tool)
    content = uncertain_content(tool, outcome, key)
    return replace(uncertain, content=f"{content} {remedy}" if remedy else content)


def _capped_text(output: CapturedOutput) -> str:
    """The kept start of a capped answer as text, saying what was cut."""
    if not output.truncated:
        return output.text
    return (
        f"{output.text}\n[shellward kept the first {len(output.data)} of {output.total_bytes}"
        f" bytes of this answer (its --output-cap); {output.sha256}]"
    )


def _capped_json(value: Any, cap: int) -> str:
    """``value`` as JSON, or, past ``cap`` bytes, what it was: its size and digest."""
    text = json.dumps(value)
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text
    return json.dumps({"truncated": True, "total_bytes": len(data), "sha256": bytes_hash(data)})
