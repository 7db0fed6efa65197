"""The vocabulary shared by the daemon and its clients.

Every domain object is a frozen dataclass; the wire format (protobuf) is converted to and
from these in exactly two places: ``shellwardd.server`` and ``shellward._wire``.
"""

from __future__ import annotations

import enum
import functools
import json
from dataclasses import dataclass, field
from typing import Any


@functools.total_ordering
class _Ordered(enum.Enum):
    """An enum whose members are ordered by strictness, in declaration order."""

    @property
    def rank(self) -> int:
        return list(type(self)).index(self)

    def __lt__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.rank < other.rank  # type: ignore[attr-defined, no-any-return]


class Idempotency(_Ordered):
    """What running a command again does, from least to most dangerous."""

    IDEMPOTENT = "idempotent"
    CONDITIONAL = "conditional"
    NON_IDEMPOTENT = "non_idempotent"


class ReplayPolicy(_Ordered):
    """What shellward may do when a call comes again, from most to least permissive."""

    AUTO = "auto"
    ASK = "ask"
    NEVER = "never"


class CallStatus(enum.Enum):
    """The ledger state machine (docs/architecture.md, Ledger)."""

    PLANNED = "planned"
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"
    DENIED = "denied"
    STARTED = "started"
    # A staged call's writes being applied (the journal says what remains), then applied
    # and its final state about to be recorded.
    COMMITTING = "committing"
    COMMITTED = "committed"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNCERTAIN = "uncertain"

    @property
    def is_final(self) -> bool:
        return self in _FINAL_STATUSES


_FINAL_STATUSES = frozenset(
    {CallStatus.DENIED, CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.UNCERTAIN}
)


class ArgumentKind(enum.Enum):
    """What one word of a simple command is, as far as side effects go."""

    PROGRAM = "program"
    SUBCOMMAND = "subcommand"
    FLAG = "flag"
    FILE_READ = "file_read"
    FILE_WRITE = "file_write"
    EXEC_HOOK = "exec_hook"
    NETWORK = "network"
    OPAQUE = "opaque"


class EffectKind(enum.Enum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"


class Stream(enum.Enum):
    STDOUT = "stdout"
    STDERR = "stderr"


class Code(enum.Enum):
    """The outcome codes a model sees (docs/architecture.md)."""

    OK = "OK"
    COMMAND_FAILED = "COMMAND_FAILED"
    TIMEOUT = "TIMEOUT"
    SIDE_EFFECT_UNCERTAIN = "SIDE_EFFECT_UNCERTAIN"
    CONFLICT = "CONFLICT"
    ALREADY_APPLIED = "ALREADY_APPLIED"
    NEEDS_APPROVAL = "NEEDS_APPROVAL"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    IDEMPOTENCY_KEY_MISMATCH = "IDEMPOTENCY_KEY_MISMATCH"
    IN_PROGRESS = "IN_PROGRESS"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    SANDBOX_ERROR = "SANDBOX_ERROR"
    INTERRUPTED = "INTERRUPTED"
    UNAVAILABLE = "UNAVAILABLE"
    RECORD_EXPIRED = "RECORD_EXPIRED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    INTERNAL = "INTERNAL"


@dataclass(frozen=True)
class ArgumentFact:
    """One word of a simple command and what it means for side effects."""

    index: int
    text: str
    kind: ArgumentKind
    note: str = ""


@dataclass(frozen=True)
class CommandPart:
    """One simple command found in a command string, with its own verdict."""

    program: str
    resolved_program: str
    argv: tuple[str, ...]
    span: tuple[int, int]
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    rule_id: str = ""
    needs_network: bool = False
    needs_approval: bool = False
    arguments: tuple[ArgumentFact, ...] = ()
    # Where the part was found: "" at top level, else e.g. "bash -c", "$(...)", "find -exec".
    context: str = ""
    # The destinations its rule names, when it needs network.
    destinations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """What a command may do and what may happen when it comes again."""

    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    needs_network: bool = False
    needs_approval: bool = False
    parts: tuple[CommandPart, ...] = ()
    # Index into ``parts`` of the part that decided the verdict, or None.
    deciding_part: int | None = None
    # The destinations its rules name (domains; ``*.`` for subdomains): its allow-list,
    # before the operator's additions.
    destinations: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileEffect:
    """One file a call created, modified, deleted or renamed, with hashes before and after."""

    path: str
    kind: EffectKind
    before_hash: str = ""
    after_hash: str = ""
    size: int = 0
    renamed_from: str = ""
    from_rescan: bool = False
    # The permission bits (at most 0o777) before the call, when its before-image was kept
    # with them (a staged commit); 0: not recorded.
    before_mode: int = 0


@dataclass(frozen=True)
class NetworkEffect:
    """One connection a call asked the daemon's proxy for: where to, what was sent, or why
    it was refused (``refused`` non-empty: nothing was sent)."""

    host: str
    port: int
    # The address the proxy checked and connected to ("" if refused before resolving).
    address: str = ""
    # "CONNECT" for a tunnel (HTTPS), else the plain HTTP request's method.
    method: str = ""
    # A plain HTTP request's path (with its query); "" for a tunnel.
    path: str = ""
    bytes_sent: int = 0
    bytes_received: int = 0
    refused: str = ""


def network_effect_dict(effect: NetworkEffect) -> dict[str, object]:
    """What a model reads of one connection: where, what, how much, or why refused."""
    shown: dict[str, object] = {"host": effect.host, "port": effect.port, "method": effect.method}
    if effect.path:
        shown["path"] = effect.path
    if effect.refused:
        shown["refused"] = effect.refused
    else:
        shown |= {"bytes_sent": effect.bytes_sent, "bytes_received": effect.bytes_received}
    return shown


@dataclass(frozen=True)
class CapturedOutput:
    """One output stream of a call, capped; ``total_bytes`` counts what was produced."""

    data: bytes = b""
    total_bytes: int = 0
    truncated: bool = False
    sha256: str = ""

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded call: the ToolLedgerEntry of the design."""

    call_id: str
    run_id: str
    step_id: str
    tool_name: str
    input_hash: str
    status: CallStatus
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    command: str = ""
    cwd: str = ""
    workspace: str = ""
    idempotency_key: str = ""
    verdict: Verdict | None = None
    file_effects: tuple[FileEffect, ...] = ()
    network_granted: bool = False
    # Every connection the call asked the proxy for, in order (see docs/network.md).
    network_effects: tuple[NetworkEffect, ...] = ()
    # An idempotent-classified call whose traffic was more than reads from its allow-list.
    unexpected_network: bool = False
    exit_code: int | None = None
    code: Code = Code.OK
    content: str = ""
    stdout: CapturedOutput = field(default_factory=CapturedOutput)
    stderr: CapturedOutput = field(default_factory=CapturedOutput)
    timeout_seconds: float = 0.0
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    unexpected_writes: bool = False
    effects_from_rescan: bool = False
    note: str = ""
    # The call's full input as JSON: what a pending approval runs once approved.
    input_json: str = ""
    # False when the file effects could not be observed (the daemon died mid-call).
    effects_recorded: bool = False
    # A tool call's structured answer, as JSON ("" for commands).
    output_json: str = ""
    # The daemon that recorded the call and holds its workspace ("" before fleets).
    daemon_id: str = ""
    # The call's history, oldest first (only GetCall / `shellward show` fill it).
    transitions: tuple[Transition, ...] = ()
    # True when a listing left stdout, stderr and output_json out: get_call has them.
    output_omitted: bool = False


@dataclass(frozen=True)
class Transition:
    """One step of a call's history: the status it reached, when, and why."""

    at: float
    status: CallStatus
    detail: str = ""


@dataclass(frozen=True)
class CommandResult:
    """The structured answer to one RunCommand: what the model reads."""

    ok: bool
    code: Code
    content: str
    call_id: str
    retryable: bool
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    status: CallStatus
    exit_code: int | None = None
    replayed: bool = False
    stdout: CapturedOutput = field(default_factory=CapturedOutput)
    stderr: CapturedOutput = field(default_factory=CapturedOutput)
    verdict: Verdict | None = None
    file_effects: tuple[FileEffect, ...] = ()
    run_id: str = ""
    step_id: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    # A tool call's structured answer, as JSON ("" for commands); its raw bytes are stdout.
    output_json: str = ""
    # The key shellward sent with a business tool call ("" when none).
    idempotency_key: str = ""
    # Every connection the call asked the daemon's proxy for, refused ones too.
    network_effects: tuple[NetworkEffect, ...] = ()

    @property
    def output(self) -> Any:
        """A tool call's structured answer (None for commands)."""
        return json.loads(self.output_json) if self.output_json else None

    def to_dict(self) -> dict[str, object]:
        """The shape agents hand to a model: ``{ok, code, content, metadata}``."""
        return {
            "ok": self.ok,
            "code": self.code.value,
            "content": self.content,
            "exit_code": self.exit_code,
            "stdout": self.stdout.text,
            "stderr": self.stderr.text,
            "metadata": {
                "retryable": self.retryable,
                "idempotency": self.idempotency.value,
                "replay_policy": self.replay_policy.value,
                "call_id": self.call_id,
                "status": self.status.value,
                "replayed": self.replayed,
                "stdout_truncated": self.stdout.truncated,
                "stderr_truncated": self.stderr.truncated,
                "file_effects": [{"path": e.path, "kind": e.kind.value} for e in self.file_effects],
                "network_effects": [network_effect_dict(e) for e in self.network_effects],
            },
        }


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a running command's output, streamed as it comes."""

    stream: Stream
    data: bytes


@dataclass(frozen=True)
class CallAccepted:
    """The first event of a streamed call: it is in the ledger under ``call_id``."""

    call_id: str
    verdict: Verdict


@dataclass(frozen=True)
class WorkspaceStatus:
    root: str
    state: str
    files_done: int = 0
    files_total: int = 0
    note: str = ""
    # The PATH commands run with here, and what kept a toolchain off it or broken in it.
    path: str = ""
    path_notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainmentControl:
    """One control of the sandbox and its state, as ``shellward status`` shows it."""

    control: str
    state: str


@dataclass(frozen=True)
class DaemonStatus:
    version: str
    socket: str
    state_dir: str
    ledger_path: str
    sandbox_enabled: bool
    sandbox_detail: str
    workspaces: tuple[str, ...]
    running_calls: int
    uptime_seconds: float
    rule_sources: tuple[str, ...] = ()
    tcp_address: str = ""
    workspace_status: tuple[WorkspaceStatus, ...] = ()
    containment: tuple[ContainmentControl, ...] = ()
    tool_servers: tuple[ToolServerStatus, ...] = ()


@dataclass(frozen=True)
class ToolServerStatus:
    """A business tools' MCP server as the daemon sees it."""

    name: str
    running: bool
    starts: int = 0
    failures: int = 0
    retry_in: float = 0.0  # seconds until the next start after a failure
    last_error: str = ""


@dataclass(frozen=True)
class RecoveryItem:
    """One step of a run that did not end cleanly, and what the replay table says."""

    call: LedgerEntry
    action: str  # "replay", "check", "ask", "refuse" or "wait"
    reason: str


@dataclass(frozen=True)
class ReloadOutcome:
    """The answer to a rules reload; on error the last good rules stay in force."""

    ok: bool
    error: str
    sources: tuple[str, ...]


class RuleLayer(enum.Enum):
    """How the daemon treats a rule file, which decides what its rules may do."""

    BUILTIN = "builtin"
    USER = "user"
    TRUSTED_REPOSITORY = "trusted repository"
    # An untrusted repository's file: its rules may only make verdicts stricter.
    REPOSITORY = "repository"
    # Neither one of the daemon's rule files nor inside one of its workspaces.
    NOT_READ = "not read"


@dataclass(frozen=True)
class RuleFileCheck:
    """One rule file checked by the daemon: how it treats the file, and what is wrong."""

    path: str
    layer: RuleLayer
    problems: tuple[str, ...]  # each ``file:line: what is wrong``; empty when clean

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class ToolInfo:
    """A tool the daemon offers, with its classification and where it came from."""

    name: str
    server: str  # "builtin" or the MCP server's name
    description: str
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    source: str  # "builtin", "pin", "annotations", "name" or "default"
    trust: str  # "builtin", "trusted" or "untrusted"
    needs_approval: bool = False
    changed: bool = False
    input_schema_json: str = "{}"
