"""The gRPC edge: decode a request, call the runtime, encode the answer. Nothing else.

Errors are translated once, here: a :class:`~shellwardd.errors.ShellwardError` becomes the
gRPC status of its code (``_STATUS``) with its sentence as the status message.

Choices, and why:
- The domain code travels as a ``google.rpc.Status`` in ``grpc-status-details-bin`` whose
  ``ErrorInfo`` has the code as ``reason`` (domain ``shellward``) and what the caller needs
  in ``metadata`` (``retryable``, and ``call_id`` / ``run_id`` / ``step_id`` when the request
  named them): the standard any gRPC library decodes, so a Node or Go client tells CONFLICT
  from SANDBOX_ERROR (both FAILED_PRECONDITION) without parsing a sentence.
- The code also stays in the trailing metadata ``shellward-code``, for clients written
  before the details existed.
- RunCommand, Replay (once started) and CallTool answer a call's outcome in-band (a result
  with ``ok=false`` and a code); everything else, and a request refused before a call
  exists, answers by status. The .proto says the same.

Also serves the standard health service and server reflection. The Unix socket is
trusted (mode 0600); a TCP listener, when asked for, requires a bearer token.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_status import rpc_status

from shellward import _wire
from shellward.types import (
    Code,
    CommandResult,
    ContainmentControl,
    DaemonStatus,
    OutputChunk,
    Verdict,
)
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from shellwardd.classifier import LiveRules
from shellwardd.config import Config, Limits
from shellwardd.errors import InvalidArgument, ShellwardError, Unauthenticated, Unavailable
from shellwardd.requests import CommandRequest, ToolRequest
from shellwardd.rulecheck import check_rule_files
from shellwardd.runtime import Runtime
from shellwardd.workers import ReusedThreads

log = logging.getLogger("shellwardd.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Shellward"].full_name
# Every RPC holds a thread of the server's pool while it runs, a RunCommand for its whole
# command. Long RPCs (LONG_METHODS) may hold at most --max-running-calls of them; the pool
# has SHORT_THREADS more, always left for the short ones (GetStatus, Classify, ListCalls,
# health): a full daemon refuses a new long call, it never stops answering. A thread that
# waits on a child costs its stack's touched pages, not CPU (docs/performance.md).
SHORT_THREADS = 16
LONG_METHODS = frozenset(
    {"RunCommand", "Replay", "WaitCall", "CallTool", "CancelCall", "Compensate", "Undo"}
)
# ListCalls pages: the default and largest page size, and the byte size a page stops short
# of, below the 4 MiB every gRPC client accepts by default, whatever its language.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
PAGE_BYTES = 3 * 1024 * 1024

# The one table from domain codes to gRPC status codes, for errors answered by status (the
# in-band results of RunCommand, Replay and CallTool carry the code itself). Codes that share
# a status are told apart by the ErrorInfo reason.
_STATUS = {
    Code.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Code.NEEDS_APPROVAL: grpc.StatusCode.PERMISSION_DENIED,
    Code.SANDBOX_ERROR: grpc.StatusCode.FAILED_PRECONDITION,
    Code.CONFLICT: grpc.StatusCode.FAILED_PRECONDITION,
    Code.SIDE_EFFECT_UNCERTAIN: grpc.StatusCode.FAILED_PRECONDITION,
    Code.ALREADY_APPLIED: grpc.StatusCode.ALREADY_EXISTS,
    Code.IDEMPOTENCY_KEY_MISMATCH: grpc.StatusCode.ALREADY_EXISTS,
    Code.IN_PROGRESS: grpc.StatusCode.ABORTED,
    Code.RECORD_EXPIRED: grpc.StatusCode.NOT_FOUND,
    Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Code.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    Code.INTERRUPTED: grpc.StatusCode.CANCELLED,
    Code.COMMAND_FAILED: grpc.StatusCode.UNKNOWN,
    Code.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
}


@dataclass(frozen=True)
class DaemonInfo:
    """The static part of GetStatus, assembled once at start-up."""

    version: str
    config: Config
    sandbox_enabled: bool
    sandbox_detail: str
    started_at: float
    containment: tuple[ContainmentControl, ...] = ()
    # Where the ledger lives (a PostgreSQL URL without its password, or the SQLite file).
    ledger_location: str = ""


class ShellwardServicer(pb_grpc.ShellwardServicer):
    def __init__(self, runtime: Runtime, rules: LiveRules, info: DaemonInfo) -> None:
        self._runtime = runtime
        self._rules = rules
        self._info = info

    def RunCommand(
        self, request: pb.RunCommandRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.RunCommandEvent]:
        command = _command_request(request)
        yield from _stream(
            context,
            request,
            lambda listener: self._runtime.run_command(command, listener),
            self._abandoned(context),
        )

    def Replay(
        self, request: pb.ReplayRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.RunCommandEvent]:
        def replay(listener: _QueueListener) -> CommandResult:
            return self._runtime.replay(
                request.call_id, request.run_id, request.step_id, request.rerun, listener
            )

        # Unknown ids and bad identities are gRPC errors, like GetCall's.
        _unary(context, request, lambda: self._runtime.get_call(
            request.call_id, request.run_id, request.step_id))  # fmt: skip
        yield from _stream(context, request, replay, self._abandoned(context))

    def Recover(
        self, request: pb.RecoverRequest, context: grpc.ServicerContext
    ) -> pb.RecoverResponse:
        items = _unary(context, request, lambda: self._runtime.recover(request.run_id))
        return pb.RecoverResponse(
            items=[
                pb.RecoveryItem(
                    call=_wire.entry_to_wire(item.call, omit_output=True),
                    action=item.action,
                    reason=item.reason,
                )
                for item in items
            ]
        )

    def WaitCall(
        self, request: pb.WaitCallRequest, context: grpc.ServicerContext
    ) -> pb.CommandResult:
        result = _unary(
            context,
            request,
            lambda: self._runtime.wait_call(request.call_id, request.timeout_seconds),
        )
        return _wire.result_to_wire(result)

    def ListApprovals(
        self, request: pb.ListApprovalsRequest, context: grpc.ServicerContext
    ) -> pb.ListCallsResponse:
        entries = _unary(context, request, self._runtime.list_approvals)
        return pb.ListCallsResponse(
            calls=[_wire.entry_to_wire(e, omit_output=True) for e in entries]
        )

    def Approve(self, request: pb.ApproveRequest, context: grpc.ServicerContext) -> pb.LedgerEntry:
        entry = _unary(
            context,
            request,
            lambda: self._runtime.approve(request.call_id, request.approve, request.reason),
        )
        return _wire.entry_to_wire(entry)

    def CancelCall(
        self, request: pb.CancelCallRequest, context: grpc.ServicerContext
    ) -> pb.LedgerEntry:
        why = f"cancelled by {context.peer()} with CancelCall" + (
            f": {request.reason}" if request.reason else ""
        )
        entry = _unary(context, request, lambda: self._runtime.cancel(request.call_id, why))
        return _wire.entry_to_wire(entry)

    def _abandoned(self, context: grpc.ServicerContext) -> Callable[[str], None]:
        """Cancels a streamed call whose client went away, on a thread of its own (the
        callback must not block gRPC)."""
        why = f"its client {context.peer()} went away (a deadline or a cancelled stream)"

        def cancel(call_id: str) -> None:
            def work() -> None:
                with contextlib.suppress(ShellwardError):  # already final, or waits for a human
                    self._runtime.cancel(call_id, why)

            threading.Thread(target=work, name="cancel", daemon=True).start()

        return cancel

    def CallTool(self, request: pb.CallToolRequest, context: grpc.ServicerContext) -> pb.ToolResult:
        tool_request = ToolRequest(
            tool=request.tool,
            arguments=_unary(context, request, lambda: _tool_arguments(request)),
            cwd=request.cwd,
            timeout_seconds=request.timeout_seconds,
            run_id=request.run_id,
            step_id=request.step_id,
            user=request.user,
        )
        return _wire.tool_result_to_wire(self._runtime.call_tool(tool_request))

    def Compensate(
        self, request: pb.CompensateRequest, context: grpc.ServicerContext
    ) -> pb.ToolResult:
        result = _unary(context, request, lambda: self._runtime.compensate(request.call_id))
        return _wire.tool_result_to_wire(result)

    def Undo(self, request: pb.UndoRequest, context: grpc.ServicerContext) -> pb.UndoResponse:
        def undo() -> list[CommandResult]:
            if request.call_id:
                return [self._runtime.undo(request.call_id, request.cwd)]
            return self._runtime.undo_run(request.run_id, request.from_step, request.cwd)

        results = _unary(context, request, undo)
        return pb.UndoResponse(results=[_wire.tool_result_to_wire(r) for r in results])

    def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.ServicerContext
    ) -> pb.ListToolsResponse:
        return pb.ListToolsResponse(
            tools=[_wire.tool_info_to_wire(t) for t in self._runtime.tools()]
        )

    def ReloadRules(
        self, request: pb.ReloadRulesRequest, context: grpc.ServicerContext
    ) -> pb.ReloadRulesResponse:
        outcome = self._rules.reload()
        return pb.ReloadRulesResponse(
            ok=outcome.ok, error=outcome.error, rule_sources=list(outcome.sources)
        )

    def CheckRules(
        self, request: pb.CheckRulesRequest, context: grpc.ServicerContext
    ) -> pb.CheckRulesResponse:
        checks = check_rule_files(self._info.config, request.paths)
        return pb.CheckRulesResponse(files=[_wire.rule_check_to_wire(c) for c in checks])

    def Classify(
        self, request: pb.ClassifyRequest, context: grpc.ServicerContext
    ) -> pb.ClassifyResponse:
        verdict = _unary(
            context, request, lambda: self._runtime.classify(request.command, request.cwd)
        )
        return pb.ClassifyResponse(verdict=_wire.verdict_to_wire(verdict))

    def GetCall(self, request: pb.GetCallRequest, context: grpc.ServicerContext) -> pb.LedgerEntry:
        entry = _unary(
            context,
            request,
            lambda: self._runtime.show_call(request.call_id, request.run_id, request.step_id),
        )
        return _wire.entry_to_wire(entry)

    def ListCalls(
        self, request: pb.ListCallsRequest, context: grpc.ServicerContext
    ) -> pb.ListCallsResponse:
        size = max(1, min(request.limit or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE))
        before = _unary(context, request, lambda: _page_start(request.page_token))
        # One more than the page: whether another page follows.
        entries = _unary(
            context, request, lambda: self._runtime.list_calls(request.run_id, size + 1, before)
        )
        page = pb.ListCallsResponse()
        for entry in entries[:size]:
            wire = _wire.entry_to_wire(entry, omit_output=not request.include_output)
            if page.calls and page.ByteSize() + wire.ByteSize() > PAGE_BYTES:
                break
            page.calls.append(wire)
        if len(page.calls) < len(entries):
            last = entries[len(page.calls) - 1]
            page.next_page_token = _page_token(last.created_at, last.call_id)
        return page

    def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.ServicerContext
    ) -> pb.StatusResponse:
        info = self._info
        status = DaemonStatus(
            version=info.version,
            socket=str(info.config.socket),
            state_dir=str(info.config.state_dir),
            ledger_path=info.ledger_location or str(info.config.ledger_path),
            sandbox_enabled=info.sandbox_enabled,
            sandbox_detail=info.sandbox_detail,
            workspaces=tuple(str(w) for w in info.config.workspaces),
            running_calls=self._runtime.running_count,
            uptime_seconds=time.time() - info.started_at,
            rule_sources=self._rules.sources,
            tcp_address=info.config.tcp or "",
            workspace_status=self._runtime.workspace_status(),
            tool_servers=self._runtime.tool_servers(),
            containment=info.containment,
        )
        return _wire.daemon_status_to_wire(status)


def _stream(
    context: grpc.ServicerContext,
    request: Message,
    action: Callable[[_QueueListener], CommandResult],
    abandon: Callable[[str], None],
) -> Iterator[pb.RunCommandEvent]:
    """Run ``action`` on its own thread and stream its events. When the client goes away
    before the result (its deadline, a cancelled stream), ``abandon`` gets the call's id."""
    events: queue.Queue[object] = queue.Queue()
    closed = object()
    listener = _QueueListener(events, abandon)

    def gone() -> None:  # runs when the RPC ends, however it ends
        events.put(closed)
        listener.abandon()

    context.add_callback(gone)

    def work() -> None:
        try:
            events.put(action(listener))
        except Exception as exc:  # a bug, not an outcome: the stream must still end
            log.exception("stream action failed")
            events.put(exc)

    _CALL_THREADS.run(work)
    while True:
        event = events.get()
        if event is closed:
            return
        if isinstance(event, Exception):
            _abort(context, request, ShellwardError(f"internal error: {event}; see the daemon log"))
        if isinstance(event, CommandResult):
            listener.answered()
            yield pb.RunCommandEvent(result=_wire.result_to_wire(event))
            return
        if isinstance(event, OutputChunk):
            yield pb.RunCommandEvent(output=_wire.chunk_to_wire(event))
        else:
            call_id, verdict = cast(tuple[str, Verdict], event)
            yield pb.RunCommandEvent(
                accepted=pb.CallAccepted(call_id=call_id, verdict=_wire.verdict_to_wire(verdict))
            )


# The streamed calls' threads, kept a minute for the next call (see shellwardd.workers).
_CALL_THREADS = ReusedThreads("call", 60.0)


class _QueueListener:
    """Queues a call's events for its stream, and hands the call to ``abandon`` if the
    stream ends before the result (whichever of accepted and abandon comes first)."""

    def __init__(self, events: queue.Queue[object], abandon: Callable[[str], None]) -> None:
        self._events = events
        self._abandon = abandon
        self._lock = threading.Lock()
        self._call_id = ""
        self._gone = False
        self._answered = False

    def accepted(self, call_id: str, verdict: Verdict) -> None:
        with self._lock:
            self._call_id = call_id
            gone = self._gone and not self._answered
        self._events.put((call_id, verdict))
        if gone:
            self._abandon(call_id)

    def answered(self) -> None:
        with self._lock:
            self._answered = True

    def abandon(self) -> None:
        with self._lock:
            self._gone = True
            call_id = "" if self._answered else self._call_id
        if call_id:
            self._abandon(call_id)

    def output(self, chunk: OutputChunk) -> None:
        self._events.put(chunk)


def _unary(context: grpc.ServicerContext, request: Message, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except ShellwardError as exc:
        _abort(context, request, exc)


@dataclass(frozen=True)
class _Status(grpc.Status):  # type: ignore[misc]
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def error_status(error: ShellwardError, names: dict[str, str]) -> _Status:
    """``error`` as a gRPC status: its code's status, its sentence, and the google.rpc.Status
    details (an ErrorInfo) plus ``shellward-code`` in the trailing metadata."""
    status = _STATUS.get(error.code, grpc.StatusCode.INTERNAL)
    info = error_details_pb2.ErrorInfo(
        reason=error.code.value,
        domain=_wire.ERROR_DOMAIN,
        metadata={"retryable": str(error.retryable).lower(), **names},
    )
    detail = status_pb2.Status(code=status.value[0], message=error.message)
    detail.details.add().Pack(info)
    encoded = rpc_status.to_status(detail)  # the reference encoding of the details trailer
    return _Status(
        encoded.code,
        encoded.details,
        ((_wire.CODE_METADATA_KEY, error.code.value), *encoded.trailing_metadata),
    )


def _abort(context: grpc.ServicerContext, request: Message, error: ShellwardError) -> None:
    """End the RPC with ``error``, naming the call the request named."""
    names = {
        name: value
        for name in ("call_id", "run_id", "step_id")
        # An id over its limit is what is being refused: not echoed back.
        if isinstance(value := getattr(request, name, ""), str)
        and 0 < len(value) <= DEFAULT_STRING_BYTES
    }
    context.abort_with_status(error_status(error, names))


def _page_token(created_at: float, call_id: str) -> str:
    """Where the next page starts: after this call. Opaque to clients."""
    return base64.urlsafe_b64encode(f"{created_at!r} {call_id}".encode()).decode()


def _page_start(token: str) -> tuple[float, str] | None:
    if not token:
        return None
    try:
        created_at, call_id = base64.urlsafe_b64decode(token).decode().split(" ", 1)
        return float(created_at), call_id
    except ValueError:
        raise InvalidArgument(
            "page_token is not one this daemon gave: pass a next_page_token back unchanged, "
            "or leave it empty for the first page"
        ) from None


def _tool_arguments(request: pb.CallToolRequest) -> dict[str, Any]:
    """The tool's arguments: the JSON text as sent, or an older client's Struct."""
    if not request.arguments_json:
        return MessageToDict(request.arguments)
    try:
        arguments = json.loads(request.arguments_json)
    except ValueError as exc:
        raise InvalidArgument(f"arguments_json is not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise InvalidArgument(
            f"arguments_json must be a JSON object, got {type(arguments).__name__}"
        )
    return arguments


def _command_request(request: pb.RunCommandRequest) -> CommandRequest:
    limits = None
    if request.HasField("limits"):
        # 0 = not asked for; config.merge_limits keeps the operator's value for those.
        wire = request.limits
        limits = Limits(
            cpu_seconds=wire.cpu_seconds,
            address_space_bytes=wire.address_space_bytes,
            max_processes=wire.max_processes,
            file_size_bytes=wire.file_size_bytes,
            memory_bytes=0,
            tmp_bytes=0,
        )
    return CommandRequest(
        command=request.command,
        cwd=request.cwd,
        env=dict(request.env),
        timeout_seconds=request.timeout_seconds,
        run_id=request.run_id,
        step_id=request.step_id,
        network=request.network.allow,
        rerun=request.rerun,
        limits=limits,
        stdin=request.stdin,
    )


# Size limits of string fields, in UTF-8 bytes, by field name (a map's limit is its
# values'; its keys get the default). None: checked where the field is used (the command,
# in-band with its own advice) or bounded by the message size (a tool's arguments).
DEFAULT_STRING_BYTES = 1024
_STRING_BYTES: dict[str, int | None] = {
    "command": None,
    "arguments_json": None,
    "cwd": 4096,
    "paths": 4096,
    "reason": 4096,
    "page_token": 4096,
    "env": 64 * 1024,
}


def request_problem(request: Message) -> str:
    """Why a decoded request is refused before anything runs ("" if it is not): a string
    field over its size limit, or a run_id without its step_id (or the reverse)."""
    for field, value in request.ListFields():
        if field.type != field.TYPE_STRING and not field.message_type:
            continue
        limit = _STRING_BYTES.get(field.name, DEFAULT_STRING_BYTES)
        texts: list[tuple[str, Any, int | None]]
        if field.message_type and field.message_type.GetOptions().map_entry:
            texts = [(f"{field.name} key", k, DEFAULT_STRING_BYTES) for k in value]
            texts += [(f"{field.name}[{k!r}]", v, limit) for k, v in value.items()]
        elif field.type != field.TYPE_STRING:
            continue
        elif field.is_repeated:
            texts = [(field.name, text, limit) for text in value]
        else:
            texts = [(field.name, value, limit)]
        for name, text, most in texts:
            size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else 0
            if most is not None and size > most:
                return f"{name[:80]} is {size} bytes, over the limit of {most}; send less"
    fields = request.DESCRIPTOR.fields_by_name
    if "run_id" in fields and "step_id" in fields:
        run_id, step_id = getattr(request, "run_id"), getattr(request, "step_id")  # noqa: B009
        if bool(run_id) != bool(step_id):
            return (
                "run_id and step_id go together: give both (the call's identity, so that a "
                "retry is answered from the ledger) or neither"
            )
    return ""


class _RequestChecks(grpc.ServerInterceptor):
    """Every request of the Shellward service is decoded here and refused with
    INVALID_ARGUMENT (not INTERNAL) when it is not a valid message (a string that is not
    UTF-8), or when :func:`request_problem` finds one, before any handler sees it."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if (
            handler is None
            or handler.request_streaming
            or not details.method.startswith(f"/{SERVICE_NAME}/")
        ):
            return handler
        decode = handler.request_deserializer

        def checked(raw: bytes, context: grpc.ServicerContext) -> Message:
            try:
                request = decode(raw)
            except Exception:
                method = details.method.rsplit("/", 1)[-1]
                error = InvalidArgument(
                    f"the {method} request could not be decoded: every string field must be "
                    "valid UTF-8 (send bytes as base64 or in a bytes field)"
                )
                context.abort_with_status(error_status(error, {}))
            problem = request_problem(request)
            if problem:
                _abort(context, request, InvalidArgument(problem))
            return request

        if handler.response_streaming:
            stream = handler.unary_stream

            def streamed(raw: bytes, context: grpc.ServicerContext) -> Iterator[Message]:
                yield from stream(checked(raw, context), context)

            return grpc.unary_stream_rpc_method_handler(
                streamed, response_serializer=handler.response_serializer
            )
        unary = handler.unary_unary
        return grpc.unary_unary_rpc_method_handler(
            lambda raw, context: unary(checked(raw, context), context),
            response_serializer=handler.response_serializer,
        )


class _Health:
    """The service's health: SERVING unless the daemon cannot take calls for one of its
    reasons (every long-call slot taken, the ledger not answering). Draining is the health
    servicer's own graceful shutdown, which no later ``set`` undoes."""

    def __init__(self, servicer: health.HealthServicer) -> None:
        self.servicer = servicer
        self._lock = threading.Lock()
        self._problems: set[str] = set()

    def problem(self, name: str, present: bool) -> None:
        with self._lock:
            before = bool(self._problems)
            if present:
                self._problems.add(name)
            else:
                self._problems.discard(name)
            if before != bool(self._problems):
                self._publish()

    def publish(self) -> None:
        with self._lock:
            self._publish()

    def _publish(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if self._problems
            else health_pb2.HealthCheckResponse.SERVING
        )
        for service in ("", SERVICE_NAME):
            self.servicer.set(service, status)


class _LongCallSlots(grpc.ServerInterceptor):
    """At most ``slots`` long RPCs at once; one more is refused with UNAVAILABLE (retry
    later), and the service's health says NOT_SERVING while every slot is taken."""

    def __init__(self, health_state: _Health, slots: int) -> None:
        self._health = health_state
        self._slots = slots
        self._lock = threading.Lock()
        self._taken = 0

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        service, _, method = details.method.lstrip("/").partition("/")
        if handler is None or service != SERVICE_NAME or method not in LONG_METHODS:
            return handler
        if handler.response_streaming:
            stream = handler.unary_stream

            def streamed(request: Message, context: grpc.ServicerContext) -> Iterator[Message]:
                self._take(request, context)
                yield from stream(request, context)

            return grpc.unary_stream_rpc_method_handler(
                streamed,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        unary = handler.unary_unary

        def answered(request: Message, context: grpc.ServicerContext) -> Message:
            self._take(request, context)
            return unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            answered,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _take(self, request: Message, context: grpc.ServicerContext) -> None:
        """Take a slot until the RPC ends, or refuse the RPC."""
        with self._lock:
            full = self._taken >= self._slots
            if not full:
                self._taken += 1
                if self._taken == self._slots:
                    self._health.problem("full", True)
        if full:
            error = Unavailable(
                f"the daemon already serves {self._slots} long calls, its limit "
                "(--max-running-calls); nothing ran. Retry when one of them ends"
            )
            _abort(context, request, error)
        context.add_callback(self._give_back)

    def _give_back(self) -> None:
        with self._lock:
            if self._taken == self._slots:
                self._health.problem("full", False)
            self._taken -= 1


class _TokenInterceptor(grpc.ServerInterceptor):
    """TCP only: every RPC but the health check needs ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._accepted = {f"Bearer {token}".encode(), token.encode()}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or details.method.startswith("/grpc.health.v1.Health/"):
            return handler
        sent = dict(details.invocation_metadata).get("authorization", "")  # type: ignore[arg-type]
        sent_bytes = sent.encode() if isinstance(sent, str) else sent
        if any(hmac.compare_digest(sent_bytes, token) for token in self._accepted):
            return handler
        return _deny_handler(handler)


def _deny_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    def deny(request: object, context: grpc.ServicerContext) -> None:
        error = Unauthenticated(
            "missing or wrong token: send 'authorization: Bearer <token>' metadata "
            "(the daemon's --token / SHELLWARD_TOKEN)"
        )
        context.abort_with_status(error_status(error, {}))

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny, **kwargs)  # type: ignore[arg-type]
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny, **kwargs)  # type: ignore[arg-type]
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny, **kwargs)  # type: ignore[arg-type]
    return grpc.unary_unary_rpc_method_handler(deny, **kwargs)  # type: ignore[arg-type]


class Listeners:
    """The daemon's gRPC servers: one on the Unix socket, one on TCP when configured."""

    def __init__(self, runtime: Runtime, rules: LiveRules, info: DaemonInfo) -> None:
        config = info.config
        self._socket = config.socket
        self._health = _Health(health.HealthServicer())
        self._workers = config.max_running_calls + SHORT_THREADS
        servicer = ShellwardServicer(runtime, rules, info)
        # One budget for both listeners.
        slots = _LongCallSlots(self._health, config.max_running_calls)
        self.servers: list[grpc.Server] = [self._make(servicer, (_RequestChecks(), slots))]
        self.tcp_port: int | None = None
        _prepare_socket(config.socket)
        # No window in which the socket is reachable by others: create it private.
        previous_umask = os.umask(0o077)
        try:
            self.servers[0].add_insecure_port(f"unix:{config.socket}")
        finally:
            os.umask(previous_umask)
        if config.tcp:
            assert config.token is not None  # load_config guarantees it
            tcp = self._make(servicer, (_TokenInterceptor(config.token), _RequestChecks(), slots))
            try:
                self.tcp_port = tcp.add_insecure_port(config.tcp)
            except RuntimeError:  # grpc raises on a failed bind; older versions return 0
                self.tcp_port = 0
            if self.tcp_port == 0:
                raise ShellwardError(
                    f"cannot listen on TCP {config.tcp}: the port is taken (another shellwardd, "
                    "or another program) or the address is not this host's; stop the other "
                    "listener or pass another --tcp HOST:PORT"
                )
            self.servers.append(tcp)

    def _make(
        self, servicer: ShellwardServicer, interceptors: tuple[grpc.ServerInterceptor, ...]
    ) -> grpc.Server:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="rpc"),
            interceptors=interceptors,
            # Without SO_REUSEPORT a second daemon on a taken TCP port fails to bind, instead
            # of sharing the port and splitting requests with the first.
            options=[*_wire.channel_options(), ("grpc.so_reuseport", 0)],
        )
        pb_grpc.add_ShellwardServicer_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health.servicer, server)
        names = (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME, REFLECTION_V1)
        reflection.enable_server_reflection(names, server)
        _serve_reflection_v1(reflection.ReflectionServicer(names), server)
        return server

    def start(self) -> None:
        previous_umask = os.umask(0o077)
        try:
            for server in self.servers:
                server.start()
        finally:
            os.umask(previous_umask)
        os.chmod(self._socket, 0o600)
        self._health.publish()

    def ledger_answers(self, answers: bool) -> None:
        """Health follows the ledger: no call can be recorded while it does not answer."""
        self._health.problem("ledger", not answers)

    def stop(self, grace: float) -> list[threading.Event]:
        """Stop taking new RPCs; in-flight ones get ``grace`` seconds. Returns done events."""
        self._health.servicer.enter_graceful_shutdown()
        return [server.stop(grace) for server in self.servers]

    def remove_socket(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._socket.unlink()


REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


def _serve_reflection_v1(servicer: reflection.ReflectionServicer, server: grpc.Server) -> None:
    """Server reflection under grpc.reflection.v1 too (grpcurl and current tools ask v1
    first). grpcio-reflection serves only v1alpha, but v1 is the same protocol with the
    same messages under a new package: the v1alpha servicer answers it byte for byte."""
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": handler}),)
    )


def _prepare_socket(path: Path) -> None:
    """Refuse to steal a live daemon's socket (its directory was checked at start-up)."""
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # left behind by a daemon that died: safe to replace
    else:
        raise ShellwardError(
            f"another daemon is already listening on {path}; stop it, or pass --socket"
        )
    finally:
        probe.close()
