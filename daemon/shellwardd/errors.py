"""The daemon's error tree. Each error carries the code and the sentence a caller reads.

    ShellwardError (code, message, retryable)
    ├── InvalidArgument        bad input: nothing ran, fix the request
    ├── PermissionDenied       outside the allowed workspaces, or refused by policy
    ├── Unauthenticated        a TCP request without the daemon's token
    ├── Interrupted            cancelled before it started: nothing ran
    ├── NotFound               unknown call id, or no such file
    ├── Conflict               a file is not at the hash the caller based its edit on
    ├── SideEffectUncertain    a call's outcome is unknown: check before acting on it
    ├── InProgress             the call named is not final yet: wait for it
    ├── RecordExpired          what is needed of a call is past its retention
    ├── SandboxUnavailable     bwrap missing or unusable
    ├── Unavailable            busy right now (shutting down, still indexing): retry
    │   └── LedgerBusy         another process held the ledger past the busy timeout
    ├── WatchError             the write detector cannot answer for a workspace
    ├── StateError             the state directory or the ledger cannot be used
    │   └── LedgerError        a ledger read or write failed (disk full, I/O error, ...)
    └── ConfigError            bad flags, environment or files at start-up
        ├── RuleFileError      a rule file that cannot be used (file:line: problem)
        └── ToolConfigError    a tools configuration that cannot be used (tools/config.py)

Every mechanism raises from this tree (the write detector's ``IndexNotReady`` is a
``WatchError``), so the edge translates once: ``shellwardd.server`` maps codes to gRPC
status codes in one table and sends the code itself as trailing metadata.
"""

from __future__ import annotations

from shellward.types import Code


class ShellwardError(Exception):
    code: Code = Code.INTERNAL
    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(ShellwardError):
    code = Code.INVALID_ARGUMENT


class PermissionDenied(ShellwardError):
    code = Code.PERMISSION_DENIED


class Unauthenticated(ShellwardError):
    code = Code.UNAUTHENTICATED


class Interrupted(ShellwardError):
    code = Code.INTERRUPTED


class NotFound(ShellwardError):
    code = Code.NOT_FOUND


class Conflict(ShellwardError):
    code = Code.CONFLICT


class SideEffectUncertain(ShellwardError):
    code = Code.SIDE_EFFECT_UNCERTAIN


class InProgress(ShellwardError):
    code = Code.IN_PROGRESS
    retryable = True


class RecordExpired(ShellwardError):
    code = Code.RECORD_EXPIRED


class SandboxUnavailable(ShellwardError):
    code = Code.SANDBOX_ERROR


class Unavailable(ShellwardError):
    code = Code.UNAVAILABLE
    retryable = True


class WatchError(ShellwardError):
    code = Code.UNAVAILABLE


class StateError(ShellwardError):
    code = Code.INTERNAL


class LedgerError(StateError):
    pass


class LedgerBusy(LedgerError, Unavailable):
    code = Code.UNAVAILABLE
    retryable = True


class ConfigError(ShellwardError):
    code = Code.INVALID_ARGUMENT


class RuleFileError(ConfigError):
    """``str()`` is ``path:line: message``; ``message`` is the problem alone."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.line = line

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"
