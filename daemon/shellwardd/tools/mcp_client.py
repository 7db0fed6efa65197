"""A synchronous facade over the asyncio ``mcp`` SDK, for the daemon's threads.

Every connection runs on one shared background event loop (thread ``shellward-mcp``); the
public methods submit a coroutine there and wait for it, never longer than their deadline
plus a short grace. What a call can end as, and what it means for the ledger::

    ok           the tool answered
    error        the tool or the server answered with an error: the call is over
    timeout      sent, no answer before the deadline: it may have run (→ uncertain)
    lost         sent, the connection died or the answer was unreadable (→ uncertain)
    unavailable  not sent: the server could not be (re)started in time (safe to retry)

A server that exits is restarted on the next call, after an exponential backoff counted
from its consecutive failures (a crash, a failed start); an answered request resets it.
``notifications/tools/list_changed`` and every restart after the first start call
``on_tools_changed(reason)`` on a worker thread of the connection, so the callback may call
back into the connection.

The server's environment is the SDK's safe default (HOME, PATH, USER, …) plus the configured
``env``: the daemon's own environment, tokens included, is not passed on.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, TextIO, TypeVar

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from shellwardd.errors import Unavailable

from .classify import ToolHints
from .config import ServerConfig
from .connection import ConnectionStatus, OutcomeKind, ToolCallOutcome, ToolInfo

log = logging.getLogger(__name__)

T = TypeVar("T")

# Time past a deadline the caller waits for the loop to report, so that a timeout is
# reported by the SDK (which also sends the server a cancel) rather than by the guard.
GRACE_SECONDS = 1.0
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
DEFAULT_START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# A paginating server that never ends its listing must not hang a reload.
MAX_LIST_PAGES = 100

CLIENT_INFO = mcp_types.Implementation(name="shellward", version="0.1.0")


def backoff_delay(failures: int) -> float:
    """Seconds to wait before the next start after ``failures`` consecutive failures."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))


_loop_lock = threading.Lock()
_loop_holder: list[tuple[asyncio.AbstractEventLoop, threading.Thread]] = []


def _background_loop() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """The one event loop every connection runs on, started on first use."""
    with _loop_lock:
        if not _loop_holder:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="shellward-mcp", daemon=True)
            thread.start()
            _loop_holder.append((loop, thread))
        return _loop_holder[0]


class _NotStarted(Exception):
    """The server could not be (re)started: nothing was sent."""


class _Live:
    """One running session of a server: a transport, a pump, a ClientSession."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.task: asyncio.Task[None] | None = None
        # Set when the session must end: the transport reached EOF, or stop() was called.
        self.done = asyncio.Event()
        self.stopping = False
        self.dead = False


class _Progress:
    """Written on the loop, read by the caller's thread when its guard expires."""

    sent = False


class McpServerConnection:
    """One configured MCP server, started on demand and restarted when it dies."""

    def __init__(
        self,
        server: ServerConfig,
        *,
        on_tools_changed: Callable[[str], None] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        errlog: TextIO | None = None,
    ) -> None:
        self.server = server
        self._on_tools_changed = on_tools_changed
        self._start_timeout = start_timeout
        # The server's stderr; the daemon's own by default, which goes to its log.
        self._errlog = errlog if errlog is not None else sys.stderr
        self._loop, self._loop_thread = _background_loop()
        # Everything below is only touched on the loop, except the reads in status().
        self._live: _Live | None = None
        self._start_lock: asyncio.Lock | None = None
        self._stopped = False
        self._starts = 0
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._changes = ThreadPoolExecutor(1, thread_name_prefix=f"mcp-{server.name}")

    # -- the synchronous API -------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Start the server now; Unavailable if it cannot be started in time."""
        budget = self._start_timeout if timeout is None else timeout
        try:
            self._wait(self._ensure_started(time.monotonic() + budget), budget)
        except (_NotStarted, TimeoutError) as exc:
            raise Unavailable(f"MCP server `{self.server.name}`: {_describe(exc)}") from exc

    def list_tools(self, timeout: float | None = None) -> list[ToolInfo]:
        """Every tool the server offers (all pages); Unavailable when it cannot answer."""
        budget = self.server.timeout_seconds if timeout is None else timeout
        try:
            return self._wait(self._list_tools(time.monotonic() + budget), budget)
        except (_NotStarted, MCPError, TimeoutError) as exc:
            raise Unavailable(
                f"MCP server `{self.server.name}` did not list its tools: {_describe(exc)}"
            ) from exc

    def call(
        self, tool: str, arguments: Mapping[str, Any], timeout: float | None = None
    ) -> ToolCallOutcome:
        """Call one tool; never raises for what the server does, never blocks past timeout."""
        budget = self.server.timeout_seconds if timeout is None else timeout
        progress = _Progress()
        coro = self._call(tool, dict(arguments), time.monotonic() + budget, budget, progress)
        try:
            return self._wait(coro, budget)
        except TimeoutError:
            kind = OutcomeKind.TIMEOUT if progress.sent else OutcomeKind.UNAVAILABLE
            return ToolCallOutcome(kind, detail=f"no outcome within {budget:g} s")

    def stop(self) -> None:
        """Stop the server (in-flight calls end as lost) and refuse further calls."""
        try:
            self._wait(self._stop(), STOP_TIMEOUT)
        except TimeoutError:
            log.warning("MCP server %s did not stop within %g s", self.server.name, STOP_TIMEOUT)
        self._changes.shutdown(wait=False)

    def status(self) -> ConnectionStatus:
        live = self._live
        return ConnectionStatus(
            running=live is not None and not live.dead,
            starts=self._starts,
            failures=self._failures,
            retry_in=max(0.0, self._retry_at - time.monotonic()),
            last_error=self._last_error,
        )

    def _wait(self, coro: Coroutine[Any, Any, T], budget: float) -> T:
        if threading.current_thread() is self._loop_thread:
            raise RuntimeError("McpServerConnection's methods block: never call them on its loop")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(budget + GRACE_SECONDS)
        except TimeoutError:
            # Cancelling the task makes the SDK send the server a cancel for the request.
            future.cancel()
            raise

    # -- on the loop ----------------------------------------------------------------------

    async def _call(
        self,
        tool: str,
        arguments: dict[str, Any],
        deadline: float,
        budget: float,
        progress: _Progress,
    ) -> ToolCallOutcome:
        try:
            live = await self._ensure_started(deadline)
        except _NotStarted as exc:
            return ToolCallOutcome(OutcomeKind.UNAVAILABLE, detail=f"not sent: {exc}")
        remaining = deadline - time.monotonic()
        if remaining <= 0 or live.session is None:
            return ToolCallOutcome(
                OutcomeKind.UNAVAILABLE, detail="not sent: the deadline passed during start-up"
            )
        progress.sent = True
        try:
            result = await live.session.call_tool(tool, arguments, read_timeout_seconds=remaining)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return ToolCallOutcome(
                    OutcomeKind.TIMEOUT, detail=f"sent, but no answer within {budget:g} s"
                )
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._mark_dead(live, "the connection closed during a call")
                return ToolCallOutcome(
                    OutcomeKind.LOST, detail="sent, but the server's connection closed first"
                )
            self._answered()
            return ToolCallOutcome(
                OutcomeKind.ERROR,
                content=exc.message,
                is_error=True,
                detail=f"MCP error {exc.code}",
            )
        except Exception as exc:
            # A malformed answer or a transport failure after the request went out.
            return ToolCallOutcome(OutcomeKind.LOST, detail=f"sent, but the answer was lost: {exc}")
        self._answered()
        return ToolCallOutcome(
            OutcomeKind.ERROR if result.is_error else OutcomeKind.OK,
            content=_text(result.content),
            structured=result.structured_content,
            is_error=result.is_error,
        )

    async def _list_tools(self, deadline: float) -> list[ToolInfo]:
        live = await self._ensure_started(deadline)
        assert live.session is not None
        tools: list[ToolInfo] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                page = await live.session.list_tools(params=params)
            tools.extend(_tool_info(t) for t in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._answered()
        return tools

    async def _ensure_started(self, deadline: float) -> _Live:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                async with self._start_lock:
                    return await self._start_if_needed(deadline)
        except TimeoutError as exc:
            raise _NotStarted("the server could not be started before the deadline") from exc

    async def _start_if_needed(self, deadline: float) -> _Live:
        live = self._live
        if live is not None and not live.dead:
            return live
        if self._stopped:
            raise _NotStarted("the connection was stopped")
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            if time.monotonic() + wait >= deadline:
                raise _NotStarted(
                    f"the server failed {self._failures} time(s) in a row ({self._last_error});"
                    f" next start in {wait:.1f} s"
                )
            await asyncio.sleep(wait)
        budget = min(self._start_timeout, deadline - time.monotonic())
        live = _Live()
        ready: asyncio.Future[None] = self._loop.create_future()
        # Retrieve the outcome even when no caller waits for it any more (it timed out), so
        # asyncio does not log a never-retrieved exception.
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        # The runner owns the session's whole life; only ``ready`` is awaited here.
        live.task = self._loop.create_task(self._run(live, ready, budget))
        try:
            await asyncio.shield(ready)
        except Exception as exc:
            raise _NotStarted(f"could not start the server: {_describe(exc)}") from exc
        return live

    async def _run(self, live: _Live, ready: asyncio.Future[None], budget: float) -> None:
        try:
            async with AsyncExitStack() as stack:
                try:
                    # Spawning returns at once; the deadline is for the handshake. (A cancel
                    # scope around _open would wrap the task groups it enters.)
                    live.session = await self._open(stack, live)
                    with anyio.fail_after(max(0.0, budget)):
                        await live.session.initialize()
                except Exception as exc:
                    self._mark_dead(live, f"start failed: {_describe(exc)}")
                    ready.set_exception(exc)
                    return  # unwinding the stack stops what was started
                self._live = live
                self._starts += 1
                ready.set_result(None)
                if self._stopped:
                    live.stopping = True
                    live.done.set()
                elif self._starts > 1:
                    self._notify("restart")
                await live.done.wait()
        except Exception:
            log.exception("MCP server %s: error while shutting its session down", self.server.name)
        finally:
            self._mark_dead(live, "the server's connection ended")
            if self._live is live:
                self._live = None

    async def _open(self, stack: AsyncExitStack, live: _Live) -> ClientSession:
        read, write = await stack.enter_async_context(self._transport())
        # A pump between the transport and the session tells us when the transport
        # reaches EOF (the server died), which the session itself does not report.
        sink, source = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        group = await stack.enter_async_context(anyio.create_task_group())
        group.start_soon(self._pump, read, sink, live)
        stack.callback(group.cancel_scope.cancel)
        session = ClientSession(
            source, write, message_handler=self._on_message, client_info=CLIENT_INFO
        )
        return await stack.enter_async_context(session)

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        if self.server.url:
            return streamable_http_client(self.server.url)
        command, *args = self.server.command
        parameters = StdioServerParameters(command=command, args=args, env=dict(self.server.env))
        return stdio_client(parameters, errlog=self._errlog)

    async def _pump(
        self,
        source: MemoryObjectReceiveStream[SessionMessage | Exception],
        sink: MemoryObjectSendStream[SessionMessage | Exception],
        live: _Live,
    ) -> None:
        try:
            async with sink:
                async for item in source:
                    await sink.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self._mark_dead(live, "the server closed its connection")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._notify("list_changed")
        elif isinstance(message, Exception):
            log.warning("MCP server %s: transport error: %s", self.server.name, message)

    async def _stop(self) -> None:
        self._stopped = True
        live = self._live
        if live is None:
            return
        live.stopping = True
        live.done.set()
        if live.task is not None:
            await asyncio.wait({live.task})

    def _mark_dead(self, live: _Live, why: str) -> None:
        if live.dead:
            return
        live.dead = True
        live.done.set()
        if not live.stopping:
            self._failures += 1
            self._last_error = why
            self._retry_at = time.monotonic() + backoff_delay(self._failures)

    def _answered(self) -> None:
        self._failures = 0
        self._retry_at = 0.0

    def _notify(self, reason: str) -> None:
        if self._on_tools_changed is None or self._stopped:
            return
        self._changes.submit(self._deliver, self._on_tools_changed, reason)

    def _deliver(self, callback: Callable[[str], None], reason: str) -> None:
        try:
            callback(reason)
        except Exception:
            log.exception("MCP server %s: on_tools_changed(%s) failed", self.server.name, reason)


def _tool_info(tool: mcp_types.Tool) -> ToolInfo:
    hints = tool.annotations
    return ToolInfo(
        name=tool.name,
        description=tool.description or "",
        input_schema=types.MappingProxyType(dict(tool.input_schema)),
        annotations=None
        if hints is None
        else ToolHints(
            read_only=hints.read_only_hint,
            destructive=hints.destructive_hint,
            idempotent=hints.idempotent_hint,
            open_world=hints.open_world_hint,
        ),
    )


def _text(blocks: list[mcp_types.ContentBlock]) -> str:
    return "\n".join(
        block.text if isinstance(block, mcp_types.TextContent) else f"[{block.type} content]"
        for block in blocks
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__
