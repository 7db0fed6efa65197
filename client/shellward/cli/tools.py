"""`shellward tools` and `shellward call`: the daemon's tools, and calling one."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shellward import _render
from shellward._client import Client
from shellward._exceptions import NotFound
from shellward.types import Code, CommandResult, OutputChunk, Stream

from ._base import (
    EXIT_ERROR,
    EXIT_NOT_RUN,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    Commands,
    UsageError,
    absolute_cwd,
    add_identity,
    add_json,
    answer,
    connect,
    env_pair,
    error,
    find_call,
    identity,
    positive,
    subparser,
)
from ._results import print_run_summary, result_json, write_chunk

TOOLS_EPILOG = """\
Every tool the daemon offers: the built-in file tools and the tools of the MCP servers in
its --tools-config. Columns: tool (call it by this name), server (`builtin` or the MCP
server), trust, verdict (idempotency/replay policy), source of the verdict (builtin, pin,
annotations, name, default), approval (`first run`: a human approves its first run),
CHANGED (its description is no longer the one first seen: look at it again), reason.

examples:
  shellward tools
  shellward tools --json | jq '.[] | select(.replay_policy == "never") | .name'
"""


def cmd_tools(args: argparse.Namespace) -> int:
    with connect(args) as client:
        tools = client.list_tools()
    return answer(
        args.json,
        [_render.tool_jsonable(tool) for tool in tools],
        lambda style: _render.tools_table(tools, style),
    )


def _add_tools(commands: Commands) -> None:
    tools = subparser(
        commands, "tools", cmd_tools, "List the tools the daemon offers, classified.", TOOLS_EPILOG
    )
    add_json(tools, "a JSON array of every field of every tool")


READ_FILE = "read_file"  # the tool whose answer is raw bytes

CALL_EPILOG = """\
Arguments: each `--arg KEY=VALUE` sets one; VALUE is taken as JSON when it parses as JSON
(`max_bytes=100` is a number, `force=true` a boolean, `ids=[1,2]` a list), else as a string
(`path=src/a.py`); write a JSON string to keep a number a string (`--arg 'id="42"'`).
`--args JSON` gives a JSON object of arguments; --arg wins over it. --cwd (default: the
current directory) names the workspace the call is made in; file tools take paths relative
to that workspace's root (or absolute inside it), wherever in it you are.

Output: read_file's bytes, unchanged, to stdout; any other tool's structured answer as
indented JSON to stdout. Then to stderr: the summary line (as `shellward run`), the daemon's
sentence, and the idempotency key shellward sent with a business tool call, if any.
With --run-id and --step-id a second call of the same step is answered from the ledger
(replayed, checked or refused), not run twice.

exit status:
  0     it ran and succeeded, or its changes were already applied (ALREADY_APPLIED)
  124   it was sent and timed out, or its outcome is unknown (SIDE_EFFECT_UNCERTAIN)
  125   nothing ran: refused, needs approval, conflict, permission denied, unavailable
  2     the daemon refused the arguments (INVALID_ARGUMENT), or a bad command line
  1     the tool failed, no such tool or file, or shellward itself failed

examples:
  shellward call read_file --arg path=src/a.py --arg max_bytes=100
  shellward call list_files --arg pattern='*.py'
  shellward call write_file --args '{"path": "notes.txt", "content": "hi\\n"}' \\
      --run-id r1 --step-id s1
  shellward call biz.get_order_status --arg order_id=o-1 --json | jq .output
"""

_CALL_ERRORS = frozenset({Code.COMMAND_FAILED, Code.NOT_FOUND, Code.INTERNAL})


def cmd_call(args: argparse.Namespace) -> int:
    run_id, step_id = identity(args)
    arguments = {**_json_object(args.args), **dict(args.arg or ())}
    with connect(args) as client:
        earlier = _step_call_id(client, run_id, step_id)
        result = client.call_tool(
            args.tool,
            arguments,
            cwd=absolute_cwd(args.cwd),
            run_id=run_id,
            step_id=step_id,
            timeout=args.timeout,
            user=args.user or "",
        )
    # A call answered from the ledger (replayed, refused) names the step's earlier call.
    accepted = result.call_id != earlier
    if args.json:
        print(result_json(result, tool=True))
    else:
        if args.tool == READ_FILE:
            write_chunk(OutputChunk(Stream.STDOUT, result.stdout.data))
        elif result.output is not None:
            print(_render.to_json(result.output), flush=True)
        print_run_summary(result, accepted=accepted, content=True)
        if result.idempotency_key:
            error(f"idempotency key: {result.idempotency_key}")
    return call_exit_code(result, accepted=accepted)


def call_exit_code(result: CommandResult, *, accepted: bool) -> int:
    """0 ok (also ALREADY_APPLIED); 124 a new call that timed out or whose outcome is
    unknown; 2 invalid arguments; 1 the tool failed or is unknown; else 125, nothing ran."""
    if result.ok:
        return EXIT_OK
    if result.code is Code.INVALID_ARGUMENT:
        return EXIT_USAGE
    if result.code in _CALL_ERRORS:
        return EXIT_ERROR
    if accepted and result.code in (Code.TIMEOUT, Code.SIDE_EFFECT_UNCERTAIN):
        return EXIT_TIMEOUT
    return EXIT_NOT_RUN


def _step_call_id(client: Client, run_id: str, step_id: str) -> str:
    """The id of the step's newest call so far ("" without a step, or for a new one)."""
    if not run_id or not step_id:
        return ""
    try:
        return client.get_call(run_id=run_id, step_id=step_id).call_id
    except NotFound:
        return ""


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'--args is not valid JSON ({exc}); give an object: \'{{"path": "a"}}\''
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"--args must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def _tool_argument(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value as JSON when it parses as JSON, else as a string."""
    key, value = env_pair(text)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _add_call(commands: Commands) -> None:
    call = subparser(
        commands,
        "call",
        cmd_call,
        "Call a tool (a file tool, an MCP server's tool) through the ledger.",
        CALL_EPILOG,
    )
    call.add_argument("tool", metavar="TOOL", help="the tool's name, as `shellward tools` shows")
    call.add_argument(
        "--arg",
        metavar="KEY=VALUE",
        type=_tool_argument,
        action="append",
        help="one argument; VALUE is JSON if it parses as JSON, else a string; repeatable",
    )
    call.add_argument("--args", metavar="JSON", help="a JSON object of arguments (--arg wins)")
    call.add_argument(
        "--cwd",
        metavar="DIR",
        help="call from here: its workspace is the one file paths are relative to "
        "(default: the current directory)",
    )
    add_identity(call)
    call.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive(float),
        help="the call's deadline (default: the server's, or the daemon's)",
    )
    call.add_argument(
        "--user", metavar="U", help="the user the call is made for (default: the daemon's)"
    )
    add_json(call, "print only the structured result, with `output` and `idempotency_key`, as JSON")


COMPENSATE_EPILOG = """\
Runs the compensation the tools configuration names for a business tool call (its [[tool]]
table's `compensate`, e.g. cancel_order for create_order), with arguments filled from that
call's recorded input and answer. It goes through the ledger as the step
`compensate:<CALL_ID>`: compensating the same call again answers the first compensation's
result and sends nothing. Refused, nothing sent, when the tool has no compensation, the call
did not take effect, is not finished, or is uncertain in a way that cannot be compensated
safely (the daemon's sentence says what to do instead).

exit status: as `shellward call`: 0 compensated (or answered from the ledger); 124 sent,
outcome unknown; 125 nothing ran; 1 the compensating tool failed or the daemon refused.

examples:
  shellward compensate 3f2a9c1e
  shellward compensate --json 3f2a9c1e | jq .output
"""


def cmd_compensate(args: argparse.Namespace) -> int:
    with connect(args) as client:
        original = find_call(client, args.call_id)
        result = client.compensate(original.call_id)
    accepted = not result.replayed
    if args.json:
        print(result_json(result, tool=True))
    else:
        if result.output is not None:
            print(_render.to_json(result.output), flush=True)
        print_run_summary(result, accepted=accepted, content=True)
    return call_exit_code(result, accepted=accepted)


def _add_compensate(commands: Commands) -> None:
    compensate = subparser(
        commands,
        "compensate",
        cmd_compensate,
        "Revert a business tool call with its configured compensating tool, once.",
        COMPENSATE_EPILOG,
    )
    compensate.add_argument(
        "call_id", metavar="CALL_ID", help="the business tool call, or a unique prefix of its id"
    )
    add_json(compensate, "print only the structured result of the compensating call, as JSON")


def add(commands: Commands) -> None:
    _add_tools(commands)
    _add_call(commands)
    _add_compensate(commands)
