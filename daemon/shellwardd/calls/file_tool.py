"""The file tool kind: read_file, list_files, write_file, apply_patch, run by the daemon.

A tool checks its arguments and prepares its work before the call is recorded as started
(``shellwardd.builtin_tools``, which also says what the model reads of each answer); a
write then runs alone in its workspace, keeps the content it replaces in the blob store
(what ``shellward undo`` puts back), and is watched like a command.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

from shellward.types import CallStatus, Code, LedgerEntry
from shellwardd import requests
from shellwardd.builtin_tools import BUILTIN_TOOLS, BuiltinTool, Prepared
from shellwardd.config import Config
from shellwardd.errors import ShellwardError
from shellwardd.outcomes import captured
from shellwardd.requests import ToolRequest
from shellwardd.staging.blobs import BlobStore, store_path

from .lifecycle import CallListener, Execution, Plan, ToolRequests, planned_entry


class FileToolKind(ToolRequests):
    def __init__(self, config: Config) -> None:
        self._config = config
        self._blobs = BlobStore(store_path(config.state_dir))

    def planned(self, call_id: str, input_hash: str, request: ToolRequest) -> LedgerEntry:
        tool = BUILTIN_TOOLS[request.tool]
        return planned_entry(
            call_id, input_hash, request, tool.name, tool.summary(request.arguments), tool.verdict
        )

    def plan(self, entry: LedgerEntry, request: ToolRequest) -> Plan:
        tool = BUILTIN_TOOLS[request.tool]
        timeout = requests.check_timeout(self._config, request.timeout_seconds)
        workspace, cwd = requests.resolve_cwd(self._config, request.cwd)
        prepared = tool.prepare(workspace, request.arguments, self._config, self._blobs)
        entry = replace(
            entry,
            cwd=str(cwd),
            workspace=str(workspace),
            timeout_seconds=timeout,
            input_json=requests.tool_to_json(request),
        )
        return Plan(entry, tool.verdict, _execution(tool, prepared, self._config.output_cap_bytes))

    def resume(self, entry: LedgerEntry) -> Execution:
        request = requests.tool_from_json(entry.input_json)
        tool = BUILTIN_TOOLS[request.tool]
        arguments = dict(request.arguments)
        if entry.code is Code.CONFLICT:
            # The human approved writing over someone else's change: the stale base_hash
            # that caused the conflict must not refuse it now.
            arguments.pop("base_hash", None)
        prepared = tool.prepare(Path(entry.workspace), arguments, self._config, self._blobs)
        return _execution(tool, prepared, self._config.output_cap_bytes)


def _execution(tool: BuiltinTool, prepared: Prepared, cap: int) -> Execution:
    def work(started: LedgerEntry, cancel: threading.Event, listener: CallListener) -> LedgerEntry:
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
            stdout=captured(answer.data, cap),
            output_json=json.dumps(answer.output, ensure_ascii=False),
            finished_at=time.time(),
        )

    return Execution(work, exclusive=tool.writes)
