"""The tools of every configured MCP server, each with shellward's own verdict.

``ToolRegistry`` starts the servers, lists their tools and reclassifies each one (pins,
trust, names: see ``classify``). It lists them again when a server sends
``tools/list_changed`` or restarts, and flags a tool whose description is no longer the one
first seen (a server can change what a tool claims to do after the operator looked at it).
It resolves the names agents use (``server.tool``, or ``tool`` when only one server has it),
builds idempotency keys from the configured templates and calls the server with the key
injected into the configured argument. It records nothing: the runtime writes the ledger
around ``call``.
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from shellwardd.errors import InvalidArgument, NotFound, Unavailable

from .classify import ToolHints, ToolVerdict, classify_tool
from .config import ServerConfig, ToolPin, ToolsConfig, Trust
from .connection import ConnectionStatus, OutcomeKind, ToolCallOutcome, ToolInfo
from .keys import object_id, render_key

log = logging.getLogger(__name__)


class Classify(Protocol):
    def __call__(
        self,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        hints: ToolHints | None,
        *,
        trusted: bool,
        pin: ToolPin | None = None,
    ) -> ToolVerdict: ...


@dataclass(frozen=True)
class RegisteredTool:
    name: str
    server: str
    description: str
    input_schema: Mapping[str, Any]
    verdict: ToolVerdict
    trust: Trust
    description_hash: str
    # The description differs from the one first seen for this tool.
    changed: bool
    pin: ToolPin | None = None
    # What the server claims about the tool, whether or not the verdict believed it.
    annotations: ToolHints | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.server}.{self.name}"


def description_hash(description: str) -> str:
    return "sha256:" + hashlib.sha256(description.encode("utf-8")).hexdigest()


class ToolRegistry:
    def __init__(self, config: ToolsConfig, classify: Classify = classify_tool) -> None:
        self.config = config
        self._classify = classify
        self._lock = threading.Lock()
        self._tools: dict[tuple[str, str], RegisteredTool] = {}
        # The first description hash seen per tool: what "changed" is measured against.
        self._baseline: dict[tuple[str, str], str] = {}
        self._problems: dict[str, tuple[str, ...]] = {}
        if config.servers:
            # Only here: the MCP SDK is half of the daemon's start-up imports.
            from .mcp_client import McpServerConnection
        self._connections = {
            server.name: McpServerConnection(
                server, on_tools_changed=partial(self._tools_changed, server.name)
            )
            for server in config.servers
        }

    def start(self) -> None:
        """Start every server and load its tools, in parallel. A server that cannot start
        is reported by ``problems()`` and has no tools until ``reload`` succeeds."""
        if not self._connections:
            return
        with ThreadPoolExecutor(len(self._connections)) as pool:
            list(pool.map(self._start_one, self.config.servers))

    def stop(self) -> None:
        for connection in self._connections.values():
            connection.stop()

    def reload(self, server: str) -> None:
        """List one server's tools again and reclassify them; Unavailable if it cannot."""
        connection = self._connections.get(server)
        if connection is None:
            raise NotFound(f"no MCP server named `{server}` is configured")
        self._install(connection.server, connection.list_tools())

    def list(self) -> list[RegisteredTool]:
        with self._lock:
            return sorted(self._tools.values(), key=lambda t: t.qualified_name)

    def problems(self) -> builtins.list[str]:
        """What is wrong with the configuration as the servers see it, one sentence each."""
        with self._lock:
            return [p for server in sorted(self._problems) for p in self._problems[server]]

    def status(self) -> dict[str, ConnectionStatus]:
        return {name: c.status() for name, c in self._connections.items()}

    def resolve(self, name: str) -> RegisteredTool:
        """The tool an agent means by ``server.tool``, or by ``tool`` when it is unique."""
        with self._lock:
            server, dot, rest = name.partition(".")
            if dot and (server, rest) in self._tools:
                return self._tools[(server, rest)]
            found = [t for (_, tool), t in self._tools.items() if tool == name]
        if len(found) == 1:
            return found[0]
        if found:
            choices = ", ".join(sorted(t.qualified_name for t in found))
            raise InvalidArgument(f"tool name `{name}` is ambiguous: call one of {choices}")
        raise NotFound(f"no tool named `{name}`; ListTools shows the tools this daemon offers")

    def key_for(
        self,
        tool: RegisteredTool,
        *,
        user: str,
        run_id: str,
        step_id: str,
        arguments: Mapping[str, Any],
    ) -> str | None:
        """The idempotency key for one call, or None when the tool has no key configured.

        InvalidArgument when the object argument the template needs is missing."""
        pin = tool.pin
        if pin is None or not pin.key_template:
            return None
        needs_object = "{object}" in pin.key_template
        return render_key(
            pin.key_template,
            user=user,
            run_id=run_id,
            step_id=step_id,
            server=tool.server,
            tool=tool.name,
            object_id=object_id(tool.name, pin.object_argument, arguments) if needs_object else "",
        )

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        key: str | None,
        timeout: float | None = None,
    ) -> ToolCallOutcome:
        """Call a tool with ``key`` in its configured key argument.

        Whatever the model put in that argument is dropped: keys come from the runtime.
        The timeout defaults to the server's ``timeout_seconds``."""
        tool = self.resolve(name)
        sent = dict(arguments)
        key_argument = tool.pin.key_argument if tool.pin is not None else ""
        if key_argument:
            sent.pop(key_argument, None)
            if key is not None:
                sent[key_argument] = key
        elif key is not None:
            raise InvalidArgument(
                f"{tool.qualified_name} has no key_argument configured, so it cannot be given"
                " an idempotency key; set one in its [[tool]] table"
            )
        return self._connections[tool.server].call(tool.name, sent, timeout)

    def _start_one(self, server: ServerConfig) -> None:
        try:
            self._connections[server.name].start()
            self.reload(server.name)
        except Unavailable as exc:
            log.warning("%s", exc.message)
            with self._lock:
                self._problems[server.name] = (exc.message,)

    def _tools_changed(self, server: str, reason: str) -> None:
        log.info("MCP server %s: reloading its tools (%s)", server, reason)
        try:
            self.reload(server)
        except Unavailable as exc:
            log.warning("%s", exc.message)

    def _install(self, server: ServerConfig, tools: Sequence[ToolInfo]) -> None:
        registered: dict[tuple[str, str], RegisteredTool] = {}
        with self._lock:
            for info in tools:
                digest = description_hash(info.description)
                baseline = self._baseline.setdefault((server.name, info.name), digest)
                pin = self.config.pin(server.name, info.name)
                verdict = self._classify(
                    info.name,
                    info.description,
                    info.input_schema,
                    info.annotations,
                    trusted=server.trust is Trust.TRUSTED,
                    pin=pin,
                )
                if digest != baseline:
                    log.warning(
                        "MCP server %s changed the description of %s", server.name, info.name
                    )
                registered[(server.name, info.name)] = RegisteredTool(
                    name=info.name,
                    server=server.name,
                    description=info.description,
                    input_schema=info.input_schema,
                    verdict=verdict,
                    trust=server.trust,
                    description_hash=digest,
                    changed=digest != baseline,
                    pin=pin,
                    annotations=info.annotations,
                )
            self._tools = {k: v for k, v in self._tools.items() if k[0] != server.name}
            self._tools.update(registered)
            self._problems[server.name] = tuple(self._check_pins(server, tools))

    def _check_pins(self, server: ServerConfig, tools: Sequence[ToolInfo]) -> builtins.list[str]:
        offered = {info.name: info for info in tools}
        problems = []
        for pin in self.config.pins:
            if pin.server != server.name:
                continue
            info = offered.get(pin.name)
            if info is None:
                problems.append(f"{pin.origin}: server `{server.name}` offers no tool `{pin.name}`")
                continue
            properties = info.input_schema.get("properties")
            arguments = properties if isinstance(properties, Mapping) else {}
            for label, argument in (
                ("key_argument", pin.key_argument),
                ("object_argument", pin.object_argument),
            ):
                if argument and argument not in arguments:
                    problems.append(
                        f"{pin.origin}: {label} `{argument}` is not an argument of"
                        f" {server.name}.{pin.name}"
                    )
            if pin.compensate is not None and pin.compensate.tool not in offered:
                problems.append(
                    f"{pin.origin}: compensate.tool `{pin.compensate.tool}` is not a tool of"
                    f" server `{server.name}`"
                )
            if pin.status_tool and pin.status_tool not in offered:
                problems.append(
                    f"{pin.origin}: status_tool `{pin.status_tool}` is not a tool of"
                    f" server `{server.name}`"
                )
        return problems


def uncertain_content(tool: RegisteredTool, outcome: ToolCallOutcome, key: str | None) -> str:
    """The sentence a model reads when a call was sent and its outcome is unknown."""
    what = (
        "the response timed out"
        if outcome.kind is OutcomeKind.TIMEOUT
        else "the connection to its server was lost before it answered"
    )
    text = (
        f"{tool.name} was sent but {what}. It may already have taken effect; do not retry"
        " automatically."
    )
    status_tool = tool.pin.status_tool if tool.pin is not None else ""
    if status_tool and key:
        return f"{text} First call {status_tool} with the idempotency key {key!r}, or ask the user."
    if status_tool:
        return f"{text} First call {status_tool}, or ask the user."
    return f"{text} Ask the user to check whether it happened."
