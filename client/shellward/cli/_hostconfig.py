"""``shellward mcp install``: the entry that makes an agent host start ``shellward mcp``,
written into that host's own configuration file.

Choices, and why:
- Pure planning (``plan``: old text in, new text out) apart from reading and writing the one
  file, so that ``--dry-run`` shows exactly what a real run writes, and a second run changes
  nothing (the entry is compared as data, not as text).
- A file we cannot read as the host does (broken JSON, not an object, a TOML entry of ours
  that differs) is never overwritten: the message says which file and what to do.
- TOML is only appended to: Python has no TOML writer in its standard library, and
  rewriting a user's Codex file through a round trip would lose its comments.
- The entry starts this interpreter (``python -m shellward.cli mcp``): it works whatever the
  host's PATH, and it is the shellward the user just ran.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shellward._exceptions import InvalidRequest

NAME = "shellward"


@dataclass(frozen=True)
class Host:
    """Where a host reads its MCP servers: per scope, a file; the key holding the servers."""

    project: str | None  # relative to the project root
    user: str | None  # relative to the home directory
    key: str
    toml: bool = False
    stdio_type: bool = False  # VS Code wants "type": "stdio" in each entry


HOSTS: dict[str, Host] = {
    "claude-code": Host(project=".mcp.json", user=".claude.json", key="mcpServers"),
    "cursor": Host(project=".cursor/mcp.json", user=".cursor/mcp.json", key="mcpServers"),
    "gemini": Host(project=".gemini/settings.json", user=".gemini/settings.json", key="mcpServers"),
    "vscode": Host(project=".vscode/mcp.json", user=None, key="servers", stdio_type=True),
    "codex": Host(project=None, user=".codex/config.toml", key="mcp_servers", toml=True),
}


@dataclass(frozen=True)
class Change:
    path: Path
    old: str
    new: str

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.old.splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                fromfile=f"{self.path} (now)",
                tofile=f"{self.path} (after)",
            )
        )


def config_path(client: str, scope: str, *, project: Path, home: Path) -> Path:
    host = HOSTS[client]
    relative = host.project if scope == "project" else host.user
    if relative is None:
        other = "user" if scope == "project" else "project"
        raise InvalidRequest(
            f"{client} has no {scope}-scope configuration file that shellward can write; "
            f"use --scope {other}"
        )
    return (project if scope == "project" else home) / relative


def entry(command: str, args: list[str], *, stdio_type: bool) -> dict[str, Any]:
    server: dict[str, Any] = {"command": command, "args": args}
    return {"type": "stdio", **server} if stdio_type else server


def plan(client: str, path: Path, command: str, args: list[str]) -> Change:
    host = HOSTS[client]
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    wanted = entry(command, args, stdio_type=host.stdio_type)
    if host.toml:
        return Change(path, old, _toml(path, old, host.key, wanted))
    return Change(path, old, _json(path, old, host.key, wanted))


def _json(path: Path, old: str, key: str, wanted: dict[str, Any]) -> str:
    try:
        document = json.loads(old) if old.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"{path} is not valid JSON ({exc}); fix it, or add the server by hand"
        ) from None
    servers = document.get(key, {}) if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise InvalidRequest(
            f"{path}: expected a JSON object with an object `{key}`; fix it, or add the "
            "server by hand"
        )
    if servers.get(NAME) == wanted:
        return old
    document[key] = {**servers, NAME: wanted}
    return json.dumps(document, indent=2) + "\n"


def _toml(path: Path, old: str, key: str, wanted: dict[str, Any]) -> str:
    try:
        document = tomllib.loads(old)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"{path} is not valid TOML ({exc}); fix it first") from None
    present = document.get(key, {}).get(NAME)
    if present == wanted:
        return old
    if present is not None:
        raise InvalidRequest(
            f"{path} already has a [{key}.{NAME}] that differs from this one; edit or remove "
            f"it by hand (wanted: command = {json.dumps(wanted['command'])}, args = "
            f"{json.dumps(wanted['args'])})"
        )
    # JSON strings and arrays of strings are valid TOML basic strings and arrays.
    block = (
        f"[{key}.{NAME}]\ncommand = {json.dumps(wanted['command'])}\n"
        f"args = {json.dumps(wanted['args'])}\n"
    )
    separator = "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
    return f"{old}{separator}{block}"


def write(change: Change) -> None:
    """Replace the file atomically, keeping its mode (0600 for a new one: it may hold
    other servers' secrets)."""
    change.path.parent.mkdir(parents=True, exist_ok=True)
    mode = change.path.stat().st_mode & 0o777 if change.path.exists() else 0o600
    fd, temporary = tempfile.mkstemp(dir=change.path.parent, prefix=f".{change.path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(change.new)
        os.chmod(temporary, mode)
        os.replace(temporary, change.path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
