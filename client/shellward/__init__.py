"""shellward: the client of the shellward daemon (library and ``shellward`` CLI).

>>> from shellward import Client
>>> with Client() as client:
...     result = client.run_command("ls", run_id="run-1", step_id="call-1")
...     result.ok, result.code, result.content
"""

from shellward._async import AsyncClient
from shellward._client import Client
from shellward._exceptions import (
    AuthenticationError,
    DaemonUnavailable,
    DeadlineExceeded,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ProtocolError,
    ShellwardError,
)
from shellward._requests import StreamEvent
from shellward.types import (
    ArgumentFact,
    ArgumentKind,
    CallAccepted,
    CallStatus,
    CapturedOutput,
    Code,
    CommandPart,
    CommandResult,
    ContainmentControl,
    DaemonStatus,
    EffectKind,
    FileEffect,
    Idempotency,
    LedgerEntry,
    NetworkEffect,
    OutputChunk,
    RecoveryItem,
    ReloadOutcome,
    ReplayPolicy,
    RuleFileCheck,
    RuleLayer,
    Stream,
    ToolInfo,
    ToolServerStatus,
    Transition,
    Verdict,
    WorkspaceStatus,
)

__all__ = [
    "ArgumentFact",
    "ArgumentKind",
    "AsyncClient",
    "AuthenticationError",
    "CallAccepted",
    "CallStatus",
    "CapturedOutput",
    "Client",
    "Code",
    "CommandPart",
    "CommandResult",
    "ContainmentControl",
    "DaemonStatus",
    "DaemonUnavailable",
    "DeadlineExceeded",
    "EffectKind",
    "FileEffect",
    "Idempotency",
    "InvalidRequest",
    "LedgerEntry",
    "NetworkEffect",
    "NotFound",
    "OutputChunk",
    "PermissionDenied",
    "ProtocolError",
    "RecoveryItem",
    "ReloadOutcome",
    "ReplayPolicy",
    "RuleFileCheck",
    "RuleLayer",
    "ShellwardError",
    "Stream",
    "StreamEvent",
    "ToolInfo",
    "ToolServerStatus",
    "Transition",
    "Verdict",
    "WorkspaceStatus",
]
