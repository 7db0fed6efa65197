"""Request messages and stream events shared by the sync and the asyncio client."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from shellward import _wire
from shellward.types import CallAccepted, CommandResult, OutputChunk
from shellward.v1 import shellward_pb2 as pb

StreamEvent = CallAccepted | OutputChunk | CommandResult
PathLike = str | os.PathLike[str] | None


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization`` metadata; ``None`` reads ``$SHELLWARD_TOKEN``."""
    token = token if token is not None else os.environ.get("SHELLWARD_TOKEN")
    return (("authorization", f"Bearer {token}"),) if token else ()


def command_request(
    command: str,
    *,
    cwd: PathLike,
    run_id: str,
    step_id: str,
    timeout: float | None,
    env: Mapping[str, str] | None,
    network: bool,
    rerun: bool,
) -> pb.RunCommandRequest:
    return pb.RunCommandRequest(
        command=command,
        cwd=str(cwd) if cwd is not None else "",
        env=dict(env or {}),
        timeout_seconds=timeout or 0.0,
        run_id=run_id,
        step_id=step_id,
        network=pb.NetworkRequest(allow=network),
        rerun=rerun,
    )


def tool_request(
    tool: str,
    arguments: Mapping[str, Any] | None,
    *,
    cwd: PathLike,
    run_id: str,
    step_id: str,
    timeout: float | None,
    user: str,
) -> pb.CallToolRequest:
    request = pb.CallToolRequest(
        tool=tool,
        cwd=str(cwd) if cwd is not None else "",
        run_id=run_id,
        step_id=step_id,
        timeout_seconds=timeout or 0.0,
        user=user,
        # JSON text, not the Struct: a Struct turns integers into doubles.
        arguments_json=json.dumps(dict(arguments or {}), ensure_ascii=False),
    )
    return request


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
