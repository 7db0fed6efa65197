"""How the ``shellward`` CLI shows things: colour, tables, trees and JSON.

Human output gets colour and aligned columns only when the stream is a terminal (colour
also needs ``NO_COLOR`` unset); anything else gets plain text that scripts can split:
``key: value`` lines and tab-separated tables. ``--json`` output goes through ``to_json``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, TextIO

from shellward.types import (
    CallStatus,
    CapturedOutput,
    Code,
    CommandPart,
    CommandResult,
    DaemonStatus,
    EffectKind,
    FileEffect,
    Idempotency,
    LedgerEntry,
    RecoveryItem,
    ReplayPolicy,
    ToolInfo,
    ToolServerStatus,
    Verdict,
    WorkspaceStatus,
)

_RESET = "\033[0m"
_COLOURS = {
    "bold": "\033[1m",
    "dim": "\033[2m",
    "red": "\033[31m",
    "green": "\033[32m",
    "yellow": "\033[33m",
    "magenta": "\033[35m",
    "cyan": "\033[36m",
}
_IDEMPOTENCY_COLOUR = {
    Idempotency.IDEMPOTENT: "green",
    Idempotency.CONDITIONAL: "yellow",
    Idempotency.NON_IDEMPOTENT: "red",
}
_STATUS_COLOUR = {
    CallStatus.SUCCEEDED: "green",
    CallStatus.FAILED: "red",
    CallStatus.DENIED: "red",
    CallStatus.UNCERTAIN: "magenta",
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
SHORT_ID = 8
_COMMAND_MIN_WIDTH = 20


@dataclasses.dataclass(frozen=True)
class Style:
    """What a stream can show: aligned columns (a terminal) and colour (also NO_COLOR unset)."""

    tty: bool = False
    colour: bool = False

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        tty = stream.isatty()
        return cls(tty=tty, colour=tty and not os.environ.get("NO_COLOR"))

    def paint(self, text: str, colour: str) -> str:
        if not self.colour or not colour:
            return text
        return f"{_COLOURS[colour]}{text}{_RESET}"


class Cell(NamedTuple):
    """A table cell: its text and the colour to paint it (after padding)."""

    text: str
    colour: str = ""


# --- small formatters -----------------------------------------------------------------


def short_id(call_id: str) -> str:
    return call_id[:SHORT_ID]


def short_hash(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12] or "-"


def format_time(seconds: float | None, pattern: str = "%Y-%m-%d %H:%M:%S") -> str:
    return time.strftime(pattern, time.localtime(seconds)) if seconds else "-"


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes:02d}m"
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def one_line(text: str) -> str:
    """A command on one line: newlines and tabs made visible, other control characters defused."""
    return _visible(text.replace("\n", "\\n").replace("\t", "\\t"))


def truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def verdict_label(idempotency: Idempotency, policy: ReplayPolicy, style: Style) -> str:
    label = f"{idempotency.value}/{policy.value}"
    return style.paint(label, _IDEMPOTENCY_COLOUR[idempotency])


def status_label(status: CallStatus, style: Style) -> str:
    return style.paint(status.value, _STATUS_COLOUR.get(status, "cyan"))


# --- generic layouts ------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], style: Style) -> str:
    """Aligned columns on a terminal (last column cut to the width), else tab-separated."""
    if not style.tty:
        lines = ["\t".join(headers), *("\t".join(cell.text for cell in row) for row in rows)]
        return "\n".join(lines)
    widths = [max([len(h), *(len(row[i].text) for row in rows)]) for i, h in enumerate(headers)]
    room = shutil.get_terminal_size().columns - sum(w + 2 for w in widths[:-1])
    widths[-1] = min(widths[-1], max(room, _COMMAND_MIN_WIDTH))
    header = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    lines = [style.paint(header, "bold")]
    for row in rows:
        cells = [
            style.paint(truncate(cell.text, width).ljust(width), cell.colour)
            for cell, width in zip(row, widths, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def fields(pairs: Iterable[tuple[str, str]], style: Style) -> str:
    """``key  value`` lines, keys aligned on a terminal; ``key: value`` otherwise."""
    pairs = list(pairs)
    if not style.tty:
        return "\n".join(f"{key}: {value}" for key, value in pairs)
    width = max((len(key) for key, _ in pairs), default=0)
    return "\n".join(f"{style.paint(key.ljust(width), 'dim')}  {value}" for key, value in pairs)


# --- JSON -----------------------------------------------------------------------------


def to_jsonable(value: object) -> object:
    """Dataclasses as objects, enums as their values, bytes as text (undecodable → U+FFFD)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    return value


def to_json(value: object) -> str:
    return json.dumps(to_jsonable(value), indent=2, ensure_ascii=False)


# --- run --------------------------------------------------------------------------------


def run_summary(result: CommandResult, style: Style, *, accepted: bool) -> str:
    """The one line ``shellward run`` prints to stderr after the command's own output.

    ``accepted``: the daemon took the call as a new one; if not, and it is no replay, it
    refused at once: about an earlier call of the step (whose fields, status and verdict,
    the result carries), or a new request refused before it ran (no verdict: it was never
    classified or never ran). A call that ran names the files it changed.
    """
    verdict = verdict_label(result.idempotency, result.replay_policy, style)
    if not accepted and not result.replayed:
        if result.code is Code.IN_PROGRESS:
            about = f"call {result.call_id} runs it now"
        elif result.verdict is not None or result.code in _ABOUT_AN_EARLIER_CALL:
            about = f"earlier call {result.call_id} {result.status.value}, {verdict}"
        else:
            about = f"refused, recorded as call {result.call_id}"
        parts = [style.paint("nothing ran", "red"), result.code.value, about]
    else:
        exit_text = "none" if result.exit_code is None else str(result.exit_code)
        parts = [
            f"call {result.call_id}",
            status_label(result.status, style),
            result.code.value,
            f"exit {exit_text}",
            verdict,
        ]
    if result.replayed:
        parts.append("replayed from the ledger")
    elif accepted and result.file_effects:
        parts.append(effects_summary(result.file_effects))
    return style.paint("shellward:", "dim") + " " + " · ".join(parts)


# Refusals that are about the step's earlier call even when it has no verdict recorded.
_ABOUT_AN_EARLIER_CALL = frozenset({Code.IDEMPOTENCY_KEY_MISMATCH, Code.RECORD_EXPIRED})
EFFECTS_SHOWN = 5


def effects_summary(effects: Sequence[FileEffect]) -> str:
    """``created hello.txt, out/a.o; deleted old.txt``: the files a call changed, by kind,
    the first few of each named and the rest counted."""
    by_kind: dict[EffectKind, list[str]] = {}
    for effect in effects:
        by_kind.setdefault(effect.kind, []).append(_effect_path(effect))
    groups = []
    for kind, names in by_kind.items():
        more = len(names) - EFFECTS_SHOWN
        shown = ", ".join(names[:EFFECTS_SHOWN]) + (f" and {more} more" if more > 0 else "")
        groups.append(f"{kind.value} {shown}")
    return "; ".join(groups)


# --- ledger -----------------------------------------------------------------------------

LEDGER_HEADERS = ("TIME", "CALL", "STATUS", "EXIT", "VERDICT", "COMMAND")


def ledger_table(
    entries: Sequence[LedgerEntry], style: Style, actions: Mapping[str, str] | None = None
) -> str:
    """``actions``: call id → what a replay would do (``shellward recover``), shown after
    the verdict of the calls that have one."""
    actions = actions or {}
    rows = [
        [
            Cell(format_time(entry.created_at, "%m-%d %H:%M:%S")),
            Cell(short_id(entry.call_id), "cyan"),
            Cell(entry.status.value, _STATUS_COLOUR.get(entry.status, "cyan")),
            Cell("-" if entry.exit_code is None else str(entry.exit_code)),
            _verdict_cell(entry, actions.get(entry.call_id, "")),
            Cell(one_line(entry.command)),
        ]
        for entry in entries
    ]
    return table(LEDGER_HEADERS, rows, style)


def _verdict_cell(entry: LedgerEntry, action: str = "") -> Cell:
    text = f"{entry.idempotency.value}/{entry.replay_policy.value}"
    return Cell(f"{text} → {action}" if action else text, _IDEMPOTENCY_COLOUR[entry.idempotency])


# --- recover and approvals --------------------------------------------------------------

RECOVERY_HEADERS = ("STEP", "CALL", "STATUS", "VERDICT", "ACTION", "REASON")
_ACTION_COLOUR = {
    "replay": "green",
    "check": "yellow",
    "ask": "yellow",
    "refuse": "red",
    "wait": "cyan",
}


def recovery_table(items: Sequence[RecoveryItem], style: Style) -> str:
    rows = [
        [
            Cell(one_line(item.call.step_id) or "-"),
            Cell(short_id(item.call.call_id), "cyan"),
            Cell(item.call.status.value, _STATUS_COLOUR.get(item.call.status, "cyan")),
            _verdict_cell(item.call),
            Cell(item.action, _ACTION_COLOUR.get(item.action, "")),
            Cell(one_line(item.reason)),
        ]
        for item in items
    ]
    return table(RECOVERY_HEADERS, rows, style)


APPROVALS_HEADERS = ("CALL", "AGE", "CODE", "VERDICT", "COMMAND", "REASON")
_APPROVAL_COMMAND_WIDTH = 40  # on a terminal, so that the reason keeps some room


def approvals_table(entries: Sequence[LedgerEntry], style: Style) -> str:
    now = time.time()
    rows = []
    for entry in entries:
        command = one_line(entry.command)
        rows.append(
            [
                Cell(short_id(entry.call_id), "cyan"),
                Cell(format_duration(max(now - entry.created_at, 0.0))),
                Cell(entry.code.value, "yellow"),
                _verdict_cell(entry),
                Cell(truncate(command, _APPROVAL_COMMAND_WIDTH) if style.tty else command),
                Cell(one_line(entry.content)),
            ]
        )
    return table(APPROVALS_HEADERS, rows, style)


def answer_text(entry: LedgerEntry, style: Style) -> str:
    """What an approve / deny did to the call."""
    what = (
        f"it runs now; follow it with `shellward wait {short_id(entry.call_id)}`"
        if entry.status is CallStatus.APPROVED
        else "nothing ran"
    )
    return f"call {entry.call_id} {status_label(entry.status, style)}: {what}"


# --- tools ------------------------------------------------------------------------------

TOOLS_HEADERS = ("TOOL", "SERVER", "TRUST", "VERDICT", "SOURCE", "APPROVAL", "CHANGED", "REASON")
_TRUST_COLOUR = {"builtin": "dim", "trusted": "green", "untrusted": "yellow"}


def tools_table(tools: Sequence[ToolInfo], style: Style) -> str:
    """One row per tool; CHANGED marks a tool whose description is not the one first seen."""
    rows = [
        [
            Cell(tool.name, "cyan"),
            Cell(tool.server),
            Cell(tool.trust, _TRUST_COLOUR.get(tool.trust, "")),
            Cell(
                f"{tool.idempotency.value}/{tool.replay_policy.value}",
                _IDEMPOTENCY_COLOUR[tool.idempotency],
            ),
            Cell(tool.source),
            Cell("first run", "yellow") if tool.needs_approval else Cell("-"),
            Cell("CHANGED", "red") if tool.changed else Cell("-"),
            Cell(one_line(tool.reason)),
        ]
        for tool in tools
    ]
    return table(TOOLS_HEADERS, rows, style)


def tool_jsonable(tool: ToolInfo) -> dict[str, object]:
    """Every field of the tool, its input schema parsed (``input_schema``)."""
    parts = {
        f.name: to_jsonable(getattr(tool, f.name))
        for f in dataclasses.fields(tool)
        if f.name != "input_schema_json"
    }
    return {**parts, "input_schema": json.loads(tool.input_schema_json or "{}")}


# --- show -------------------------------------------------------------------------------


def entry_details(entry: LedgerEntry, style: Style) -> str:
    """Every field of one ledger entry, grouped: call, verdict, effects, output, times."""
    sections = [
        fields(_entry_fields(entry, style), style),
        _section("verdict", explain(entry.verdict, style) if entry.verdict else "-", style),
        _section("file effects", _effects_text(entry.file_effects, style), style),
        _section("network effects", _network_text(entry, style), style),
        _section("stdout", _output_text(entry.stdout, style), style),
        _section("stderr", _output_text(entry.stderr, style), style),
        _section("history", _history_text(entry, style), style),
    ]
    return "\n\n".join(sections)


def _history_text(entry: LedgerEntry, style: Style) -> str:
    """The call's transitions, one a line: when, the status reached, why."""
    return "\n".join(
        f"{format_time(step.at)}  {status_label(step.status, style)}"
        + (f"  {step.detail}" if step.detail else "")
        for step in entry.transitions
    )


def _entry_fields(entry: LedgerEntry, style: Style) -> list[tuple[str, str]]:
    duration = (
        format_duration(entry.finished_at - entry.started_at)
        if entry.started_at and entry.finished_at
        else "-"
    )
    pairs = [
        ("call", entry.call_id),
        ("status", status_label(entry.status, style)),
        ("code", entry.code.value),
        ("exit code", "-" if entry.exit_code is None else str(entry.exit_code)),
        ("content", entry.content or "-"),
        ("command", one_line(entry.command)),
        ("cwd", entry.cwd or "-"),
        ("workspace", entry.workspace or "-"),
        ("tool", entry.tool_name or "-"),
        ("run / step", f"{entry.run_id or '-'} / {entry.step_id or '-'}"),
        ("idempotency", verdict_label(entry.idempotency, entry.replay_policy, style)),
        ("idempotency key", entry.idempotency_key or "-"),
        ("input hash", entry.input_hash or "-"),
        ("network", "granted" if entry.network_granted else "not granted"),
        ("timeout", f"{entry.timeout_seconds:g}s" if entry.timeout_seconds else "-"),
        ("created", format_time(entry.created_at)),
        ("started", format_time(entry.started_at)),
        ("finished", format_time(entry.finished_at)),
        ("duration", duration),
    ]
    if entry.unexpected_writes:
        pairs.append(("unexpected writes", "yes: the verdict said it would not write files"))
    if entry.unexpected_network:
        pairs.append(
            ("unexpected network", "yes: the verdict said it would only read from its rules' "
             "destinations")
        )  # fmt: skip
    if entry.effects_from_rescan:
        pairs.append(("effects", "from a full rescan (the file watcher overflowed)"))
    if entry.note:
        pairs.append(("note", entry.note))
    return pairs


def _section(title: str, body: str, style: Style) -> str:
    indented = "\n".join(f"  {line}" if line else line for line in body.splitlines())
    return f"{style.paint(title, 'bold')}\n{indented or '  -'}"


def _effects_text(effects: Sequence[FileEffect], style: Style) -> str:
    if not effects:
        return "none"
    rows = [
        [
            Cell(effect.kind.value, "yellow"),
            Cell(f"{short_hash(effect.before_hash)} → {short_hash(effect.after_hash)}"),
            Cell(str(effect.size)),
            Cell(_effect_path(effect)),
        ]
        for effect in effects
    ]
    return table(("KIND", "BEFORE → AFTER", "SIZE", "PATH"), rows, style)


def _network_text(entry: LedgerEntry, style: Style) -> str:
    if not entry.network_effects:
        return "none" if entry.network_granted else "none (no network)"
    rows = [
        [
            Cell(effect.method or "-", "yellow"),
            Cell(
                f"{effect.host}:{effect.port}" + (f" ({effect.address})" if effect.address else "")
            ),
            Cell(effect.path or "-"),
            Cell(
                "refused: " + effect.refused
                if effect.refused
                else f"{effect.bytes_sent} / {effect.bytes_received}"
            ),
        ]
        for effect in entry.network_effects
    ]
    return table(("METHOD", "DESTINATION", "PATH", "SENT / RECEIVED BYTES"), rows, style)


def _effect_path(effect: FileEffect) -> str:
    path = f"{effect.renamed_from} → {effect.path}" if effect.renamed_from else effect.path
    return path + (" (rescan)" if effect.from_rescan else "")


def _output_text(output: CapturedOutput, style: Style) -> str:
    kept = len(output.data)
    facts = f"{output.total_bytes} bytes" + (
        f", truncated: {kept} kept" if output.truncated else ""
    )
    if output.sha256:
        facts += f", sha256 {short_hash(output.sha256)}"
    header = style.paint(f"({facts})", "dim")
    return f"{header}\n{_visible(output.text.rstrip())}" if output.data else header


def _visible(text: str) -> str:
    """Output text safe for a terminal: control characters (escapes, NUL…) become U+FFFD."""
    return _CONTROL.sub("\N{REPLACEMENT CHARACTER}", text)


# --- classify ---------------------------------------------------------------------------


def verdict_text(verdict: Verdict, style: Style) -> str:
    """The verdict in a few lines: idempotency/policy, needs, reason."""
    needs = [
        label
        for flag, label in (
            (verdict.needs_network, "needs network"),
            (verdict.needs_approval, "needs approval"),
        )
        if flag
    ]
    head = verdict_label(verdict.idempotency, verdict.replay_policy, style)
    lines = [head + (f"  ({', '.join(needs)})" if needs else ""), verdict.reason]
    return "\n".join(lines)


_TREE_GLYPHS = {True: ("├─ ", "└─ ", "│  ", "   "), False: ("|- ", "`- ", "|  ", "   ")}


def explain(verdict: Verdict, style: Style) -> str:
    """The verdict, then each part as a tree branch: rule, reason, arguments, decider."""
    glyphs = _TREE_GLYPHS[style.tty]
    lines = [verdict_text(verdict, style), _decided_by(verdict), "parts:"]
    if not verdict.parts:
        lines.append(f"{glyphs[1]}(none: the command was not split into parts)")
    for index, part in enumerate(verdict.parts):
        last = index == len(verdict.parts) - 1
        branch, stem = (glyphs[1], glyphs[3]) if last else (glyphs[0], glyphs[2])
        body = _part_lines(index, part, index == verdict.deciding_part, style)
        lines.append(branch + body[0])
        lines.extend(stem + line for line in body[1:])
    return "\n".join(lines)


def _decided_by(verdict: Verdict) -> str:
    if verdict.deciding_part is None or not 0 <= verdict.deciding_part < len(verdict.parts):
        return "decided by: the command as a whole (no single part)"
    part = verdict.parts[verdict.deciding_part]
    return f"decided by: part {verdict.deciding_part + 1} ({one_line(' '.join(part.argv))})"


def _part_lines(index: int, part: CommandPart, decides: bool, style: Style) -> list[str]:
    where = f"  [in {part.context}]" if part.context else ""
    mark = style.paint("  ◀ decides", "bold") if decides else ""
    head = f"{index + 1}. {one_line(' '.join(part.argv) or part.program)}{where}{mark}"
    program = part.resolved_program or "(not found)"
    lines = [
        head,
        f"verdict: {verdict_label(part.idempotency, part.replay_policy, style)}",
        f"rule:    {part.rule_id or '(no rule)'}",
        f"program: {part.program} → {program}",
        f"why:     {part.reason}",
        f"span:    {part.span[0]}..{part.span[1]}",
    ]
    lines.extend(
        f"arg {fact.index}:   {fact.text!r} {fact.kind.value}"
        + (f" ({fact.note})" if fact.note else "")
        for fact in part.arguments
    )
    return lines


# --- status -----------------------------------------------------------------------------


def status_text(status: DaemonStatus, style: Style) -> str:
    sandbox = "enabled" if status.sandbox_enabled else style.paint("DISABLED", "red")
    pairs = [
        ("daemon", style.paint("reachable", "green") + f", version {status.version}"),
        ("socket", status.socket),
        ("tcp", status.tcp_address or "-"),
        ("state dir", status.state_dir),
        ("ledger", status.ledger_path),
        ("sandbox", f"{sandbox} ({status.sandbox_detail})" if status.sandbox_detail else sandbox),
        *((f"  {c.control}", c.state) for c in status.containment),
        ("running calls", str(status.running_calls)),
        ("uptime", format_duration(status.uptime_seconds)),
    ]
    pairs.extend(("workspace", line) for line in _workspace_lines(status))
    pairs.extend(_path_lines(status.workspace_status))
    pairs.extend(("rules", source) for source in status.rule_sources or ("-",))
    pairs.extend(("tool server", _tool_server_line(server)) for server in status.tool_servers)
    return fields(pairs, style)


def _tool_server_line(server: ToolServerStatus) -> str:
    state = "running" if server.running else "not running"
    if server.failures:
        state += f", {server.failures} failure(s) in a row"
    if server.retry_in:
        state += f", next start in {format_duration(server.retry_in)}"
    if server.last_error:
        state += f"; last error: {server.last_error}"
    return f"{server.name} ({state}, started {server.starts} time(s))"


def _path_lines(workspaces: Sequence[WorkspaceStatus]) -> list[tuple[str, str]]:
    """Each workspace's PATH inside the sandbox (named when there are several), its notes."""
    pairs = []
    for ws in workspaces:
        if ws.path:
            where = f" (in {ws.root})" if len(workspaces) > 1 else ""
            pairs.append(("PATH", ws.path + where))
        pairs.extend(("PATH note", note) for note in ws.path_notes)
    return pairs


def _workspace_lines(status: DaemonStatus) -> list[str]:
    indexed = {ws.root: ws for ws in status.workspace_status}
    roots = list(status.workspaces) + [root for root in indexed if root not in status.workspaces]
    return [
        f"{root} ({_index_state(indexed[root])})" if root in indexed else root
        for root in roots or ["-"]
    ]


def _index_state(workspace: WorkspaceStatus) -> str:
    state, done, total = workspace.state, workspace.files_done, workspace.files_total
    if done < total:
        state += f" {done:,} / {total:,} files"
    elif total:
        state += f", {total:,} files"
    return f"{state}; {workspace.note}" if workspace.note else state
