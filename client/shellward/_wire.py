"""Conversion between protobuf messages and the domain dataclasses of ``shellward.types``.

Used by the daemon's server (domain → wire) and by the client (wire → domain); nothing
else touches generated code.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2, status_pb2

from shellward import types as t
from shellward._exceptions import ProtocolError
from shellward.v1 import shellward_pb2 as pb

# Trailing metadata of an RPC the daemon failed: the domain code (a ``Code`` value), and the
# standard google.rpc.Status whose ErrorInfo (domain ERROR_DOMAIN) carries it too.
CODE_METADATA_KEY = "shellward-code"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "shellward"

# The largest message either side sends or accepts. gRPC's default, 4 MiB, is less than one
# GetCall of a call whose output hit a raised --output-cap (stdout and stderr each up to the
# cap); listings stay below 4 MiB by paging, so clients that keep the default still work.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def channel_options() -> list[tuple[str, int]]:
    """The options of the daemon's servers and the client's channels."""
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]


# Enum tables: one place maps each domain enum to its wire enum and back.
_IDEMPOTENCY: dict[t.Idempotency, Any] = {
    t.Idempotency.IDEMPOTENT: pb.IDEMPOTENCY_IDEMPOTENT,
    t.Idempotency.CONDITIONAL: pb.IDEMPOTENCY_CONDITIONAL,
    t.Idempotency.NON_IDEMPOTENT: pb.IDEMPOTENCY_NON_IDEMPOTENT,
}
_REPLAY_POLICY: dict[t.ReplayPolicy, Any] = {
    t.ReplayPolicy.AUTO: pb.REPLAY_POLICY_AUTO,
    t.ReplayPolicy.ASK: pb.REPLAY_POLICY_ASK,
    t.ReplayPolicy.NEVER: pb.REPLAY_POLICY_NEVER,
}
_STATUS: dict[t.CallStatus, Any] = {
    status: pb.CallStatus.Value(f"CALL_STATUS_{status.name}") for status in t.CallStatus
}
_ARGUMENT_KIND: dict[t.ArgumentKind, Any] = {
    kind: pb.ArgumentKind.Value(f"ARGUMENT_KIND_{kind.name}") for kind in t.ArgumentKind
}
_EFFECT_KIND: dict[t.EffectKind, Any] = {
    kind: pb.EffectKind.Value(f"EFFECT_KIND_{kind.name}") for kind in t.EffectKind
}
_STREAM: dict[t.Stream, Any] = {
    t.Stream.STDOUT: pb.STREAM_STDOUT,
    t.Stream.STDERR: pb.STREAM_STDERR,
}


def _inverse(table: dict) -> dict:  # type: ignore[type-arg]
    return {wire: domain for domain, wire in table.items()}


_IDEMPOTENCY_BACK = _inverse(_IDEMPOTENCY)
_REPLAY_POLICY_BACK = _inverse(_REPLAY_POLICY)
_STATUS_BACK = _inverse(_STATUS)
_ARGUMENT_KIND_BACK = _inverse(_ARGUMENT_KIND)
_EFFECT_KIND_BACK = _inverse(_EFFECT_KIND)
_STREAM_BACK = _inverse(_STREAM)


# Unknown wire values (a newer daemon) read as the strictest domain value.
def idempotency_from_wire(value: int) -> t.Idempotency:
    return _IDEMPOTENCY_BACK.get(value, t.Idempotency.NON_IDEMPOTENT)  # type: ignore[no-any-return]


def replay_policy_from_wire(value: int) -> t.ReplayPolicy:
    return _REPLAY_POLICY_BACK.get(value, t.ReplayPolicy.NEVER)  # type: ignore[no-any-return]


def call_status_from_wire(value: int) -> t.CallStatus:
    return _STATUS_BACK.get(value, t.CallStatus.UNCERTAIN)  # type: ignore[no-any-return]


def code_from_wire(value: str) -> t.Code:
    try:
        return t.Code(value)
    except ValueError:
        return t.Code.INTERNAL


def _timestamp(seconds: float | None) -> Timestamp | None:
    if seconds is None:
        return None
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _seconds(message: object, field: str) -> float | None:
    if not message.HasField(field):  # type: ignore[attr-defined]
        return None
    stamp: Timestamp = getattr(message, field)
    return stamp.ToNanoseconds() / 1e9


# --- domain → wire -----------------------------------------------------------


def verdict_to_wire(verdict: t.Verdict) -> pb.Verdict:
    return pb.Verdict(
        idempotency=_IDEMPOTENCY[verdict.idempotency],
        replay_policy=_REPLAY_POLICY[verdict.replay_policy],
        reason=verdict.reason,
        needs_network=verdict.needs_network,
        needs_approval=verdict.needs_approval,
        parts=[_part_to_wire(part) for part in verdict.parts],
        deciding_part=verdict.deciding_part,
        destinations=list(verdict.destinations),
    )


def _part_to_wire(part: t.CommandPart) -> pb.CommandPart:
    return pb.CommandPart(
        program=part.program,
        resolved_program=part.resolved_program,
        argv=list(part.argv),
        span_start=part.span[0],
        span_end=part.span[1],
        idempotency=_IDEMPOTENCY[part.idempotency],
        replay_policy=_REPLAY_POLICY[part.replay_policy],
        reason=part.reason,
        rule_id=part.rule_id,
        needs_network=part.needs_network,
        needs_approval=part.needs_approval,
        arguments=[
            pb.ArgumentFact(
                index=fact.index, text=fact.text, kind=_ARGUMENT_KIND[fact.kind], note=fact.note
            )
            for fact in part.arguments
        ],
        context=part.context,
        destinations=list(part.destinations),
    )


def effect_to_wire(effect: t.FileEffect) -> pb.FileEffect:
    return pb.FileEffect(
        path=effect.path,
        kind=_EFFECT_KIND[effect.kind],
        before_hash=effect.before_hash,
        after_hash=effect.after_hash,
        size=effect.size,
        renamed_from=effect.renamed_from,
        from_rescan=effect.from_rescan,
        before_mode=effect.before_mode,
    )


def network_effect_to_wire(effect: t.NetworkEffect) -> pb.NetworkEffect:
    return pb.NetworkEffect(**dataclasses.asdict(effect))


def network_effect_from_wire(message: pb.NetworkEffect) -> t.NetworkEffect:
    return t.NetworkEffect(
        host=message.host,
        port=message.port,
        address=message.address,
        method=message.method,
        path=message.path,
        bytes_sent=message.bytes_sent,
        bytes_received=message.bytes_received,
        refused=message.refused,
    )


def output_to_wire(output: t.CapturedOutput) -> pb.CapturedOutput:
    return pb.CapturedOutput(
        data=output.data,
        total_bytes=output.total_bytes,
        truncated=output.truncated,
        sha256=output.sha256,
    )


def chunk_to_wire(chunk: t.OutputChunk) -> pb.OutputChunk:
    return pb.OutputChunk(stream=_STREAM[chunk.stream], data=chunk.data)


def _metadata_to_wire(result: t.CommandResult) -> pb.ResultMetadata:
    return pb.ResultMetadata(
        retryable=result.retryable,
        idempotency=_IDEMPOTENCY[result.idempotency],
        replay_policy=_REPLAY_POLICY[result.replay_policy],
        call_id=result.call_id,
        status=_STATUS[result.status],
        replayed=result.replayed,
        run_id=result.run_id,
        step_id=result.step_id,
    )


def result_to_wire(result: t.CommandResult) -> pb.CommandResult:
    return pb.CommandResult(
        ok=result.ok,
        code=result.code.value,
        content=result.content,
        metadata=_metadata_to_wire(result),
        exit_code=result.exit_code,
        stdout=output_to_wire(result.stdout),
        stderr=output_to_wire(result.stderr),
        verdict=verdict_to_wire(result.verdict) if result.verdict else None,
        file_effects=[effect_to_wire(e) for e in result.file_effects],
        started_at=_timestamp(result.started_at),
        finished_at=_timestamp(result.finished_at),
        network_effects=[network_effect_to_wire(e) for e in result.network_effects],
    )


def entry_to_wire(entry: t.LedgerEntry, *, omit_output: bool = False) -> pb.LedgerEntry:
    empty = t.CapturedOutput()
    return pb.LedgerEntry(
        call_id=entry.call_id,
        run_id=entry.run_id,
        step_id=entry.step_id,
        tool_name=entry.tool_name,
        input_hash=entry.input_hash,
        status=_STATUS[entry.status],
        idempotency=_IDEMPOTENCY[entry.idempotency],
        replay_policy=_REPLAY_POLICY[entry.replay_policy],
        idempotency_key=entry.idempotency_key,
        command=entry.command,
        cwd=entry.cwd,
        workspace=entry.workspace,
        verdict=verdict_to_wire(entry.verdict) if entry.verdict else None,
        file_effects=[effect_to_wire(e) for e in entry.file_effects],
        network_granted=entry.network_granted,
        network_effects=[network_effect_to_wire(e) for e in entry.network_effects],
        unexpected_network=entry.unexpected_network,
        exit_code=entry.exit_code,
        code=entry.code.value,
        content=entry.content,
        stdout=output_to_wire(empty if omit_output else entry.stdout),
        stderr=output_to_wire(empty if omit_output else entry.stderr),
        output_omitted=omit_output,
        timeout_seconds=entry.timeout_seconds,
        created_at=_timestamp(entry.created_at),
        started_at=_timestamp(entry.started_at),
        finished_at=_timestamp(entry.finished_at),
        unexpected_writes=entry.unexpected_writes,
        effects_from_rescan=entry.effects_from_rescan,
        note=entry.note,
        input_json=entry.input_json,
        effects_recorded=entry.effects_recorded,
        output_json="" if omit_output else entry.output_json,
        transitions=[
            pb.Transition(at=_timestamp(step.at), status=_STATUS[step.status], detail=step.detail)
            for step in entry.transitions
        ],
    )


# --- wire → domain -----------------------------------------------------------


def verdict_from_wire(message: pb.Verdict) -> t.Verdict:
    return t.Verdict(
        idempotency=idempotency_from_wire(message.idempotency),
        replay_policy=replay_policy_from_wire(message.replay_policy),
        reason=message.reason,
        needs_network=message.needs_network,
        needs_approval=message.needs_approval,
        parts=tuple(_part_from_wire(part) for part in message.parts),
        deciding_part=message.deciding_part if message.HasField("deciding_part") else None,
        destinations=tuple(message.destinations),
    )


def _part_from_wire(message: pb.CommandPart) -> t.CommandPart:
    return t.CommandPart(
        program=message.program,
        resolved_program=message.resolved_program,
        argv=tuple(message.argv),
        span=(message.span_start, message.span_end),
        idempotency=idempotency_from_wire(message.idempotency),
        replay_policy=replay_policy_from_wire(message.replay_policy),
        reason=message.reason,
        rule_id=message.rule_id,
        needs_network=message.needs_network,
        needs_approval=message.needs_approval,
        arguments=tuple(
            t.ArgumentFact(
                index=fact.index,
                text=fact.text,
                kind=_ARGUMENT_KIND_BACK.get(fact.kind, t.ArgumentKind.OPAQUE),
                note=fact.note,
            )
            for fact in message.arguments
        ),
        context=message.context,
        destinations=tuple(message.destinations),
    )


def effect_from_wire(message: pb.FileEffect) -> t.FileEffect:
    return t.FileEffect(
        path=message.path,
        kind=_EFFECT_KIND_BACK.get(message.kind, t.EffectKind.MODIFIED),
        before_hash=message.before_hash,
        after_hash=message.after_hash,
        size=message.size,
        renamed_from=message.renamed_from,
        from_rescan=message.from_rescan,
        before_mode=message.before_mode,
    )


def output_from_wire(message: pb.CapturedOutput) -> t.CapturedOutput:
    return t.CapturedOutput(
        data=message.data,
        total_bytes=message.total_bytes,
        truncated=message.truncated,
        sha256=message.sha256,
    )


def chunk_from_wire(message: pb.OutputChunk) -> t.OutputChunk:
    return t.OutputChunk(
        stream=_STREAM_BACK.get(message.stream, t.Stream.STDOUT), data=message.data
    )


def _metadata_from_wire(meta: pb.ResultMetadata) -> dict[str, Any]:
    return {
        "call_id": meta.call_id,
        "retryable": meta.retryable,
        "idempotency": idempotency_from_wire(meta.idempotency),
        "replay_policy": replay_policy_from_wire(meta.replay_policy),
        "status": call_status_from_wire(meta.status),
        "replayed": meta.replayed,
        "run_id": meta.run_id,
        "step_id": meta.step_id,
    }


def result_from_wire(message: pb.CommandResult) -> t.CommandResult:
    return t.CommandResult(
        ok=message.ok,
        code=code_from_wire(message.code),
        content=message.content,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        stdout=output_from_wire(message.stdout),
        stderr=output_from_wire(message.stderr),
        verdict=verdict_from_wire(message.verdict) if message.HasField("verdict") else None,
        file_effects=tuple(effect_from_wire(e) for e in message.file_effects),
        started_at=_seconds(message, "started_at"),
        finished_at=_seconds(message, "finished_at"),
        network_effects=tuple(network_effect_from_wire(e) for e in message.network_effects),
        **_metadata_from_wire(message.metadata),
    )


def tool_result_to_wire(result: t.CommandResult) -> pb.ToolResult:
    """A tool call's answer: its raw bytes travel as ``data``, its JSON as ``output``."""
    output = Struct()
    if result.output_json:
        output.update(json.loads(result.output_json))
    return pb.ToolResult(
        ok=result.ok,
        code=result.code.value,
        content=result.content,
        metadata=_metadata_to_wire(result),
        output=output,
        data=result.stdout.data,
        file_effects=[effect_to_wire(e) for e in result.file_effects],
        idempotency_key=result.idempotency_key,
        output_json=result.output_json,
        data_total_bytes=result.stdout.total_bytes,
        data_truncated=result.stdout.truncated,
        data_sha256=result.stdout.sha256,
    )


def tool_result_from_wire(message: pb.ToolResult) -> t.CommandResult:
    return t.CommandResult(
        ok=message.ok,
        code=code_from_wire(message.code),
        content=message.content,
        stdout=t.CapturedOutput(
            message.data,
            # A daemon older than these fields sent its whole answer.
            message.data_total_bytes or len(message.data),
            message.data_truncated,
            message.data_sha256,
        ),
        file_effects=tuple(effect_from_wire(e) for e in message.file_effects),
        output_json=message.output_json,
        idempotency_key=message.idempotency_key,
        **_metadata_from_wire(message.metadata),
    )


def entry_from_wire(message: pb.LedgerEntry) -> t.LedgerEntry:
    return t.LedgerEntry(
        call_id=message.call_id,
        run_id=message.run_id,
        step_id=message.step_id,
        tool_name=message.tool_name,
        input_hash=message.input_hash,
        status=call_status_from_wire(message.status),
        idempotency=idempotency_from_wire(message.idempotency),
        replay_policy=replay_policy_from_wire(message.replay_policy),
        command=message.command,
        cwd=message.cwd,
        workspace=message.workspace,
        idempotency_key=message.idempotency_key,
        verdict=verdict_from_wire(message.verdict) if message.HasField("verdict") else None,
        file_effects=tuple(effect_from_wire(e) for e in message.file_effects),
        network_granted=message.network_granted,
        network_effects=tuple(network_effect_from_wire(e) for e in message.network_effects),
        unexpected_network=message.unexpected_network,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        code=code_from_wire(message.code),
        content=message.content,
        stdout=output_from_wire(message.stdout),
        stderr=output_from_wire(message.stderr),
        timeout_seconds=message.timeout_seconds,
        created_at=_seconds(message, "created_at") or 0.0,
        started_at=_seconds(message, "started_at"),
        finished_at=_seconds(message, "finished_at"),
        unexpected_writes=message.unexpected_writes,
        effects_from_rescan=message.effects_from_rescan,
        note=message.note,
        input_json=message.input_json,
        effects_recorded=message.effects_recorded,
        output_json=message.output_json,
        transitions=tuple(
            t.Transition(
                at=_seconds(step, "at") or 0.0,
                status=call_status_from_wire(step.status),
                detail=step.detail,
            )
            for step in message.transitions
        ),
        output_omitted=message.output_omitted,
    )


def daemon_status_to_wire(status: t.DaemonStatus) -> pb.StatusResponse:
    return pb.StatusResponse(
        version=status.version,
        socket=status.socket,
        state_dir=status.state_dir,
        ledger_path=status.ledger_path,
        sandbox_enabled=status.sandbox_enabled,
        sandbox_detail=status.sandbox_detail,
        workspaces=list(status.workspaces),
        running_calls=status.running_calls,
        uptime_seconds=status.uptime_seconds,
        rule_sources=list(status.rule_sources),
        tcp_address=status.tcp_address,
        workspace_status=[
            pb.WorkspaceStatus(
                root=w.root,
                state=w.state,
                files_done=w.files_done,
                files_total=w.files_total,
                note=w.note,
                path=w.path,
                path_notes=list(w.path_notes),
            )
            for w in status.workspace_status
        ],
        # Same field names on both sides.
        tool_servers=[pb.ToolServerStatus(**asdict(server)) for server in status.tool_servers],
        containment=[
            pb.ContainmentControl(control=c.control, state=c.state) for c in status.containment
        ],
    )


def daemon_status_from_wire(message: pb.StatusResponse) -> t.DaemonStatus:
    return t.DaemonStatus(
        version=message.version,
        socket=message.socket,
        state_dir=message.state_dir,
        ledger_path=message.ledger_path,
        sandbox_enabled=message.sandbox_enabled,
        sandbox_detail=message.sandbox_detail,
        workspaces=tuple(message.workspaces),
        running_calls=message.running_calls,
        uptime_seconds=message.uptime_seconds,
        rule_sources=tuple(message.rule_sources),
        tcp_address=message.tcp_address,
        workspace_status=tuple(
            t.WorkspaceStatus(
                root=w.root,
                state=w.state,
                files_done=w.files_done,
                files_total=w.files_total,
                note=w.note,
                path=w.path,
                path_notes=tuple(w.path_notes),
            )
            for w in message.workspace_status
        ),
        tool_servers=tuple(
            t.ToolServerStatus(
                **{f.name: getattr(server, f.name) for f in fields(t.ToolServerStatus)}
            )
            for server in message.tool_servers
        ),
        containment=tuple(
            t.ContainmentControl(control=c.control, state=c.state) for c in message.containment
        ),
    )


def recovery_from_wire(message: pb.RecoveryItem) -> t.RecoveryItem:
    return t.RecoveryItem(
        call=entry_from_wire(message.call), action=message.action, reason=message.reason
    )


def tool_info_to_wire(info: t.ToolInfo) -> pb.ToolInfo:
    schema = Struct()
    schema.update(json.loads(info.input_schema_json))
    return pb.ToolInfo(
        name=info.name,
        server=info.server,
        description=info.description,
        idempotency=_IDEMPOTENCY[info.idempotency],
        replay_policy=_REPLAY_POLICY[info.replay_policy],
        reason=info.reason,
        source=info.source,
        trust=info.trust,
        needs_approval=info.needs_approval,
        changed=info.changed,
        input_schema=schema,
    )


def tool_info_from_wire(message: pb.ToolInfo) -> t.ToolInfo:
    return t.ToolInfo(
        name=message.name,
        server=message.server,
        description=message.description,
        idempotency=idempotency_from_wire(message.idempotency),
        replay_policy=replay_policy_from_wire(message.replay_policy),
        reason=message.reason,
        source=message.source,
        trust=message.trust,
        needs_approval=message.needs_approval,
        changed=message.changed,
        input_schema_json=json.dumps(MessageToDict(message.input_schema)),
    )


def rule_check_to_wire(check: t.RuleFileCheck) -> pb.RuleFileCheck:
    return pb.RuleFileCheck(path=check.path, layer=check.layer.value, problems=check.problems)


def rule_check_from_wire(message: pb.RuleFileCheck) -> t.RuleFileCheck:
    try:
        layer = t.RuleLayer(message.layer)
    except ValueError:
        # A newer daemon's layer: say so rather than guess how it treats the file.
        raise ProtocolError(
            f"the daemon checked {message.path} as {message.layer!r}, a layer this client "
            "does not know; upgrade shellward"
        ) from None
    return t.RuleFileCheck(message.path, layer, tuple(message.problems))


_TOOL_SERVER_FIELDS = tuple(f.name for f in fields(t.ToolServerStatus))


@dataclass(frozen=True)
class ErrorDetails:
    """What the daemon said about an error besides its sentence: its domain code and the
    ErrorInfo metadata (``retryable``, ``call_id``, ...)."""

    code: t.Code | None
    metadata: dict[str, str]


def error_details(metadata: Any) -> ErrorDetails:
    """The google.rpc.Status details in an RPC's trailing metadata (an ErrorInfo from the
    daemon), else the older ``shellward-code`` entry alone."""
    fallback = None
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for any_detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if any_detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                    return ErrorDetails(_code(info.reason), dict(info.metadata))
        if key == CODE_METADATA_KEY:
            fallback = _code(value.decode() if isinstance(value, bytes) else value)
    return ErrorDetails(fallback, {})


def _code(text: str) -> t.Code | None:
    return next((code for code in t.Code if code.value == text), None)
