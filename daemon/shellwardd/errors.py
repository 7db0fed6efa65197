"""The daemon's error tree. Each error carries the code and the sentence a caller reads.

    ShellwardError (code, message, retryable)
    ├── InvalidArgument        bad input: nothing ran, fix the request
    ├── PermissionDenied       outside the allowed workspaces, or refused by policy
    ├── NotFound               unknown call id, or no such file
    ├── Conflict               a file is not at the hash the caller based its edit on
    ├── SandboxUnavailable     bwrap missing or unusable
    ├── Unavailable            busy right now (shutting down, still indexing): retry
    └── ConfigError            bad flags or environment at start-up

``shellwardd.server`` maps codes to gRPC status codes in one table.
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


class NotFound(ShellwardError):
    code = Code.NOT_FOUND


class Conflict(ShellwardError):
    code = Code.CONFLICT


class SandboxUnavailable(ShellwardError):
    code = Code.SANDBOX_ERROR


class Unavailable(ShellwardError):
    code = Code.UNAVAILABLE
    retryable = True


class ConfigError(ShellwardError):
    code = Code.INVALID_ARGUMENT
