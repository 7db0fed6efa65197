"""The tools ``shellward mcp`` offers a model: what each is called, what its description
tells the model, what its annotations promise, and the shape of its results.

Choices, and why:
- The sentences a model reads live here and only here: what the codes mean and what to do
  next is said once (``CODES``) and shared by every tool's description.
- ``run_command``, ``classify`` and ``recover`` are this server's own; every other tool is
  one the daemon lists (its file tools and the business tools of its MCP servers), with the
  daemon's input schema, so a tool the operator adds appears without a change here.
- Annotations must be true: the built-in file tools have a fixed table; a business tool's
  hints come from the daemon's classification of it (pins, annotations it trusts, its name),
  not from the far server's own claims, which the daemon does not believe blindly either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from shellward.types import Code, Idempotency, ReplayPolicy, ToolInfo

RUN_COMMAND = "run_command"
CLASSIFY = "classify"
RECOVER = "recover"

# The argument every tool accepts that names the step; not sent to the daemon as an argument.
STEP_ID = "step_id"

CODES = f"""\
Every result has `ok`, `code` and a sentence saying what to do next. Codes:
{Code.OK.value}: it ran and succeeded. {Code.COMMAND_FAILED.value}: it ran and failed (see \
exit_code and stderr). {Code.TIMEOUT.value}: killed at its time limit. \
{Code.NEEDS_APPROVAL.value}: nothing ran; a human must approve it with `shellward approve \
CALL_ID` (you cannot approve it yourself); tell the user and wait, or do something else. \
{Code.ALREADY_APPLIED.value}: an earlier attempt already made these changes; treat as done. \
{Code.SIDE_EFFECT_UNCERTAIN.value}: an earlier attempt may or may not have taken effect; \
check the state before trying again with a new step_id. {Code.CONFLICT.value}: the files \
changed since the earlier attempt; look at them first. {Code.IN_PROGRESS.value}: the same \
step is still running; call again with the same step_id later to get its answer. \
{Code.IDEMPOTENCY_KEY_MISMATCH.value}: this step_id was used for a different input; use a \
new step_id. {Code.PERMISSION_DENIED.value}: outside the workspaces or refused by rules. \
{Code.INVALID_ARGUMENT.value}: fix the arguments. {Code.UNAVAILABLE.value}: the shellward \
daemon is not running; tell the user.
`replayed: true` means the answer is the one recorded for this step_id, nothing ran again."""

STEP_HELP = (
    "A name for this step, unique within the conversation (e.g. `s12-run-tests`). Calling "
    "again with the same step_id and the same input returns the recorded answer instead of "
    "running it twice: use it when you retry after an error or a lost answer. Use a new "
    "step_id for a deliberate second run."
)

_RUN_DESCRIPTION = f"""\
Run a bash command line in shellward's sandbox, in the workspace (writes outside it are \
blocked; network leaves only through shellward's proxy, to the destinations the rules and \
the operator allow; secrets such as ~/.ssh are hidden). Before it runs, \
shellward classifies what it may do: the verdict says whether running it again is safe \
(idempotency: idempotent, conditional, non_idempotent; replay: auto, ask, never). After it \
runs, the files it created, modified or deleted are listed in `effects`, and every \
connection it asked for in `network_effects`.
{CODES}"""

_CLASSIFY_DESCRIPTION = """\
Say what a command line would do, without running it: for each program, whether it reads, \
writes, uses the network or runs other code, whether it needs a human's approval, and \
whether it is safe to run again (idempotency, replay policy, reason). Use it before a \
command you are unsure of."""

_RECOVER_DESCRIPTION = """\
After an interruption (a crash, a lost answer), list every step of this conversation's run \
that did not end cleanly, with what to do for each: replay (safe to run again with the \
same step_id), check (look at the state first), ask (a human decides), refuse (do not run \
again), wait (still running). Nothing runs."""

_SCOPE = "Paths are relative to the workspace root (or absolute inside it)."

# The built-in file tools: what they do to the workspace, truthfully.
_BUILTIN_HINTS: dict[str, types.ToolAnnotations] = {
    "read_file": types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    "list_files": types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    # Writing the same content again leaves the same file: idempotent, but it replaces one.
    "write_file": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
    # A diff applied twice does not give the same file (the base_hash check refuses it).
    "apply_patch": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
    ),
}

_EFFECT = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "kind": {"type": "string"}},
    "required": ["path", "kind"],
}

_NETWORK_EFFECT = {
    "type": "object",
    "properties": {
        "host": {"type": "string"},
        "port": {"type": "integer"},
        "method": {"type": "string", "description": "CONNECT for HTTPS, else the HTTP method"},
        "path": {"type": "string"},
        "bytes_sent": {"type": "integer"},
        "bytes_received": {"type": "integer"},
        "refused": {"type": "string", "description": "why the proxy refused it"},
    },
    "required": ["host", "port", "method"],
}

_VERDICT = {
    "type": "object",
    "properties": {
        "idempotency": {"type": "string", "enum": [i.value for i in Idempotency]},
        "replay_policy": {"type": "string", "enum": [p.value for p in ReplayPolicy]},
        "reason": {"type": "string"},
        "needs_approval": {"type": "boolean"},
        "needs_network": {"type": "boolean"},
    },
    "required": ["idempotency", "replay_policy", "reason"],
}

# The structured content of run_command and of every daemon tool.
RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "code": {"type": "string", "enum": [c.value for c in Code]},
        "content": {"type": "string", "description": "what happened and what to do next"},
        "exit_code": {"type": ["integer", "null"]},
        "call_id": {"type": "string", "description": "the ledger entry ('' if none)"},
        "status": {"type": "string"},
        "replayed": {"type": "boolean"},
        "retryable": {"type": "boolean"},
        "verdict": {"anyOf": [_VERDICT, {"type": "null"}]},
        "effects": {"type": "array", "items": _EFFECT},
        "network_effects": {
            "type": "array",
            "items": _NETWORK_EFFECT,
            "description": "every connection the call asked the daemon's network proxy for",
        },
        "output": {"description": "a tool's structured answer (null for commands)"},
    },
    "required": ["ok", "code", "content", "exit_code", "call_id", "verdict", "effects"],
}

_CLASSIFY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_VERDICT["properties"],  # type: ignore[dict-item]
        "parts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "program": {"type": "string"},
                    "idempotency": {"type": "string"},
                    "replay_policy": {"type": "string"},
                    "reason": {"type": "string"},
                },
            },
        },
    },
    "required": ["idempotency", "replay_policy", "reason", "parts"],
}

_RECOVER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string"},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "step_id": {"type": "string"},
                    "call_id": {"type": "string"},
                    "tool": {"type": "string"},
                    "command": {"type": "string"},
                    "status": {"type": "string"},
                    "action": {"type": "string"},
                    "reason": {"type": "string"},
                },
            },
        },
    },
    "required": ["run_id", "steps"],
}


@dataclass(frozen=True)
class ToolSpec:
    """What tools/list shows of one tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: types.ToolAnnotations

    def to_mcp(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=self.annotations,
        )


def _with_step(schema: dict[str, Any]) -> dict[str, Any]:
    properties = {
        **schema.get("properties", {}),
        STEP_ID: {"type": "string", "description": STEP_HELP},
    }
    return {**schema, "type": "object", "properties": properties}


OWN_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        RUN_COMMAND,
        _RUN_DESCRIPTION,
        _with_step(
            {
                "properties": {
                    "command": {"type": "string", "description": "a bash command line"},
                    "cwd": {
                        "type": "string",
                        "description": "working directory, relative to the server's "
                        "directory or absolute inside a workspace (default: the server's)",
                    },
                    "timeout": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "description": "seconds before the command is killed "
                        "(default: the daemon's)",
                    },
                },
                "required": ["command"],
            }
        ),
        RESULT_SCHEMA,
        # May write, delete, use the network when rules grant it: nothing here is safe to assume.
        types.ToolAnnotations(
            title="Run a command (sandboxed)",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
    ToolSpec(
        CLASSIFY,
        _CLASSIFY_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "a bash command line"},
                "cwd": {"type": "string", "description": "where it would run"},
            },
            "required": ["command"],
        },
        _CLASSIFY_SCHEMA,
        types.ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    ),
    ToolSpec(
        RECOVER,
        _RECOVER_DESCRIPTION,
        {"type": "object", "properties": {}},
        _RECOVER_SCHEMA,
        types.ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    ),
)

OWN_NAMES = frozenset(spec.name for spec in OWN_TOOLS)


def daemon_tool(tool: ToolInfo) -> ToolSpec:
    """One of the daemon's tools as the model sees it."""
    builtin = tool.server == "builtin"
    what = (
        f"{tool.description} {_SCOPE}"
        if builtin
        else f"{tool.description} (a tool of the `{tool.server}` service, called through "
        "shellward: each call is recorded, and a retry with the same step_id is answered "
        "from the record instead of calling the service twice.)"
    )
    approval = (
        " Its first run needs a human's approval (NEEDS_APPROVAL)." if tool.needs_approval else ""
    )
    description = (
        f"{what}{approval}\nshellward's verdict: {tool.idempotency.value}, replay "
        f"{tool.replay_policy.value} ({tool.reason}).\n{CODES}"
    )
    return ToolSpec(
        tool.name,
        description,
        _with_step(_schema(tool.input_schema_json)),
        RESULT_SCHEMA,
        _BUILTIN_HINTS[tool.name] if builtin and tool.name in _BUILTIN_HINTS else _hints(tool),
    )


def _hints(tool: ToolInfo) -> types.ToolAnnotations:
    """A business tool's hints from the daemon's classification: only a tool it classifies
    idempotent and auto-replayable is called read-only; every service is the open world."""
    idempotent = tool.idempotency is Idempotency.IDEMPOTENT
    harmless = idempotent and tool.replay_policy is ReplayPolicy.AUTO
    return types.ToolAnnotations(
        read_only_hint=harmless,
        destructive_hint=tool.idempotency is Idempotency.NON_IDEMPOTENT,
        idempotent_hint=idempotent,
        open_world_hint=tool.server != "builtin",
    )


def _schema(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}
