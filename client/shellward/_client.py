"""The synchronous client: one channel to one daemon, typed answers.

Each method builds its call with ``_requests`` and sends it; ``AsyncClient`` has the same
methods with the same signatures (a test holds them together).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc
from grpc.experimental import ChannelOptions

from shellward import _requests as calls
from shellward import _wire
from shellward._base import BaseClient
from shellward._exceptions import translate
from shellward._requests import PathLike, StreamEvent
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

_T = TypeVar("_T")


class Client(BaseClient):
    """A connection to a shellward daemon.

    ``Client()`` talks to the default Unix socket (or ``$SHELLWARD_SOCKET``);
    ``Client(address="127.0.0.1:7433", token=...)`` to a TCP listener.
    """

    def _open_channel(self, target: str) -> grpc.Channel:
        # A stream's events are read on the caller's thread: without this, grpc starts a
        # thread to read them whenever no other call is in flight on the channel (every
        # RunCommand of a client that runs one at a time), and hands each event over.
        single_thread = (ChannelOptions.SingleThreadedUnaryStream, 1)
        return grpc.insecure_channel(target, options=[*_wire.channel_options(), single_thread])

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

    def _send(self, call: calls.Rpc[_T]) -> _T:
        try:
            reply = getattr(self._stub, call.method)(call.request, **self._options(call.deadline))
        except grpc.RpcError as exc:
            raise translate(exc, self.target) from exc
        return call.decode(reply)

    def _events(self, call: calls.Streamed) -> Iterator[StreamEvent]:
        """Typed events of a RunCommand or Replay stream; the result comes last."""
        accepted = ""  # the call's id once the daemon took it: an error after may have run
        try:
            for message in getattr(self._stub, call.method)(
                call.request, **self._options(call.deadline)
            ):
                event = calls.event_from_wire(message)
                if isinstance(event, CallAccepted):
                    accepted = event.call_id
                if event is not None:
                    yield event
                if isinstance(event, CommandResult):
                    return
        except grpc.RpcError as exc:
            raise translate(exc, self.target, accepted) from exc
        raise calls.stream_ended_early()

    @staticmethod
    def _final(
        events: Iterator[StreamEvent], on_output: Callable[[OutputChunk], None] | None
    ) -> CommandResult:
        for event in events:
            if calls.take_event(event, on_output):
                assert isinstance(event, CommandResult)
                return event
        raise calls.stream_ended_early()

    # --- commands --------------------------------------------------------------------

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
        stdin: bytes = b"",
    ) -> Iterator[StreamEvent]:
        """Run a command and yield a CallAccepted, its OutputChunks, then the CommandResult.

        ``timeout`` bounds the command (the daemon kills it); ``rpc_timeout`` bounds this
        call only: when it passes (or the stream is closed) the daemon cancels the command,
        which ends as a killed call does (uncertain if it may have written). ``stdin``: what
        the command reads on its standard input (at most 1 MiB; part of the call's identity).
        """
        return self._events(calls.run_command(
            command, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, env=env,
            network=network, rerun=rerun, rpc_timeout=rpc_timeout, stdin=stdin,
        ))  # fmt: skip

    def run_command(
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
        stdin: bytes = b"",
    ) -> CommandResult:
        """Run a command and return its structured result (see ``stream_command``)."""
        events = self.stream_command(
            command, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout, env=env,
            network=network, rerun=rerun, rpc_timeout=rpc_timeout, stdin=stdin,
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
        return self._events(
            calls.replay(call_id, run_id=run_id, step_id=step_id, rerun=rerun,
                         rpc_timeout=rpc_timeout)
        )  # fmt: skip

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
        """The result of ``stream_replay``; ``on_output`` sees the output of a new run."""
        events = self.stream_replay(
            call_id, run_id=run_id, step_id=step_id, rerun=rerun, rpc_timeout=rpc_timeout
        )
        return self._final(events, on_output)

    def recover(self, run_id: str) -> list[RecoveryItem]:
        """Every step of a run that did not end cleanly, with the action to take."""
        return self._send(calls.recover(run_id))

    def wait_call(self, call_id: str, *, timeout: float = 60.0) -> CommandResult:
        """Wait until a call is final (approved and run, or a duplicate finished)."""
        return self._send(calls.wait_call(call_id, timeout))

    def approvals(self) -> list[LedgerEntry]:
        """Calls waiting for a human's approval."""
        return self._send(calls.approvals())

    def approve(self, call_id: str, *, reason: str = "") -> LedgerEntry:
        """Approve a pending call: it starts at once (follow it with ``wait_call``)."""
        return self._send(calls.answer(call_id, approve=True, reason=reason))

    def cancel(self, call_id: str, *, reason: str = "") -> LedgerEntry:
        """Kill a running call; returns its entry once recorded (a call that may have
        written ends uncertain). A stream the client abandons cancels its call too."""
        return self._send(calls.cancel(call_id, reason))

    def deny(self, call_id: str, *, reason: str = "") -> LedgerEntry:
        """Deny a pending call: it never runs."""
        return self._send(calls.answer(call_id, approve=False, reason=reason))

    # --- tools -----------------------------------------------------------------------

    def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        cwd: PathLike = None,
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
        return self._send(calls.call_tool(
            tool, arguments, cwd=cwd, run_id=run_id, step_id=step_id, timeout=timeout,
            user=user, rpc_timeout=rpc_timeout,
        ))  # fmt: skip

    def compensate(self, call_id: str, *, rpc_timeout: float | None = None) -> CommandResult:
        """Run the compensation configured for a business tool call, through the ledger:
        a second request answers the first one's result and sends nothing."""
        return self._send(calls.compensate(call_id, rpc_timeout))

    def undo(
        self, call_id: str, *, cwd: PathLike = None, rpc_timeout: float | None = None
    ) -> CommandResult:
        """Put back the files a call changed, where they are still as it left them; a
        second undo answers ALREADY_APPLIED. Refusals raise (CONFLICT: ``code``)."""
        (result,) = self._send(
            calls.undo(call_id, run_id="", from_step="", cwd=cwd, rpc_timeout=rpc_timeout)
        )
        return result

    def undo_run(
        self,
        run_id: str,
        from_step: str,
        *,
        cwd: PathLike = None,
        rpc_timeout: float | None = None,
    ) -> list[CommandResult]:
        """Undo a run's steps from its last back to ``from_step``, newest first; stops at
        the first that cannot be undone, whose refusal is the last result."""
        return self._send(calls.undo(
            "", run_id=run_id, from_step=from_step, cwd=cwd, rpc_timeout=rpc_timeout
        ))  # fmt: skip

    def list_tools(self) -> list[ToolInfo]:
        """Every tool the daemon offers, classified."""
        return self._send(calls.list_tools())

    # --- rules -----------------------------------------------------------------------

    def reload_rules(self) -> ReloadOutcome:
        """Make the daemon read its rule files again; a broken file changes nothing."""
        return self._send(calls.reload_rules())

    def check_rules(self, paths: Sequence[str | os.PathLike[str]] = ()) -> list[RuleFileCheck]:
        """Check rule files as the daemon would load them (no paths: all the files it
        loads); nothing is reloaded."""
        return self._send(calls.check_rules(paths))

    # --- queries ---------------------------------------------------------------------

    def classify(self, command: str, *, cwd: PathLike = None) -> Verdict:
        """What a command may do and whether it may run again; nothing runs."""
        return self._send(calls.classify(command, cwd))

    def get_call(self, call_id: str = "", *, run_id: str = "", step_id: str = "") -> LedgerEntry:
        """One ledger entry, by call id or by a step's newest attempt."""
        return self._send(calls.get_call(call_id, run_id=run_id, step_id=step_id))

    def list_calls(
        self, *, run_id: str = "", limit: int = 50, include_output: bool = False
    ) -> list[LedgerEntry]:
        """Up to ``limit`` recent ledger entries, newest first, paged through. Captured
        output only with ``include_output`` (else ``get_call`` fetches it)."""
        entries: list[LedgerEntry] = []
        token = ""
        while True:
            page, token = self._send(calls.list_calls(
                run_id=run_id, limit=limit - len(entries), include_output=include_output,
                page_token=token,
            ))  # fmt: skip
            entries.extend(page)
            if not token or len(entries) >= limit:
                return entries

    def status(self) -> DaemonStatus:
        """The daemon's state and configuration."""
        return self._send(calls.status())
