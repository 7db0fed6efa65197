"""The operator's TOML file of MCP servers and tool pins (see docs/mcp.md).

::

    [[server]]
    name = "business"                      # letters, digits, - and _; tools are business.<tool>
    command = ["python", "server.py"]      # a stdio server … or:
    # url = "http://127.0.0.1:8931/mcp"    # streamable HTTP, on this machine only
    trust = "untrusted"                    # or "trusted": only then are annotations read
    env = { API_BASE = "http://127.0.0.1:9000" }
    timeout_seconds = 60                   # default deadline of a call

    [[tool]]
    server = "business"
    name = "create_issue"
    idempotency = "non_idempotent"         # pins; each optional
    replay = "never"                       # (`replay_policy`, its old spelling, still works)
    approval = true
    key_argument = "idempotency_key"       # where the runtime passes the key
    object_argument = "repo"               # the business object's id, for {object}
    key_scope = "run"                      # or "object"
    key_template = "agent:{user}:{run}:{tool}:{object}"
    status_tool = "get_issue_by_idempotency_key"

Every error is ``file:line: what is wrong, what to do``; unknown fields are refused so that a
typo (``idempotence = …``) cannot silently leave a tool unpinned.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from shellward.types import Idempotency, ReplayPolicy
from shellwardd.errors import ConfigError
from shellwardd.tomlfile import Block, TomlFile, read_text

from .compensation import Compensation
from .compensation import template_problem as compensation_problem
from .keys import KeyScope, default_template, template_problem

DEFAULT_TIMEOUT_SECONDS = 60.0

_NAME = re.compile(r"[A-Za-z0-9_-]+")

_SERVER_FIELDS = ("name", "command", "url", "trust", "env", "timeout_seconds")
_TOOL_FIELDS = (
    "server",
    "name",
    "idempotency",
    "replay",
    "approval",
    "key_template",
    "key_argument",
    "object_argument",
    "key_scope",
    "status_tool",
    "compensate",
)


class ToolConfigError(ConfigError):
    """A tool configuration that cannot be used; ``str()`` is ``path:line: message``."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.problem = message


class Trust(enum.Enum):
    UNTRUSTED = "untrusted"
    TRUSTED = "trusted"


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: a stdio ``command`` or a loopback streamable-HTTP ``url``."""

    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    trust: Trust = Trust.UNTRUSTED
    env: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    # Where it was declared, for messages about it.
    origin: str = ""


@dataclass(frozen=True)
class ToolPin:
    """The operator's settings for one tool; None / "" = not pinned."""

    server: str
    name: str
    idempotency: Idempotency | None = None
    replay_policy: ReplayPolicy | None = None
    approval: bool | None = None
    # Filled with the scope's default when key_argument is set without a template.
    key_template: str = ""
    key_argument: str = ""
    object_argument: str = ""
    key_scope: KeyScope = KeyScope.RUN
    status_tool: str = ""
    # The tool of the same server that reverts a call (`shellward compensate`).
    compensate: Compensation | None = None
    origin: str = ""


@dataclass(frozen=True)
class ToolsConfig:
    servers: tuple[ServerConfig, ...] = ()
    pins: tuple[ToolPin, ...] = ()
    path: str = ""

    def pin(self, server: str, tool: str) -> ToolPin | None:
        return next((p for p in self.pins if p.server == server and p.name == tool), None)


def load_tools_config(path: Path) -> ToolsConfig:
    """Read and validate the file; ToolConfigError names the file and line of any problem."""
    return parse_tools_config(read_text(path, ToolConfigError, "tool configuration"), str(path))


def parse_tools_config(text: str, path: str) -> ToolsConfig:
    file = TomlFile(path, text, ToolConfigError)
    file.check_top_level(("server", "tool"), "write [[server]] and [[tool]] tables")
    servers = [_read_server(_Table(file, *found)) for found in file.tables("server")]
    seen: dict[str, ServerConfig] = {}
    for server in servers:
        if server.name in seen:
            raise ToolConfigError(
                path,
                _origin_line(server.origin),
                f"duplicate server name `{server.name}` (first at {seen[server.name].origin});"
                " give each server its own name",
            )
        seen[server.name] = server
    pins = [_read_pin(_Table(file, *found)) for found in file.tables("tool")]
    pinned: dict[tuple[str, str], ToolPin] = {}
    for pin in pins:
        if pin.server not in seen:
            known = ", ".join(f"`{s}`" for s in seen) or "none declared"
            raise ToolConfigError(
                path,
                _origin_line(pin.origin),
                f"[[tool]] `{pin.name}` names server `{pin.server}`, which is not declared"
                f" (servers: {known})",
            )
        if (pin.server, pin.name) in pinned:
            raise ToolConfigError(
                path,
                _origin_line(pin.origin),
                f"tool `{pin.server}.{pin.name}` is pinned twice (first at"
                f" {pinned[(pin.server, pin.name)].origin}); merge the two [[tool]] tables",
            )
        pinned[(pin.server, pin.name)] = pin
    return ToolsConfig(tuple(servers), tuple(pins), path)


def _origin_line(origin: str) -> int:
    return int(origin.rsplit(":", 1)[1])


class _Table:
    """One [[server]] or [[tool]] table, with the lines it spans for error messages."""

    def __init__(self, file: TomlFile, block: Block, table: dict[str, Any]) -> None:
        self.file = file
        self.path = file.path
        self.start = block.start
        self.block = block
        self.table = file.take_renamed(block, table)

    def line_of(self, key: str) -> int:
        return self.file.key_line(self.block, key)

    def fail(self, key: str | None, message: str) -> NoReturn:
        self.file.fail(self.line_of(key) if key else self.start, message)

    def check_fields(self, known: tuple[str, ...], what: str) -> None:
        for key in self.table:
            if key not in known:
                self.fail(key, f"unknown field `{key}` in {what}; known fields: {', '.join(known)}")

    def string(self, key: str, *, required: bool = False) -> str:
        value = self.table.get(key)
        if value is None:
            if required:
                self.fail(None, f"missing `{key}`")
            return ""
        if not isinstance(value, str) or not value:
            self.fail(key, f"`{key}` must be a non-empty string (got {value!r})")
        return str(value)

    def enum(self, key: str, cls: type[enum.Enum]) -> Any:
        value = self.table.get(key)
        if value is None:
            return None
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(f'"{m.value}"' for m in cls)
            self.fail(key, f"invalid `{key}` {value!r}: use one of {choices}")

    @property
    def origin(self) -> str:
        return f"{self.path}:{self.start}"


def _read_server(t: _Table) -> ServerConfig:
    t.check_fields(_SERVER_FIELDS, "[[server]]")
    name = t.string("name", required=True)
    if not _NAME.fullmatch(name):
        t.fail("name", f"server name {name!r} may only use letters, digits, - and _")
    command = t.table.get("command")
    url = t.string("url")
    if (command is None) == (not url):
        t.fail(None, f"server `{name}`: set exactly one of `command` (stdio) or `url` (HTTP)")
    if command is not None and (
        not isinstance(command, list)
        or not command
        or not all(isinstance(a, str) and a for a in command)
    ):
        t.fail("command", f"server `{name}`: `command` must be a non-empty list of strings")
    if url:
        _check_url(t, name, url)
    env = t.table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        t.fail("env", f"server `{name}`: `env` must be a table of strings")
    timeout = t.table.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        t.fail("timeout_seconds", f"server `{name}`: `timeout_seconds` must be a positive number")
    return ServerConfig(
        name=name,
        command=tuple(command or ()),
        url=url,
        trust=t.enum("trust", Trust) or Trust.UNTRUSTED,
        env=types.MappingProxyType(dict(env)),
        timeout_seconds=float(timeout),
        origin=t.origin,
    )


def _check_url(t: _Table, name: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        t.fail("url", f"server `{name}`: `url` must be an http:// or https:// URL (got {url!r})")
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        t.fail(
            "url",
            f"server `{name}`: `url` host `{host}` is not on this machine; shellward only"
            " talks HTTP to MCP servers on loopback (127.0.0.1, ::1, localhost). Run a"
            " remote server behind a local proxy or as a stdio `command`.",
        )


def _read_pin(t: _Table) -> ToolPin:
    t.check_fields(_TOOL_FIELDS, "[[tool]]")
    server = t.string("server", required=True)
    name = t.string("name", required=True)
    approval = t.table.get("approval")
    if approval is not None and not isinstance(approval, bool):
        t.fail("approval", f"tool `{name}`: `approval` must be true or false")
    scope = t.enum("key_scope", KeyScope) or KeyScope.RUN
    key_argument = t.string("key_argument")
    object_argument = t.string("object_argument")
    template = t.string("key_template")
    if template and not key_argument:
        t.fail(
            "key_template",
            f"tool `{name}`: a key_template needs key_argument, the argument the key is passed in",
        )
    if key_argument and not template:
        template = default_template(scope, has_object=bool(object_argument))
    if template:
        problem = template_problem(template, scope, object_argument)
        if problem:
            t.fail("key_template" if "key_template" in t.table else "key_scope", problem)
    return ToolPin(
        server=server,
        name=name,
        idempotency=t.enum("idempotency", Idempotency),
        replay_policy=t.enum("replay", ReplayPolicy),
        approval=approval,
        key_template=template,
        key_argument=key_argument,
        object_argument=object_argument,
        key_scope=scope,
        status_tool=t.string("status_tool"),
        compensate=_read_compensation(t, name),
        origin=t.origin,
    )


def _read_compensation(t: _Table, name: str) -> Compensation | None:
    value = t.table.get("compensate")
    if value is None:
        return None
    example = 'compensate = { tool = "cancel_order", arguments = { order_id = "{output.id}" } }'
    if not isinstance(value, dict) or set(value) - {"tool", "arguments"}:
        t.fail("compensate", f"tool `{name}`: `compensate` must be a table like {example}")
    tool = value.get("tool")
    if not isinstance(tool, str) or not _NAME.fullmatch(tool):
        t.fail(
            "compensate",
            f"tool `{name}`: `compensate.tool` must name a tool of the same server ({example})",
        )
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        t.fail("compensate", f"tool `{name}`: `compensate.arguments` must be a table")
    problem = compensation_problem(arguments)
    if problem:
        t.fail("compensate", f"tool `{name}`: {problem}")
    return Compensation(tool, types.MappingProxyType(dict(arguments)))
