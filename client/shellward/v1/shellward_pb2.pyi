import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Idempotency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IDEMPOTENCY_UNSPECIFIED: _ClassVar[Idempotency]
    IDEMPOTENCY_IDEMPOTENT: _ClassVar[Idempotency]
    IDEMPOTENCY_CONDITIONAL: _ClassVar[Idempotency]
    IDEMPOTENCY_NON_IDEMPOTENT: _ClassVar[Idempotency]

class ReplayPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLAY_POLICY_UNSPECIFIED: _ClassVar[ReplayPolicy]
    REPLAY_POLICY_AUTO: _ClassVar[ReplayPolicy]
    REPLAY_POLICY_ASK: _ClassVar[ReplayPolicy]
    REPLAY_POLICY_NEVER: _ClassVar[ReplayPolicy]

class CallStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_STATUS_UNSPECIFIED: _ClassVar[CallStatus]
    CALL_STATUS_PLANNED: _ClassVar[CallStatus]
    CALL_STATUS_PENDING_APPROVAL: _ClassVar[CallStatus]
    CALL_STATUS_APPROVED: _ClassVar[CallStatus]
    CALL_STATUS_DENIED: _ClassVar[CallStatus]
    CALL_STATUS_STARTED: _ClassVar[CallStatus]
    CALL_STATUS_SUCCEEDED: _ClassVar[CallStatus]
    CALL_STATUS_FAILED: _ClassVar[CallStatus]
    CALL_STATUS_UNCERTAIN: _ClassVar[CallStatus]
    CALL_STATUS_COMMITTING: _ClassVar[CallStatus]
    CALL_STATUS_COMMITTED: _ClassVar[CallStatus]

class ArgumentKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARGUMENT_KIND_UNSPECIFIED: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_PROGRAM: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_SUBCOMMAND: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_FLAG: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_FILE_READ: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_FILE_WRITE: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_EXEC_HOOK: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_NETWORK: _ClassVar[ArgumentKind]
    ARGUMENT_KIND_OPAQUE: _ClassVar[ArgumentKind]

class EffectKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_KIND_UNSPECIFIED: _ClassVar[EffectKind]
    EFFECT_KIND_CREATED: _ClassVar[EffectKind]
    EFFECT_KIND_MODIFIED: _ClassVar[EffectKind]
    EFFECT_KIND_DELETED: _ClassVar[EffectKind]
    EFFECT_KIND_RENAMED: _ClassVar[EffectKind]

class Stream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAM_UNSPECIFIED: _ClassVar[Stream]
    STREAM_STDOUT: _ClassVar[Stream]
    STREAM_STDERR: _ClassVar[Stream]
IDEMPOTENCY_UNSPECIFIED: Idempotency
IDEMPOTENCY_IDEMPOTENT: Idempotency
IDEMPOTENCY_CONDITIONAL: Idempotency
IDEMPOTENCY_NON_IDEMPOTENT: Idempotency
REPLAY_POLICY_UNSPECIFIED: ReplayPolicy
REPLAY_POLICY_AUTO: ReplayPolicy
REPLAY_POLICY_ASK: ReplayPolicy
REPLAY_POLICY_NEVER: ReplayPolicy
CALL_STATUS_UNSPECIFIED: CallStatus
CALL_STATUS_PLANNED: CallStatus
CALL_STATUS_PENDING_APPROVAL: CallStatus
CALL_STATUS_APPROVED: CallStatus
CALL_STATUS_DENIED: CallStatus
CALL_STATUS_STARTED: CallStatus
CALL_STATUS_SUCCEEDED: CallStatus
CALL_STATUS_FAILED: CallStatus
CALL_STATUS_UNCERTAIN: CallStatus
CALL_STATUS_COMMITTING: CallStatus
CALL_STATUS_COMMITTED: CallStatus
ARGUMENT_KIND_UNSPECIFIED: ArgumentKind
ARGUMENT_KIND_PROGRAM: ArgumentKind
ARGUMENT_KIND_SUBCOMMAND: ArgumentKind
ARGUMENT_KIND_FLAG: ArgumentKind
ARGUMENT_KIND_FILE_READ: ArgumentKind
ARGUMENT_KIND_FILE_WRITE: ArgumentKind
ARGUMENT_KIND_EXEC_HOOK: ArgumentKind
ARGUMENT_KIND_NETWORK: ArgumentKind
ARGUMENT_KIND_OPAQUE: ArgumentKind
EFFECT_KIND_UNSPECIFIED: EffectKind
EFFECT_KIND_CREATED: EffectKind
EFFECT_KIND_MODIFIED: EffectKind
EFFECT_KIND_DELETED: EffectKind
EFFECT_KIND_RENAMED: EffectKind
STREAM_UNSPECIFIED: Stream
STREAM_STDOUT: Stream
STREAM_STDERR: Stream

class RunCommandRequest(_message.Message):
    __slots__ = ("command", "cwd", "env", "timeout_seconds", "run_id", "step_id", "network", "rerun", "limits", "stdin")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    RERUN_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    timeout_seconds: float
    run_id: str
    step_id: str
    network: NetworkRequest
    rerun: bool
    limits: ResourceLimits
    stdin: bytes
    def __init__(self, command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., timeout_seconds: _Optional[float] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., network: _Optional[_Union[NetworkRequest, _Mapping]] = ..., rerun: _Optional[bool] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., stdin: _Optional[bytes] = ...) -> None: ...

class NetworkRequest(_message.Message):
    __slots__ = ("allow",)
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    allow: bool
    def __init__(self, allow: _Optional[bool] = ...) -> None: ...

class ResourceLimits(_message.Message):
    __slots__ = ("cpu_seconds", "address_space_bytes", "max_processes", "file_size_bytes")
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_SPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_seconds: int
    address_space_bytes: int
    max_processes: int
    file_size_bytes: int
    def __init__(self, cpu_seconds: _Optional[int] = ..., address_space_bytes: _Optional[int] = ..., max_processes: _Optional[int] = ..., file_size_bytes: _Optional[int] = ...) -> None: ...

class RunCommandEvent(_message.Message):
    __slots__ = ("accepted", "output", "result")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    accepted: CallAccepted
    output: OutputChunk
    result: CommandResult
    def __init__(self, accepted: _Optional[_Union[CallAccepted, _Mapping]] = ..., output: _Optional[_Union[OutputChunk, _Mapping]] = ..., result: _Optional[_Union[CommandResult, _Mapping]] = ...) -> None: ...

class CallAccepted(_message.Message):
    __slots__ = ("call_id", "verdict")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    verdict: Verdict
    def __init__(self, call_id: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, _Mapping]] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("stream", "data")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    stream: Stream
    data: bytes
    def __init__(self, stream: _Optional[_Union[Stream, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CapturedOutput(_message.Message):
    __slots__ = ("data", "total_bytes", "truncated", "sha256")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    total_bytes: int
    truncated: bool
    sha256: str
    def __init__(self, data: _Optional[bytes] = ..., total_bytes: _Optional[int] = ..., truncated: _Optional[bool] = ..., sha256: _Optional[str] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("ok", "code", "content", "metadata", "exit_code", "stdout", "stderr", "verdict", "file_effects", "started_at", "finished_at", "network_effects")
    OK_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    FILE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    NETWORK_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    code: str
    content: str
    metadata: ResultMetadata
    exit_code: int
    stdout: CapturedOutput
    stderr: CapturedOutput
    verdict: Verdict
    file_effects: _containers.RepeatedCompositeFieldContainer[FileEffect]
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    network_effects: _containers.RepeatedCompositeFieldContainer[NetworkEffect]
    def __init__(self, ok: _Optional[bool] = ..., code: _Optional[str] = ..., content: _Optional[str] = ..., metadata: _Optional[_Union[ResultMetadata, _Mapping]] = ..., exit_code: _Optional[int] = ..., stdout: _Optional[_Union[CapturedOutput, _Mapping]] = ..., stderr: _Optional[_Union[CapturedOutput, _Mapping]] = ..., verdict: _Optional[_Union[Verdict, _Mapping]] = ..., file_effects: _Optional[_Iterable[_Union[FileEffect, _Mapping]]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., network_effects: _Optional[_Iterable[_Union[NetworkEffect, _Mapping]]] = ...) -> None: ...

class ResultMetadata(_message.Message):
    __slots__ = ("retryable", "idempotency", "replay_policy", "call_id", "status", "replayed", "run_id", "step_id")
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    REPLAY_POLICY_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    retryable: bool
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    call_id: str
    status: CallStatus
    replayed: bool
    run_id: str
    step_id: str
    def __init__(self, retryable: _Optional[bool] = ..., idempotency: _Optional[_Union[Idempotency, str]] = ..., replay_policy: _Optional[_Union[ReplayPolicy, str]] = ..., call_id: _Optional[str] = ..., status: _Optional[_Union[CallStatus, str]] = ..., replayed: _Optional[bool] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ...) -> None: ...

class Verdict(_message.Message):
    __slots__ = ("idempotency", "replay_policy", "reason", "needs_network", "needs_approval", "parts", "deciding_part", "destinations")
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    REPLAY_POLICY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NEEDS_NETWORK_FIELD_NUMBER: _ClassVar[int]
    NEEDS_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    DECIDING_PART_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    needs_network: bool
    needs_approval: bool
    parts: _containers.RepeatedCompositeFieldContainer[CommandPart]
    deciding_part: int
    destinations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, idempotency: _Optional[_Union[Idempotency, str]] = ..., replay_policy: _Optional[_Union[ReplayPolicy, str]] = ..., reason: _Optional[str] = ..., needs_network: _Optional[bool] = ..., needs_approval: _Optional[bool] = ..., parts: _Optional[_Iterable[_Union[CommandPart, _Mapping]]] = ..., deciding_part: _Optional[int] = ..., destinations: _Optional[_Iterable[str]] = ...) -> None: ...

class CommandPart(_message.Message):
    __slots__ = ("program", "resolved_program", "argv", "span_start", "span_end", "idempotency", "replay_policy", "reason", "rule_id", "needs_network", "needs_approval", "arguments", "context", "destinations")
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_PROGRAM_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    SPAN_START_FIELD_NUMBER: _ClassVar[int]
    SPAN_END_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    REPLAY_POLICY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    NEEDS_NETWORK_FIELD_NUMBER: _ClassVar[int]
    NEEDS_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    program: str
    resolved_program: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    span_start: int
    span_end: int
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    rule_id: str
    needs_network: bool
    needs_approval: bool
    arguments: _containers.RepeatedCompositeFieldContainer[ArgumentFact]
    context: str
    destinations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, program: _Optional[str] = ..., resolved_program: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., span_start: _Optional[int] = ..., span_end: _Optional[int] = ..., idempotency: _Optional[_Union[Idempotency, str]] = ..., replay_policy: _Optional[_Union[ReplayPolicy, str]] = ..., reason: _Optional[str] = ..., rule_id: _Optional[str] = ..., needs_network: _Optional[bool] = ..., needs_approval: _Optional[bool] = ..., arguments: _Optional[_Iterable[_Union[ArgumentFact, _Mapping]]] = ..., context: _Optional[str] = ..., destinations: _Optional[_Iterable[str]] = ...) -> None: ...

class ArgumentFact(_message.Message):
    __slots__ = ("index", "text", "kind", "note")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    kind: ArgumentKind
    note: str
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., kind: _Optional[_Union[ArgumentKind, str]] = ..., note: _Optional[str] = ...) -> None: ...

class FileEffect(_message.Message):
    __slots__ = ("path", "kind", "before_hash", "after_hash", "size", "renamed_from", "from_rescan", "before_mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BEFORE_HASH_FIELD_NUMBER: _ClassVar[int]
    AFTER_HASH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    RENAMED_FROM_FIELD_NUMBER: _ClassVar[int]
    FROM_RESCAN_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    kind: EffectKind
    before_hash: str
    after_hash: str
    size: int
    renamed_from: str
    from_rescan: bool
    before_mode: int
    def __init__(self, path: _Optional[str] = ..., kind: _Optional[_Union[EffectKind, str]] = ..., before_hash: _Optional[str] = ..., after_hash: _Optional[str] = ..., size: _Optional[int] = ..., renamed_from: _Optional[str] = ..., from_rescan: _Optional[bool] = ..., before_mode: _Optional[int] = ...) -> None: ...

class NetworkEffect(_message.Message):
    __slots__ = ("host", "port", "address", "method", "path", "bytes_sent", "bytes_received", "refused")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    address: str
    method: str
    path: str
    bytes_sent: int
    bytes_received: int
    refused: str
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., address: _Optional[str] = ..., method: _Optional[str] = ..., path: _Optional[str] = ..., bytes_sent: _Optional[int] = ..., bytes_received: _Optional[int] = ..., refused: _Optional[str] = ...) -> None: ...

class LedgerEntry(_message.Message):
    __slots__ = ("call_id", "run_id", "step_id", "tool_name", "input_hash", "status", "idempotency", "replay_policy", "idempotency_key", "command", "cwd", "workspace", "verdict", "file_effects", "network_granted", "exit_code", "code", "content", "stdout", "stderr", "timeout_seconds", "created_at", "started_at", "finished_at", "unexpected_writes", "effects_from_rescan", "note", "input_json", "effects_recorded", "output_json", "transitions", "output_omitted", "network_effects", "unexpected_network")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_HASH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    REPLAY_POLICY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    FILE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_GRANTED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    UNEXPECTED_WRITES_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_FROM_RESCAN_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_RECORDED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_OMITTED_FIELD_NUMBER: _ClassVar[int]
    NETWORK_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    UNEXPECTED_NETWORK_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    run_id: str
    step_id: str
    tool_name: str
    input_hash: str
    status: CallStatus
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    idempotency_key: str
    command: str
    cwd: str
    workspace: str
    verdict: Verdict
    file_effects: _containers.RepeatedCompositeFieldContainer[FileEffect]
    network_granted: bool
    exit_code: int
    code: str
    content: str
    stdout: CapturedOutput
    stderr: CapturedOutput
    timeout_seconds: float
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    unexpected_writes: bool
    effects_from_rescan: bool
    note: str
    input_json: str
    effects_recorded: bool
    output_json: str
    transitions: _containers.RepeatedCompositeFieldContainer[Transition]
    output_omitted: bool
    network_effects: _containers.RepeatedCompositeFieldContainer[NetworkEffect]
    unexpected_network: bool
    def __init__(self, call_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input_hash: _Optional[str] = ..., status: _Optional[_Union[CallStatus, str]] = ..., idempotency: _Optional[_Union[Idempotency, str]] = ..., replay_policy: _Optional[_Union[ReplayPolicy, str]] = ..., idempotency_key: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., workspace: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, _Mapping]] = ..., file_effects: _Optional[_Iterable[_Union[FileEffect, _Mapping]]] = ..., network_granted: _Optional[bool] = ..., exit_code: _Optional[int] = ..., code: _Optional[str] = ..., content: _Optional[str] = ..., stdout: _Optional[_Union[CapturedOutput, _Mapping]] = ..., stderr: _Optional[_Union[CapturedOutput, _Mapping]] = ..., timeout_seconds: _Optional[float] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., unexpected_writes: _Optional[bool] = ..., effects_from_rescan: _Optional[bool] = ..., note: _Optional[str] = ..., input_json: _Optional[str] = ..., effects_recorded: _Optional[bool] = ..., output_json: _Optional[str] = ..., transitions: _Optional[_Iterable[_Union[Transition, _Mapping]]] = ..., output_omitted: _Optional[bool] = ..., network_effects: _Optional[_Iterable[_Union[NetworkEffect, _Mapping]]] = ..., unexpected_network: _Optional[bool] = ...) -> None: ...

class Transition(_message.Message):
    __slots__ = ("at", "status", "detail")
    AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    status: CallStatus
    detail: str
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[CallStatus, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("command", "cwd")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    command: str
    cwd: str
    def __init__(self, command: _Optional[str] = ..., cwd: _Optional[str] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("verdict",)
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    def __init__(self, verdict: _Optional[_Union[Verdict, _Mapping]] = ...) -> None: ...

class GetCallRequest(_message.Message):
    __slots__ = ("call_id", "run_id", "step_id")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    run_id: str
    step_id: str
    def __init__(self, call_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ...) -> None: ...

class ListCallsRequest(_message.Message):
    __slots__ = ("run_id", "limit", "omit_output", "page_token", "include_output")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OMIT_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    limit: int
    omit_output: bool
    page_token: str
    include_output: bool
    def __init__(self, run_id: _Optional[str] = ..., limit: _Optional[int] = ..., omit_output: _Optional[bool] = ..., page_token: _Optional[str] = ..., include_output: _Optional[bool] = ...) -> None: ...

class ListCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[LedgerEntry]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[LedgerEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "socket", "state_dir", "ledger_path", "sandbox_enabled", "sandbox_detail", "workspaces", "running_calls", "uptime_seconds", "workspace_status", "rule_sources", "tcp_address", "containment", "tool_servers")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    LEDGER_PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ENABLED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_DETAIL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_CALLS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_STATUS_FIELD_NUMBER: _ClassVar[int]
    RULE_SOURCES_FIELD_NUMBER: _ClassVar[int]
    TCP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONTAINMENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_SERVERS_FIELD_NUMBER: _ClassVar[int]
    version: str
    socket: str
    state_dir: str
    ledger_path: str
    sandbox_enabled: bool
    sandbox_detail: str
    workspaces: _containers.RepeatedScalarFieldContainer[str]
    running_calls: int
    uptime_seconds: float
    workspace_status: _containers.RepeatedCompositeFieldContainer[WorkspaceStatus]
    rule_sources: _containers.RepeatedScalarFieldContainer[str]
    tcp_address: str
    containment: _containers.RepeatedCompositeFieldContainer[ContainmentControl]
    tool_servers: _containers.RepeatedCompositeFieldContainer[ToolServerStatus]
    def __init__(self, version: _Optional[str] = ..., socket: _Optional[str] = ..., state_dir: _Optional[str] = ..., ledger_path: _Optional[str] = ..., sandbox_enabled: _Optional[bool] = ..., sandbox_detail: _Optional[str] = ..., workspaces: _Optional[_Iterable[str]] = ..., running_calls: _Optional[int] = ..., uptime_seconds: _Optional[float] = ..., workspace_status: _Optional[_Iterable[_Union[WorkspaceStatus, _Mapping]]] = ..., rule_sources: _Optional[_Iterable[str]] = ..., tcp_address: _Optional[str] = ..., containment: _Optional[_Iterable[_Union[ContainmentControl, _Mapping]]] = ..., tool_servers: _Optional[_Iterable[_Union[ToolServerStatus, _Mapping]]] = ...) -> None: ...

class ToolServerStatus(_message.Message):
    __slots__ = ("name", "running", "starts", "failures", "retry_in", "last_error")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    RETRY_IN_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    name: str
    running: bool
    starts: int
    failures: int
    retry_in: float
    last_error: str
    def __init__(self, name: _Optional[str] = ..., running: _Optional[bool] = ..., starts: _Optional[int] = ..., failures: _Optional[int] = ..., retry_in: _Optional[float] = ..., last_error: _Optional[str] = ...) -> None: ...

class ContainmentControl(_message.Message):
    __slots__ = ("control", "state")
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    control: str
    state: str
    def __init__(self, control: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class WorkspaceStatus(_message.Message):
    __slots__ = ("root", "state", "files_done", "files_total", "note", "path", "path_notes")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FILES_DONE_FIELD_NUMBER: _ClassVar[int]
    FILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATH_NOTES_FIELD_NUMBER: _ClassVar[int]
    root: str
    state: str
    files_done: int
    files_total: int
    note: str
    path: str
    path_notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, root: _Optional[str] = ..., state: _Optional[str] = ..., files_done: _Optional[int] = ..., files_total: _Optional[int] = ..., note: _Optional[str] = ..., path: _Optional[str] = ..., path_notes: _Optional[_Iterable[str]] = ...) -> None: ...

class ReloadRulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadRulesResponse(_message.Message):
    __slots__ = ("ok", "error", "rule_sources")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RULE_SOURCES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    rule_sources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., rule_sources: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplayRequest(_message.Message):
    __slots__ = ("call_id", "run_id", "step_id", "rerun")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    RERUN_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    run_id: str
    step_id: str
    rerun: bool
    def __init__(self, call_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., rerun: _Optional[bool] = ...) -> None: ...

class RecoverRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class RecoverResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[RecoveryItem]
    def __init__(self, items: _Optional[_Iterable[_Union[RecoveryItem, _Mapping]]] = ...) -> None: ...

class RecoveryItem(_message.Message):
    __slots__ = ("call", "action", "reason")
    CALL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call: LedgerEntry
    action: str
    reason: str
    def __init__(self, call: _Optional[_Union[LedgerEntry, _Mapping]] = ..., action: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WaitCallRequest(_message.Message):
    __slots__ = ("call_id", "timeout_seconds")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    timeout_seconds: float
    def __init__(self, call_id: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ("call_id", "approve", "reason")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    approve: bool
    reason: str
    def __init__(self, call_id: _Optional[str] = ..., approve: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelCallRequest(_message.Message):
    __slots__ = ("call_id", "reason")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    reason: str
    def __init__(self, call_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("tool", "arguments", "run_id", "step_id", "cwd", "timeout_seconds", "user", "arguments_json")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    tool: str
    arguments: _struct_pb2.Struct
    run_id: str
    step_id: str
    cwd: str
    timeout_seconds: float
    user: str
    arguments_json: str
    def __init__(self, tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., cwd: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., user: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("ok", "code", "content", "metadata", "output", "data", "file_effects", "idempotency_key", "output_json", "data_total_bytes", "data_truncated", "data_sha256")
    OK_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    DATA_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DATA_SHA256_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    code: str
    content: str
    metadata: ResultMetadata
    output: _struct_pb2.Struct
    data: bytes
    file_effects: _containers.RepeatedCompositeFieldContainer[FileEffect]
    idempotency_key: str
    output_json: str
    data_total_bytes: int
    data_truncated: bool
    data_sha256: str
    def __init__(self, ok: _Optional[bool] = ..., code: _Optional[str] = ..., content: _Optional[str] = ..., metadata: _Optional[_Union[ResultMetadata, _Mapping]] = ..., output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data: _Optional[bytes] = ..., file_effects: _Optional[_Iterable[_Union[FileEffect, _Mapping]]] = ..., idempotency_key: _Optional[str] = ..., output_json: _Optional[str] = ..., data_total_bytes: _Optional[int] = ..., data_truncated: _Optional[bool] = ..., data_sha256: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolInfo]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolInfo, _Mapping]]] = ...) -> None: ...

class ToolInfo(_message.Message):
    __slots__ = ("name", "server", "description", "idempotency", "replay_policy", "reason", "source", "trust", "needs_approval", "changed", "input_schema")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    REPLAY_POLICY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    NEEDS_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    name: str
    server: str
    description: str
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    source: str
    trust: str
    needs_approval: bool
    changed: bool
    input_schema: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., server: _Optional[str] = ..., description: _Optional[str] = ..., idempotency: _Optional[_Union[Idempotency, str]] = ..., replay_policy: _Optional[_Union[ReplayPolicy, str]] = ..., reason: _Optional[str] = ..., source: _Optional[str] = ..., trust: _Optional[str] = ..., needs_approval: _Optional[bool] = ..., changed: _Optional[bool] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CheckRulesRequest(_message.Message):
    __slots__ = ("paths",)
    PATHS_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, paths: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckRulesResponse(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[RuleFileCheck]
    def __init__(self, files: _Optional[_Iterable[_Union[RuleFileCheck, _Mapping]]] = ...) -> None: ...

class RuleFileCheck(_message.Message):
    __slots__ = ("path", "layer", "problems")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    path: str
    layer: str
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, path: _Optional[str] = ..., layer: _Optional[str] = ..., problems: _Optional[_Iterable[str]] = ...) -> None: ...

class CompensateRequest(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    def __init__(self, call_id: _Optional[str] = ...) -> None: ...

class UndoRequest(_message.Message):
    __slots__ = ("call_id", "run_id", "from_step", "cwd")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    run_id: str
    from_step: str
    cwd: str
    def __init__(self, call_id: _Optional[str] = ..., run_id: _Optional[str] = ..., from_step: _Optional[str] = ..., cwd: _Optional[str] = ...) -> None: ...

class UndoResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ToolResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ToolResult, _Mapping]]] = ...) -> None: ...
