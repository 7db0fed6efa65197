"""A request (a command, or a tool's call): its checks, its identity (input hash) and its
durable form (JSON).

The JSON form is stored on every ledger entry, so that a call approved later, or replayed
after a restart, runs exactly what was asked.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shellwardd.config import MAX_COMMAND_BYTES, Config, Limits
from shellwardd.errors import InvalidArgument, PermissionDenied
from shellwardd.watch.hashing import bytes_hash

TOOL_RUN_COMMAND = "run_command"
MAX_ENV_ENTRIES = 256
# A command's stdin travels in the request and is kept in the ledger: small input only.
MAX_STDIN_BYTES = 1024 * 1024


@dataclass(frozen=True)
class CommandRequest:
    command: str
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 0.0
    run_id: str = ""
    step_id: str = ""
    network: bool = False
    rerun: bool = False
    limits: Limits | None = None
    # What the command reads on stdin (b"": /dev/null).
    stdin: bytes = b""

    @property
    def identity(self) -> tuple[str, str] | None:
        return (self.run_id, self.step_id) if self.run_id and self.step_id else None


def check_command(command: str) -> None:
    if not command.strip():
        raise InvalidArgument("the command is empty; send the shell command line to run")
    if "\0" in command:
        raise InvalidArgument("the command contains a NUL byte, which no shell can run; remove it")
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        raise InvalidArgument(
            f"the command is {size} bytes, over the limit of {MAX_COMMAND_BYTES}; write long "
            "scripts to a file in the workspace and run that file instead"
        )


def check_stdin(stdin: bytes) -> None:
    if len(stdin) > MAX_STDIN_BYTES:
        raise InvalidArgument(
            f"stdin is {len(stdin)} bytes, over the limit of {MAX_STDIN_BYTES}; write the input "
            "to a file in the workspace and have the command read that file"
        )


def check_env(env: Mapping[str, str]) -> None:
    if len(env) > MAX_ENV_ENTRIES:
        raise InvalidArgument(f"env has {len(env)} entries; at most {MAX_ENV_ENTRIES} are allowed")
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InvalidArgument(
                f"env entry {key!r} is invalid: names must be non-empty without '=' or NUL, "
                "values without NUL"
            )


def check_timeout(config: Config, requested: float) -> float:
    """The call's timeout: the daemon's default for 0, refused when over its maximum."""
    if requested != requested or requested < 0:  # NaN or negative
        raise InvalidArgument(
            f"timeout_seconds must be 0 (the default, {config.default_timeout:g}s) "
            f"or positive; got {requested}"
        )
    if requested > config.max_timeout:
        raise InvalidArgument(
            f"timeout_seconds {requested:g} is over the daemon's limit of "
            f"{config.max_timeout:g}s; ask for less, or raise --max-timeout"
        )
    return requested or config.default_timeout


def resolve_cwd(config: Config, cwd: str) -> tuple[Path, Path]:
    """The workspace containing ``cwd`` and the resolved cwd itself ("": the first one)."""
    if not cwd:
        workspace = config.workspaces[0]
        return workspace, workspace
    if "\0" in cwd:
        raise InvalidArgument("cwd contains a NUL byte")
    path = Path(cwd)
    if not path.is_absolute():
        raise InvalidArgument(f"cwd {cwd!r} must be an absolute path")
    resolved = Path(os.path.realpath(path))
    for workspace in config.workspaces:
        if resolved == workspace or workspace in resolved.parents:
            if not resolved.is_dir():
                raise InvalidArgument(f"cwd {cwd!r} does not exist or is not a directory")
            return workspace, resolved
    roots = ", ".join(str(w) for w in config.workspaces)
    raise PermissionDenied(
        f"cwd {cwd!r} is outside the daemon's workspaces ({roots}); run the command from "
        "inside one, or start the daemon with --workspace for that directory"
    )


def canonical_cwd(config: Config, cwd: str) -> str:
    """The cwd as the input hash sees it: "" is the first workspace, and "/ws", "/ws/",
    "/ws/." and a symlink to /ws are one place. Never raises: a bad cwd is refused when the
    call is planned, with the reason."""
    if not cwd:
        return str(config.workspaces[0])
    if "\0" in cwd or not os.path.isabs(cwd):
        return cwd
    return os.path.realpath(cwd)


def printable(command: str) -> str:
    """What the ledger keeps of a command: NULs made visible, capped at the size limit."""
    return command.replace("\0", "\\0")[:MAX_COMMAND_BYTES]


def input_hash(request: CommandRequest) -> str:
    """Identity of the input: what the command is and where it runs, not how long it may take."""
    canonical = json.dumps(
        {
            "tool": TOOL_RUN_COMMAND,
            "command": request.command,
            "cwd": request.cwd,
            "env": sorted(request.env.items()),
            "network": request.network,
            # Only when given, so that calls without input keep the hashes they always had.
            **({"stdin": bytes_hash(request.stdin)} if request.stdin else {}),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return bytes_hash(canonical.encode("utf-8", "surrogatepass"))


def to_json(request: CommandRequest) -> str:
    data = dataclasses.asdict(request)
    data["env"] = dict(request.env)
    del data["rerun"]  # a property of one delivery, not of the input
    data["stdin"] = base64.b64encode(request.stdin).decode("ascii")
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def from_json(text: str) -> CommandRequest:
    data = json.loads(text)
    limits = data.pop("limits", None)
    stdin = base64.b64decode(data.pop("stdin", ""))  # absent in calls recorded before stdin
    return CommandRequest(**data, limits=Limits(**limits) if limits else None, stdin=stdin)


@dataclass(frozen=True)
class ToolRequest:
    """A call of a tool other than run_command (a built-in file tool, an MCP tool)."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    cwd: str = ""
    timeout_seconds: float = 0.0
    run_id: str = ""
    step_id: str = ""
    user: str = ""
    rerun: bool = False

    @property
    def identity(self) -> tuple[str, str] | None:
        return (self.run_id, self.step_id) if self.run_id and self.step_id else None


def tool_input_hash(request: ToolRequest) -> str:
    """Identity of a tool call's input: the tool, its arguments, where and for whom."""
    canonical = json.dumps(
        {"tool": request.tool, "arguments": request.arguments, "cwd": request.cwd,
         "user": request.user},
        ensure_ascii=False, separators=(",", ":"), sort_keys=True,
    )  # fmt: skip
    return bytes_hash(canonical.encode("utf-8", "surrogatepass"))


def tool_to_json(request: ToolRequest) -> str:
    data = dataclasses.asdict(request)
    data["arguments"] = dict(request.arguments)
    del data["rerun"]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def tool_from_json(text: str) -> ToolRequest:
    return ToolRequest(**json.loads(text))
