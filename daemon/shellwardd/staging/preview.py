"""Preview before approval: a call that needs a human runs staged first, and the approval
request shows its exact file changes; approving commits that very result.

Choices, and why
- **Only where a run changes nothing but the overlay**: a command that needs approval and
  has no network (no rule grants it, the request does not ask). Its writes stay in its
  upper layer; nothing else it could do outlives the sandbox. A command with network gets
  no preview: running it would be the effect the human is asked about.
- **The human sees a unified diff**, capped (:data:`DIFF_CAP` characters), in the pending
  call's sentence (``shellward approvals``, ListApprovals): binary files and symlinks are
  named, not shown.
- **Approving commits the preview's result, no second run.** The preview's outcome (exit
  status, output) and effects are kept beside its upper layer (``preview.json``); the
  approved call is started, checked against the before hashes and committed like any
  staged call, so a workspace changed since the preview is a CONFLICT, never a blind
  apply. Denying discards it.
"""

from __future__ import annotations

import base64
import difflib
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from shellward.types import CallStatus, CapturedOutput, Code, EffectKind, FileEffect, LedgerEntry

from .area import StagedDirs

PREVIEW_FILE = "preview.json"
DIFF_CAP = 8192


def save(dirs: StagedDirs, final: LedgerEntry, effects: tuple[FileEffect, ...]) -> None:
    record = {
        "status": final.status.value,
        "code": final.code.value,
        "content": final.content,
        "exit_code": final.exit_code,
        "stdout": _output_to_json(final.stdout),
        "stderr": _output_to_json(final.stderr),
        "effects": [{**asdict(e), "kind": e.kind.value} for e in effects],
    }
    (dirs.root / PREVIEW_FILE).write_text(json.dumps(record))


def load(root: Path, started: LedgerEntry) -> tuple[LedgerEntry, tuple[FileEffect, ...]]:
    """The preview's outcome as the approved call's, and its effects."""
    record: dict[str, Any] = json.loads((root / PREVIEW_FILE).read_text())
    effects = tuple(FileEffect(**{**e, "kind": EffectKind(e["kind"])}) for e in record["effects"])
    final = replace(
        started,
        status=CallStatus(record["status"]),
        code=Code(record["code"]),
        content=record["content"],
        exit_code=record["exit_code"],
        stdout=_output_from_json(record["stdout"]),
        stderr=_output_from_json(record["stderr"]),
    )
    return final, effects


def unified_diff(workspace: Path, upper: Path, effects: tuple[FileEffect, ...]) -> str:
    """What the preview changed, as a unified diff capped at DIFF_CAP characters."""
    parts: list[str] = []
    for effect in effects:
        if effect.path.endswith("/"):
            parts.append(f"{effect.kind.value} directory {effect.path}\n")
            continue
        old_path = effect.renamed_from or effect.path
        before = _text(workspace / old_path) if effect.before_hash else ""
        after = _text(upper / effect.path) if effect.after_hash else ""
        if before is None or after is None:
            parts.append(f"{effect.kind.value} {effect.path} (binary or a symlink)\n")
            continue
        parts.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=f"a/{old_path}" if effect.before_hash else "/dev/null",
                tofile=f"b/{effect.path}" if effect.after_hash else "/dev/null",
            )
        )
        if effect.kind is EffectKind.RENAMED and before == after:
            parts.append(f"renamed {old_path} -> {effect.path}\n")
    text = "".join(part if part.endswith("\n") else f"{part}\n" for part in parts)
    if len(text) > DIFF_CAP:
        text = text[:DIFF_CAP] + f"\n[diff cut at {DIFF_CAP} characters]\n"
    return text


def _text(path: Path) -> str | None:
    if path.is_symlink():
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _output_to_json(output: CapturedOutput) -> dict[str, Any]:
    return {**asdict(output), "data": base64.b64encode(output.data).decode()}


def _output_from_json(data: dict[str, Any]) -> CapturedOutput:
    return CapturedOutput(**{**data, "data": base64.b64decode(data["data"])})
