"""``shellward mcp``: the daemon's commands and tools offered to an agent host over MCP.

Choices, and why:
- A thin translator: every tool call is one call of :class:`shellward.AsyncClient`, so the
  daemon classifies, sandboxes, records and replays exactly as for any other client. The
  server holds no state of its own beyond the run id; nothing here decides what may run.
- Identity: the run is ``--run-id`` when given, else the MCP session (the HTTP session id,
  or one id per stdio process, which is one host connection); the step is the call's
  ``step_id`` argument, else the ``shellward/step_id`` key of the request's ``_meta``. With
  both, a retried step is answered from the ledger (recorded answer, check, or refusal).
  Without a step every call is new: nothing to dedupe on.
- Progress: a command's output goes out as ``notifications/progress`` messages when the
  host gave a progress token (the SDK drops them otherwise), and is in the final text too.
- Cancellation: the host's ``notifications/cancelled`` cancels the handler, which cancels
  the gRPC stream. The daemon has no cancel RPC: the command keeps running to its end or
  its time limit, and is recorded; a retry of the same step waits for or returns it.
- Approving is never a tool the model can call. A call that needs a human is put to the
  host's user through ``elicitation/create`` when the host declares that capability (approve
  once, or deny; dismissing it leaves the call pending); otherwise it answers NEEDS_APPROVAL
  with the ``shellward approve`` instruction for the user. The host is the agent runtime,
  trusted as the holder of the daemon's socket is: what it relays is the user's answer.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server

from shellward._async import AsyncClient
from shellward._exceptions import InvalidRequest, ShellwardError
from shellward.types import Code, CommandResult, OutputChunk

from . import _results
from ._tools import CLASSIFY, OWN_NAMES, OWN_TOOLS, RECOVER, RUN_COMMAND, STEP_ID, daemon_tool

SERVER_NAME = "shellward"
STEP_META_KEY = "shellward/step_id"
SESSION_HEADER = "mcp-session-id"
# How long an approved call may take before the answer is IN_PROGRESS (then retry the step).
APPROVED_WAIT_SECONDS = 3600.0

_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_APPROVAL_FORM: types.ElicitRequestedSchema = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Run it once",
            "description": "Yes runs this call once; no refuses it for good.",
        }
    },
    "required": ["approve"],
}

INSTRUCTIONS = """\
shellward runs your shell commands and file edits in a sandbox and records each one. Give \
every call a step_id unique within this conversation, and reuse it only to retry the same \
call: a retry then gets the recorded answer instead of running twice. Read `code` and the \
sentence of every result: it says what to do next. After an interruption, call `recover`."""


@dataclass(frozen=True)
class Settings:
    """Where the daemon is, where calls run from, and the run id (``None``: per session)."""

    socket: str | None = None
    address: str | None = None
    token: str | None = None
    cwd: str = "."
    run_id: str | None = None
    version: str = "0+unknown"


class ShellwardMcp:
    """The MCP handlers over one daemon connection, opened on first use (in the server's
    event loop, which the asyncio gRPC channel belongs to)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: AsyncClient | None = None
        # One stdio process serves one host connection: that is its session.
        self._process_run = f"mcp-{uuid.uuid4().hex[:16]}"

    def server(self) -> Server[Any]:
        return Server(
            SERVER_NAME,
            version=self.settings.version,
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            s = self.settings
            # No per-RPC deadline: a command's own timeout bounds it, the host can cancel.
            self._client = AsyncClient(s.socket, address=s.address, token=s.token, rpc_timeout=None)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    # --- handlers ------------------------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [spec.to_mcp() for spec in OWN_TOOLS]
        try:
            offered = await self.client.list_tools()
        except ShellwardError:
            # Still list what we have: a call will then say that the daemon is down.
            offered = []
        tools += [daemon_tool(t).to_mcp() for t in offered if t.name not in OWN_NAMES]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            step = _step(arguments.pop(STEP_ID, None), ctx.meta)
            run = self._run_id(ctx)
            if params.name == RUN_COMMAND:
                return await self._run_command(ctx, arguments, run, step)
            if params.name == CLASSIFY:
                verdict = await self.client.classify(
                    _text(arguments, "command"), cwd=self._cwd(arguments)
                )
                return _results.classify_result(verdict)
            if params.name == RECOVER:
                return _results.recover_result(run, await self.client.recover(run))
            result = await self.client.call_tool(
                params.name,
                arguments,
                cwd=self._cwd({}),
                run_id=run,
                step_id=step,
            )
            return _results.command_result(await self._ask_human(ctx, result))
        except ShellwardError as exc:
            return _results.error_result(exc)

    async def _run_command(
        self,
        ctx: ServerRequestContext[Any],
        arguments: dict[str, Any],
        run: str,
        step: str,
    ) -> types.CallToolResult:
        timeout = arguments.get("timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise InvalidRequest(f"timeout must be a number of seconds above 0, got {timeout!r}")
        events = self.client.stream_command(
            _text(arguments, "command"),
            cwd=self._cwd(arguments),
            run_id=run,
            step_id=step,
            timeout=float(timeout) if timeout is not None else None,
        )
        sent = 0
        async for event in events:
            if isinstance(event, OutputChunk):
                sent += len(event.data)
                text = event.data.decode("utf-8", errors="replace")
                await ctx.session.report_progress(sent, None, f"{event.stream.value}: {text}")
            elif isinstance(event, CommandResult):
                return _results.command_result(await self._ask_human(ctx, event))
        raise ShellwardError("the daemon ended the call without a result; see `shellward ledger`")

    async def _ask_human(
        self, ctx: ServerRequestContext[Any], result: CommandResult
    ) -> CommandResult:
        """A call waiting for approval, put to the host's user when the host can ask; the
        call's final result on an answer, ``result`` itself when nobody was asked or the
        user dismissed the question (the call stays pending for `shellward approve`)."""
        if result.code is not Code.NEEDS_APPROVAL or not result.call_id:
            return result
        if not ctx.session.check_client_capability(_ELICITATION):
            return result
        reason = result.verdict.reason if result.verdict else result.content
        answer = await ctx.session.elicit_form(
            f"shellward: the agent wants to run a call that needs your approval.\n{reason}\n"
            f"Call {result.call_id}. Run it once?",
            _APPROVAL_FORM,
            related_request_id=ctx.request_id,
        )
        if answer.action == "cancel":
            return result
        approved = answer.action == "accept" and bool((answer.content or {}).get("approve"))
        if approved:
            await self.client.approve(result.call_id, reason="approved by the MCP host's user")
        else:
            await self.client.deny(result.call_id, reason="denied by the MCP host's user")
        return await self.client.wait_call(result.call_id, timeout=APPROVED_WAIT_SECONDS)

    # --- identity and places -------------------------------------------------------------

    def _run_id(self, ctx: ServerRequestContext[Any]) -> str:
        if self.settings.run_id:
            return self.settings.run_id
        headers = getattr(ctx.request, "headers", None)
        session = headers.get(SESSION_HEADER) if headers is not None else None
        return f"mcp-{session}" if session else self._process_run

    def _cwd(self, arguments: dict[str, Any]) -> str:
        base = os.path.abspath(self.settings.cwd)
        cwd = arguments.get("cwd")
        if cwd is None or cwd == "":
            return base
        if not isinstance(cwd, str):
            raise InvalidRequest(f"cwd must be a string (a directory), got {cwd!r}")
        return os.path.normpath(os.path.join(base, cwd))


def _step(argument: object, meta: types.RequestParamsMeta | None) -> str:
    """The step: the argument, else the host's request metadata, else a new one (the
    daemon takes a run id only with a step id; a call without a step is a new call)."""
    if argument is None and meta:
        argument = meta.get(STEP_META_KEY)
    if argument is None or argument == "":
        return f"unnamed-{uuid.uuid4()}"
    if not isinstance(argument, str):
        raise InvalidRequest(f"step_id must be a string, got {argument!r}")
    return argument


def _text(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"`{name}` is required: give a non-empty string")
    return value
