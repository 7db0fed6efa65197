"""The asyncio client (``grpc.aio``): the calls an async agent runtime makes most.

Same answers and exceptions as :class:`shellward.Client`; commands and replays stream as
async iterators.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from shellward import _wire
from shellward._client import resolve_target
from shellward._exceptions import ProtocolError, translate
from shellward._requests import (
    PathLike,
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
    Verdict,
)
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc

_T = TypeVar("_T")


class AsyncClient:
    """``async with AsyncClient() as client: await client.run_command("ls")``."""

    def __init__(
        self,
        socket: PathLike = None,
        *,
        address: str | None = None,
        token: str | None = None,
        rpc_timeout: float | None = 30.0,
    ) -> None:
        self.target = resolve_target(socket, address)
        self._channel = grpc.aio.insecure_channel(self.target)
        self._stub = pb_grpc.ShellwardStub(self._channel)
        self._metadata = auth_metadata(token)
        self._rpc_timeout = rpc_timeout

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: Callable[..., Awaitable[_T]], request: object) -> _T:
        try:
            return await method(request, timeout=self._rpc_timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc

    async def _events(self, call: AsyncIterator[pb.RunCommandEvent]) -> AsyncIterator[StreamEvent]:
        try:
            async for message in call:
                event = event_from_wire(message)
                if event is not None:
                    yield event
                if isinstance(event, CommandResult):
                    return
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        raise ProtocolError("the daemon closed the stream without a final result")

    @staticmethod
    async def _final(
        events: AsyncIterator[StreamEvent], on_output: Callable[[OutputChunk], None] | None
    ) -> CommandResult:
        async for event in events:
            if isinstance(event, CommandResult):
                return event
            if isinstance(event, OutputChunk) and on_output is not None:
                on_output(event)
        raise ProtocolError("the daemon closed the stream without a final result")

    def stream_command(
        self,
        command: str,
        *,
        cwd: PathLike = None,
        run_id: str = "",
        step_id: str = "",
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        rerun: bool = False,
        rpc_timeout: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """CallAccepted, OutputChunks, then the CommandResult (see ``Client.stream_command``)."""
        request = command_request(
            command, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, env=env,
            network=network, rerun=rerun,
        )  # fmt: skip
        return self._events(
            self._stub.RunCommand(request, timeout=rpc_timeout, metadata=self._metadata)
        )

    async def run_command(
        self,
        command: str,
        *,
        on_output: Callable[[OutputChunk], None] | None = None,
        cwd: PathLike = None,
        run_id: str = "",
        step_id: str = "",
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        rerun: bool = False,
        rpc_timeout: float | None = None,
    ) -> CommandResult:
        events = self.stream_command(
            command, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, env=env,
            network=network, rerun=rerun, rpc_timeout=rpc_timeout,
        )  # fmt: skip
        return await self._final(events, on_output)

    async def replay(
        self,
        call_id: str = "",
        *,
        run_id: str = "",
        step_id: str = "",
        rerun: bool = False,
        on_output: Callable[[OutputChunk], None] | None = None,
    ) -> CommandResult:
        request = pb.ReplayRequest(call_id=call_id, run_id=run_id, step_id=step_id, rerun=rerun)
        events = self._events(self._stub.Replay(request, metadata=self._metadata))
        return await self._final(events, on_output)

    async def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        cwd: PathLike = None,
        run_id: str = "",
        step_id: str = "",
        timeout: float | None = None,
        user: str = "",
    ) -> CommandResult:
        request = tool_request(
            tool, arguments, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, user=user
        )
        try:
            reply = await self._stub.CallTool(request, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        return _wire.tool_result_from_wire(reply)

    async def wait_call(self, call_id: str, *, timeout: float = 60.0) -> CommandResult:
        request = pb.WaitCallRequest(call_id=call_id, timeout_seconds=timeout)
        try:
            reply = await self._stub.WaitCall(
                request, timeout=timeout + 30.0, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        return _wire.result_from_wire(reply)

    async def classify(self, command: str, *, cwd: PathLike = None) -> Verdict:
        request = pb.ClassifyRequest(command=command, cwd=str(cwd) if cwd is not None else "")
        return _wire.verdict_from_wire((await self._call(self._stub.Classify, request)).verdict)

    async def get_call(
        self, call_id: str = "", *, run_id: str = "", step_id: str = ""
    ) -> LedgerEntry:
        request = pb.GetCallRequest(call_id=call_id, run_id=run_id, step_id=step_id)
        return _wire.entry_from_wire(await self._call(self._stub.GetCall, request))

    async def list_calls(self, *, run_id: str = "", limit: int = 50) -> list[LedgerEntry]:
        request = pb.ListCallsRequest(run_id=run_id, limit=limit)
        response = await self._call(self._stub.ListCalls, request)
        return [_wire.entry_from_wire(entry) for entry in response.calls]

    async def recover(self, run_id: str) -> list[RecoveryItem]:
        response = await self._call(self._stub.Recover, pb.RecoverRequest(run_id=run_id))
        return [_wire.recovery_from_wire(item) for item in response.items]

    async def status(self) -> DaemonStatus:
        reply = await self._call(self._stub.GetStatus, pb.GetStatusRequest())
        return _wire.daemon_status_from_wire(reply)
