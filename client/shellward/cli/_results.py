"""Showing a call's result: live output, the summary line, JSON, and the exit status
(``run``, ``replay``, ``wait`` and ``call`` answer alike)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from shellward import _render
from shellward._client import Client
from shellward._exceptions import ProtocolError
from shellward._render import Style
from shellward._requests import StreamEvent
from shellward.types import CallAccepted, Code, CommandResult, OutputChunk, Stream

from ._base import EXIT_INTERRUPTED, EXIT_NOT_RUN, EXIT_OK, EXIT_TIMEOUT, error


def report_stream(
    client: Client, events: Iterator[StreamEvent], as_json: bool, *, content: bool = False
) -> int:
    """Show a streamed call (live output, then its summary, or only its JSON) and return
    its exit status. ``content``: print the result's sentence even when the call succeeded."""
    try:
        result, accepted = consume(events, live=not as_json)
    except KeyboardInterrupt:
        error(
            "interrupted: the daemon cancelled the command; it may have partly run. "
            "`shellward ledger` shows how it ended (uncertain if it may have written)"
        )
        return EXIT_INTERRUPTED
    if as_json:
        print(result_json(result))
    else:
        print_run_summary(result, accepted=accepted, content=content)
    return run_exit_code(client, result, accepted=accepted)


def consume(events: Iterator[StreamEvent], *, live: bool) -> tuple[CommandResult, bool]:
    """The call's result, and whether it was accepted as a new call (False: answered at
    once from the ledger, e.g. a replay or a refusal). ``live`` streams its output here."""
    accepted = False
    for event in events:
        if isinstance(event, CallAccepted):
            accepted = True
        elif isinstance(event, OutputChunk):
            if live:
                write_chunk(event)
        else:
            if live and event.replayed:
                write_recorded(event)
            return event, accepted
    raise ProtocolError("the daemon closed the stream without a final result")


def result_json(result: CommandResult, *, tool: bool = False) -> str:
    """``tool``: also the tool's structured ``output`` and the ``idempotency_key`` sent."""
    extra = {"output": result.output, "idempotency_key": result.idempotency_key} if tool else {}
    return _render.to_json({"call_id": result.call_id, **result.to_dict(), **extra})


def write_chunk(chunk: OutputChunk) -> None:
    stream = sys.stdout if chunk.stream is Stream.STDOUT else sys.stderr
    stream.flush()
    stream.buffer.write(chunk.data)
    stream.buffer.flush()


def write_recorded(result: CommandResult) -> None:
    """A replayed result streams nothing: show the output the ledger kept instead."""
    write_chunk(OutputChunk(Stream.STDOUT, result.stdout.data))
    write_chunk(OutputChunk(Stream.STDERR, result.stderr.data))


def print_run_summary(result: CommandResult, *, accepted: bool, content: bool = False) -> None:
    style = Style.for_stream(sys.stderr)
    print(_render.run_summary(result, style, accepted=accepted), file=sys.stderr)
    if content or (not result.ok and result.code is not Code.COMMAND_FAILED):
        print(_render.one_line(result.content), file=sys.stderr)


def run_exit_code(client: Client, result: CommandResult, *, accepted: bool) -> int:
    """The command's exit status; 0 when its changes were already applied (nothing ran);
    124 when it was killed at its time limit; else 125.

    ``accepted``: the daemon took it as a new call. A refusal answered from the ledger carries
    the earlier call's fields, so its exit status and times are not this run's.
    """
    if result.code is Code.ALREADY_APPLIED:
        return EXIT_OK
    if result.code in (Code.OK, Code.COMMAND_FAILED) and result.exit_code is not None:
        return result.exit_code
    return EXIT_TIMEOUT if accepted and _timed_out(client, result) else EXIT_NOT_RUN


def _timed_out(client: Client, result: CommandResult) -> bool:
    """TIMEOUT, or SIDE_EFFECT_UNCERTAIN from a run that lasted its whole time limit."""
    if result.code is Code.TIMEOUT:
        return True
    if result.code is not Code.SIDE_EFFECT_UNCERTAIN:
        return False
    if result.started_at is None or result.finished_at is None:
        return False
    limit = client.get_call(result.call_id).timeout_seconds
    return 0 < limit <= result.finished_at - result.started_at
