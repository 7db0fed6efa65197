"""The synchronous client: one channel to one daemon, typed answers."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc

from shellward import _wire
from shellward._exceptions import ProtocolError, translate
from shellward._paths import default_socket_path
from shellward._requests import (
    StreamEvent,
    auth_metadata,
    command_request,
    event_from_wire,
    tool_request,
)
from shellward.types import (
    CommandResult,
    DaemonStatus,
    LedgerEntry,
    OutputChunk,
    RecoveryItem,
    ReloadOutcome,
    ToolInfo,
    Verdict,
)
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc

_T = TypeVar("_T")


def resolve_target(socket: str | os.PathLike[str] | None, address: str | None) -> str:
    """The gRPC target: a TCP ``address`` if given, else the Unix socket (flag, env, default)."""
    if address:
        return address
    path = socket or os.environ.get("SHELLWARD_SOCKET") or default_socket_path()
    return f"unix:{Path(path).expanduser().absolute()}"


class Client:
    """A connection to a shellward daemon.

    ``Client()`` talks to the default Unix socket (or ``$SHELLWARD_SOCKET``);
    ``Client(address="127.0.0.1:7433", token=...)`` to a TCP listener.
    """

    def __init__(
        self,
        socket: str | os.PathLike[str] | None = None,
        *,
        address: str | None = None,
        token: str | None = None,
        rpc_timeout: float | None = 30.0,
    ) -> None:
        self.target = resolve_target(socket, address)
        self._channel = grpc.insecure_channel(self.target)
        self._stub = pb_grpc.ShellwardStub(self._channel)
        self._metadata = auth_metadata(token)
        self._rpc_timeout = rpc_timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: Callable[..., _T], request: object) -> _T:
        try:
            return method(request, timeout=self._rpc_timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc

    # --- commands --------------------------------------------------------------------

    def _events(self, call: Iterator[pb.RunCommandEvent]) -> Iterator[StreamEvent]:
        """Typed events of a RunCommand or Replay stream; the result comes last."""
        try:
            for message in call:
                event = event_from_wire(message)
                if event is not None:
                    yield event
                if isinstance(event, CommandResult):
                    return
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        raise ProtocolError("the daemon closed the stream without a final result")

    @staticmethod
    def _final(
        events: Iterator[StreamEvent], on_output: Callable[[OutputChunk], None] | None
    ) -> CommandResult:
        for event in events:
            if isinstance(event, CommandResult):
                return event
            if isinstance(event, OutputChunk) and on_output is not None:
                on_output(event)
        raise ProtocolError("the daemon closed the stream without a final result")

    def stream_command(
        self,
        command: str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        run_id: str = "",
        step_id: str = "",
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        rerun: bool = False,
        rpc_timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Run a command and yield a CallAccepted, its OutputChunks, then the CommandResult.

        ``timeout`` bounds the command (the daemon kills it); ``rpc_timeout`` bounds this
        call only: when it passes the command keeps running and is recorded.
        """
        request = command_request(
            command, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, env=env,
            network=network, rerun=rerun,
        )  # fmt: skip
        yield from self._events(
            self._stub.RunCommand(request, timeout=rpc_timeout, metadata=self._metadata)
        )

    def run_command(
        self,
        command: str,
        *,
        on_output: Callable[[OutputChunk], None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        run_id: str = "",
        step_id: str = "",
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        rerun: bool = False,
        rpc_timeout: float | None = None,
    ) -> CommandResult:
        """Run a command and return its structured result (see ``stream_command``)."""
        events = self.stream_command(
            command, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, env=env,
            network=network, rerun=rerun, rpc_timeout=rpc_timeout,
        )  # fmt: skip
        return self._final(events, on_output)

    def stream_replay(
        self,
        call_id: str = "",
        *,
        run_id: str = "",
        step_id: str = "",
        rerun: bool = False,
        rpc_timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Apply the replay table to a recorded call (by id, or a step's newest attempt)."""
        request = pb.ReplayRequest(call_id=call_id, run_id=run_id, step_id=step_id, rerun=rerun)
        yield from self._events(
            self._stub.Replay(request, timeout=rpc_timeout, metadata=self._metadata)
        )

    def replay(
        self,
        call_id: str = "",
        *,
        run_id: str = "",
        step_id: str = "",
        rerun: bool = False,
        on_output: Callable[[OutputChunk], None] | None = None,
        rpc_timeout: float | None = None,
    ) -> CommandResult:
        events = self.stream_replay(
            call_id, run_id=run_id, step_id=step_id, rerun=rerun, rpc_timeout=rpc_timeout
        )
        return self._final(events, on_output)

    def recover(self, run_id: str) -> list[RecoveryItem]:
        """Every step of a run that did not end cleanly, with the action to take."""
        response = self._call(self._stub.Recover, pb.RecoverRequest(run_id=run_id))
        return [_wire.recovery_from_wire(item) for item in response.items]

    def wait_call(self, call_id: str, *, timeout: float = 60.0) -> CommandResult:
        """Wait until a call is final (approved and run, or a duplicate finished)."""
        request = pb.WaitCallRequest(call_id=call_id, timeout_seconds=timeout)
        try:
            reply = self._stub.WaitCall(request, timeout=timeout + 30.0, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        return _wire.result_from_wire(reply)

    def approvals(self) -> list[LedgerEntry]:
        """Calls waiting for a human's approval."""
        response = self._call(self._stub.ListApprovals, pb.ListApprovalsRequest())
        return [_wire.entry_from_wire(entry) for entry in response.calls]

    def approve(self, call_id: str, *, reason: str = "") -> LedgerEntry:
        request = pb.ApproveRequest(call_id=call_id, approve=True, reason=reason)
        return _wire.entry_from_wire(self._call(self._stub.Approve, request))

    def deny(self, call_id: str, *, reason: str = "") -> LedgerEntry:
        request = pb.ApproveRequest(call_id=call_id, approve=False, reason=reason)
        return _wire.entry_from_wire(self._call(self._stub.Approve, request))

    def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        run_id: str = "",
        step_id: str = "",
        timeout: float | None = None,
        user: str = "",
        rpc_timeout: float | None = None,
    ) -> CommandResult:
        """Call a tool (read_file, list_files, write_file, apply_patch, an MCP tool).

        The answer's structured part is ``result.output``; raw bytes (a file's content)
        are ``result.stdout.data``.
        """
        request = tool_request(
            tool, arguments, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, user=user
        )
        try:
            reply = self._stub.CallTool(request, timeout=rpc_timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        return _wire.tool_result_from_wire(reply)

    def list_tools(self) -> list[ToolInfo]:
        response = self._call(self._stub.ListTools, pb.ListToolsRequest())
        return [_wire.tool_info_from_wire(tool) for tool in response.tools]

    def reload_rules(self) -> ReloadOutcome:
        reply = self._call(self._stub.ReloadRules, pb.ReloadRulesRequest())
        return ReloadOutcome(reply.ok, reply.error, tuple(reply.rule_sources))

    # --- queries ---------------------------------------------------------------------

    def classify(self, command: str, *, cwd: str | os.PathLike[str] | None = None) -> Verdict:
        request = pb.ClassifyRequest(command=command, cwd=str(cwd) if cwd is not None else "")
        return _wire.verdict_from_wire(self._call(self._stub.Classify, request).verdict)

    def get_call(self, call_id: str = "", *, run_id: str = "", step_id: str = "") -> LedgerEntry:
        request = pb.GetCallRequest(call_id=call_id, run_id=run_id, step_id=step_id)
        return _wire.entry_from_wire(self._call(self._stub.GetCall, request))

    def list_calls(
        self, *, run_id: str = "", limit: int = 50, omit_output: bool = False
    ) -> list[LedgerEntry]:
        request = pb.ListCallsRequest(run_id=run_id, limit=limit, omit_output=omit_output)
        response = self._call(self._stub.ListCalls, request)
        return [_wire.entry_from_wire(entry) for entry in response.calls]

    def status(self) -> DaemonStatus:
        return _wire.daemon_status_from_wire(
            self._call(self._stub.GetStatus, pb.GetStatusRequest())
        )
