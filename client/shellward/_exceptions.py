"""The client's exceptions. ``grpc.RpcError`` never reaches a user; it is translated here.

    ShellwardError
    ├── DaemonUnavailable      no daemon at the socket / address, or it went away during a call
    ├── AuthenticationError    TCP without the right token
    ├── InvalidRequest         the daemon refused the input (empty command, bad cwd, …)
    ├── PermissionDenied       outside the daemon's workspaces
    ├── NotFound               unknown call id
    ├── DeadlineExceeded       the RPC deadline passed (a streamed command is cancelled:
    │                          get_call says how it ended)
    └── ProtocolError          anything else the daemon answered

Every exception the daemon raised carries its domain ``code`` (``shellward.Code``, e.g.
``UNAVAILABLE`` for a busy ledger; ``None`` when the daemon never answered), ``retryable``,
and ``details``: the ErrorInfo metadata of the google.rpc.Status the daemon sent (``call_id``,
``run_id``, ``step_id`` when the request named a call). RunCommand's
outcomes (a failing command, a timeout, a refused replay) are not exceptions: they are a
``CommandResult`` with ``ok=False`` and a ``code``.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
import grpc.aio

from shellward import _wire
from shellward.types import Code


class ShellwardError(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: str = "",
        code: Code | None = None,
        details: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details: Mapping[str, str] = dict(details or {})
        self.retryable = self.details.get("retryable") == "true"


class DaemonUnavailable(ShellwardError):
    pass


class AuthenticationError(ShellwardError):
    pass


class InvalidRequest(ShellwardError):
    pass


class PermissionDenied(ShellwardError):
    pass


class NotFound(ShellwardError):
    pass


class DeadlineExceeded(ShellwardError):
    pass


class ProtocolError(ShellwardError):
    pass


_BY_STATUS: dict[grpc.StatusCode, type[ShellwardError]] = {
    grpc.StatusCode.UNAVAILABLE: DaemonUnavailable,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def translate(exc: grpc.RpcError, target: str, accepted: str = "") -> ShellwardError:
    """Turn a gRPC error into the matching ShellwardError, with a message that helps.
    ``accepted``: the id of the call the daemon had taken when the error came (a stream)."""
    # Sync errors are grpc.Call; asyncio ones (AioRpcError) have the same two methods.
    answered = isinstance(exc, grpc.Call | grpc.aio.AioRpcError)
    code = exc.code() if answered else grpc.StatusCode.UNKNOWN
    details = (exc.details() if answered else "") or str(exc)
    sent = _wire.error_details(exc.trailing_metadata()) if answered else None
    domain = sent.code if sent else None
    kind = _BY_STATUS.get(code, ProtocolError)
    if kind is DaemonUnavailable and domain is None and accepted:  # it died under the call
        details = (
            f"the daemon at {target} went away during call {accepted} ({details}). The "
            "command may have run, partly or fully. When a daemon answers again, "
            f"`shellward show {accepted}` (get_call) tells how it ended: a call cut short is "
            "uncertain if it may have written, and `shellward recover` lists what to do."
        )
    elif kind is DaemonUnavailable and domain is None:  # no daemon answered: how to start one
        details = (
            f"no shellward daemon answers at {target} ({details}). Start one with `make serve "
            "WORKSPACE=DIR` or `shellwardd`, or point --socket / SHELLWARD_SOCKET at it."
        )
    elif kind is DeadlineExceeded:
        details = (
            f"the daemon did not answer in time ({details}). A command streamed by this call "
            "was cancelled and may have partly run: see how it ended with `shellward ledger` "
            "or get_call(run_id=..., step_id=...)."
        )
    return kind(details, status=code.name, code=domain, details=sent.metadata if sent else None)
