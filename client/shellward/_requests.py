"""Every call of the client, once: its request, its deadline, how its answer is decoded.

Choices, and why:
- ``Client`` and ``AsyncClient`` differ only in how they wait (a blocking stub or a
  ``grpc.aio`` one). So each call is a value here, an ``Rpc`` (unary) or a ``Streamed``
  (RunCommand, Replay), built by one function per call; the two clients only send it. A
  new option or a new call is added here once, and a test checks that both clients expose
  the same methods with the same signatures.
- A call names its stub method by string (``Rpc.method``) so that it stays free of the
  transport: the sync and the asyncio stubs have the same attribute names.
- Deadlines: unary calls use the client's ``rpc_timeout`` unless the call says otherwise
  (``WaitCall`` waits longer than its own timeout, ``CallTool`` and streams take the
  caller's ``rpc_timeout``, ``None`` by default, because a tool or a command may run long).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from shellward import _wire
from shellward._exceptions import InvalidRequest, ProtocolError
from shellward._paths import default_socket_path
from shellward.types import (
    CallAccepted,
    CommandResult,
    DaemonStatus,
    LedgerEntry,
    OutputChunk,
    RecoveryItem,
    ReloadOutcome,
    RuleFileCheck,
    ToolInfo,
    Verdict,
)
from shellward.v1 import shellward_pb2 as pb

StreamEvent = CallAccepted | OutputChunk | CommandResult
PathLike = str | os.PathLike[str] | None

_T = TypeVar("_T")

# WaitCall's RPC deadline is its own timeout plus this margin, so the daemon answers first.
WAIT_MARGIN_SECONDS = 30.0


class _ClientDeadline:
    """Sentinel: the client's own ``rpc_timeout`` (``None`` means no deadline)."""

    def __repr__(self) -> str:
        return "CLIENT_DEADLINE"


CLIENT_DEADLINE = _ClientDeadline()
Deadline = float | None | _ClientDeadline


@dataclass(frozen=True)
class Rpc(Generic[_T]):
    """One unary call: the stub method, its request, its deadline and its decoder."""

    method: str
    request: Any
    decode: Callable[[Any], _T]
    deadline: Deadline = CLIENT_DEADLINE


@dataclass(frozen=True)
class Streamed:
    """One streaming call (RunCommand or Replay); its events decode with ``event_from_wire``."""

    method: str
    request: Any
    deadline: float | None


def resolve_target(socket: PathLike, address: str | None) -> str:
    """The gRPC target: a TCP ``address`` if given, else the Unix socket (flag, env, default).
    An address must name its port: gRPC would take a bare host for port 443, and the daemon
    listens on TCP only where its ``--tcp HOST:PORT`` says."""
    if address:
        if "://" not in address and not _has_port(address):
            raise InvalidRequest(
                f"the address {address!r} has no port; give HOST:PORT, the one the daemon's "
                "--tcp names (e.g. 127.0.0.1:7433, or [::1]:7433)"
            )
        return address
    path = socket or os.environ.get("SHELLWARD_SOCKET") or default_socket_path()
    return f"unix:{Path(path).expanduser().absolute()}"


def _has_port(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return False
    # A bare IPv6 address ("::1") ends in digits too; with a port it is bracketed.
    return ":" not in host or (host.startswith("[") and host.endswith("]"))


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization`` metadata; ``None`` reads ``$SHELLWARD_TOKEN``."""
    token = token if token is not None else os.environ.get("SHELLWARD_TOKEN")
    return (("authorization", f"Bearer {token}"),) if token else ()


def _cwd(cwd: PathLike) -> str:
    return str(cwd) if cwd is not None else ""


# --- streamed calls ------------------------------------------------------------------------


def run_command(
    command: str,
    *,
    cwd: PathLike,
    run_id: str,
    step_id: str,
    timeout: float | None,
    env: Mapping[str, str] | None,
    network: bool,
    rerun: bool,
    rpc_timeout: float | None,
    stdin: bytes = b"",
) -> Streamed:
    request = pb.RunCommandRequest(
        command=command,
        cwd=_cwd(cwd),
        env=dict(env or {}),
        timeout_seconds=timeout or 0.0,
        run_id=run_id,
        step_id=step_id,
        network=pb.NetworkRequest(allow=network),
        rerun=rerun,
        stdin=stdin,
    )
    return Streamed("RunCommand", request, rpc_timeout)


def replay(
    call_id: str, *, run_id: str, step_id: str, rerun: bool, rpc_timeout: float | None
) -> Streamed:
    request = pb.ReplayRequest(call_id=call_id, run_id=run_id, step_id=step_id, rerun=rerun)
    return Streamed("Replay", request, rpc_timeout)


def event_from_wire(event: pb.RunCommandEvent) -> StreamEvent | None:
    """One event of a RunCommand or Replay stream (None for a kind this client does not know)."""
    kind = event.WhichOneof("event")
    if kind == "accepted":
        return CallAccepted(event.accepted.call_id, _wire.verdict_from_wire(event.accepted.verdict))
    if kind == "output":
        return _wire.chunk_from_wire(event.output)
    if kind == "result":
        return _wire.result_from_wire(event.result)
    return None


def take_event(event: StreamEvent, on_output: Callable[[OutputChunk], None] | None) -> bool:
    """Hand an output chunk to ``on_output``; True when ``event`` is the final result."""
    if isinstance(event, OutputChunk) and on_output is not None:
        on_output(event)
    return isinstance(event, CommandResult)


def stream_ended_early() -> ProtocolError:
    return ProtocolError("the daemon closed the stream without a final result")


# --- unary calls ---------------------------------------------------------------------------


def call_tool(
    tool: str,
    arguments: Mapping[str, Any] | None,
    *,
    cwd: PathLike,
    run_id: str,
    step_id: str,
    timeout: float | None,
    user: str,
    rpc_timeout: float | None,
) -> Rpc[CommandResult]:
    request = pb.CallToolRequest(
        tool=tool,
        cwd=_cwd(cwd),
        run_id=run_id,
        step_id=step_id,
        timeout_seconds=timeout or 0.0,
        user=user,
        # JSON text, not the Struct: a Struct turns integers into doubles.
        arguments_json=json.dumps(dict(arguments or {}), ensure_ascii=False),
    )
    return Rpc("CallTool", request, _wire.tool_result_from_wire, rpc_timeout)


def compensate(call_id: str, rpc_timeout: float | None) -> Rpc[CommandResult]:
    request = pb.CompensateRequest(call_id=call_id)
    return Rpc("Compensate", request, _wire.tool_result_from_wire, rpc_timeout)


def undo(
    call_id: str, *, run_id: str, from_step: str, cwd: PathLike, rpc_timeout: float | None
) -> Rpc[list[CommandResult]]:
    request = pb.UndoRequest(call_id=call_id, run_id=run_id, from_step=from_step, cwd=_cwd(cwd))
    return Rpc(
        "Undo",
        request,
        lambda reply: [_wire.tool_result_from_wire(r) for r in reply.results],
        rpc_timeout,
    )


def wait_call(call_id: str, timeout: float) -> Rpc[CommandResult]:
    request = pb.WaitCallRequest(call_id=call_id, timeout_seconds=timeout)
    return Rpc("WaitCall", request, _wire.result_from_wire, timeout + WAIT_MARGIN_SECONDS)


def recover(run_id: str) -> Rpc[list[RecoveryItem]]:
    return Rpc(
        "Recover",
        pb.RecoverRequest(run_id=run_id),
        lambda reply: [_wire.recovery_from_wire(item) for item in reply.items],
    )


def _entries(reply: pb.ListCallsResponse) -> list[LedgerEntry]:
    return [_wire.entry_from_wire(entry) for entry in reply.calls]


def approvals() -> Rpc[list[LedgerEntry]]:
    return Rpc("ListApprovals", pb.ListApprovalsRequest(), _entries)


def answer(call_id: str, *, approve: bool, reason: str) -> Rpc[LedgerEntry]:
    request = pb.ApproveRequest(call_id=call_id, approve=approve, reason=reason)
    return Rpc("Approve", request, _wire.entry_from_wire)


def cancel(call_id: str, reason: str) -> Rpc[LedgerEntry]:
    request = pb.CancelCallRequest(call_id=call_id, reason=reason)
    return Rpc("CancelCall", request, _wire.entry_from_wire)


def list_tools() -> Rpc[list[ToolInfo]]:
    return Rpc(
        "ListTools",
        pb.ListToolsRequest(),
        lambda reply: [_wire.tool_info_from_wire(tool) for tool in reply.tools],
    )


def reload_rules() -> Rpc[ReloadOutcome]:
    return Rpc(
        "ReloadRules",
        pb.ReloadRulesRequest(),
        lambda reply: ReloadOutcome(reply.ok, reply.error, tuple(reply.rule_sources)),
    )


def check_rules(paths: Sequence[str | os.PathLike[str]]) -> Rpc[list[RuleFileCheck]]:
    # Absolute here: the daemon does not share this process's current directory.
    request = pb.CheckRulesRequest(paths=[os.path.abspath(p) for p in paths])
    return Rpc(
        "CheckRules",
        request,
        lambda reply: [_wire.rule_check_from_wire(check) for check in reply.files],
    )


def classify(command: str, cwd: PathLike) -> Rpc[Verdict]:
    request = pb.ClassifyRequest(command=command, cwd=_cwd(cwd))
    return Rpc("Classify", request, lambda reply: _wire.verdict_from_wire(reply.verdict))


def get_call(call_id: str, *, run_id: str, step_id: str) -> Rpc[LedgerEntry]:
    request = pb.GetCallRequest(call_id=call_id, run_id=run_id, step_id=step_id)
    return Rpc("GetCall", request, _wire.entry_from_wire)


def list_calls(
    *, run_id: str, limit: int, include_output: bool, page_token: str
) -> Rpc[tuple[list[LedgerEntry], str]]:
    """One page of calls, and the token of the next page ("" after the last)."""
    request = pb.ListCallsRequest(
        run_id=run_id, limit=limit, include_output=include_output, page_token=page_token
    )
    return Rpc("ListCalls", request, lambda reply: (_entries(reply), reply.next_page_token))


def status() -> Rpc[DaemonStatus]:
    return Rpc("GetStatus", pb.GetStatusRequest(), _wire.daemon_status_from_wire)
