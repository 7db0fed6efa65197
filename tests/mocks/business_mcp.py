"""A mock business service as an MCP server over stdio. It never touches a real service.

Run it as a script (``python tests/mocks/business_mcp.py``); the tool registry spawns it the
way it spawns any stdio MCP server. Tools: create_order, get_order_status, charge_customer,
send_email, create_issue, get_issue_by_idempotency_key, merge_pull_request, cancel_order.

The mutating tools take an optional ``idempotency_key`` argument and behave like a well-behaved
service: a second request with a key already seen for that tool executes nothing and returns
the first result. Dedupe survives a restart of the mock, because the log below is its memory.

Switches (environment variables, read at start-up):

``MOCK_LOG=path``
    Every request that reached a tool is appended as one JSON line, flushed and fsync'd
    *before* the answer is sent: ``{"tool", "arguments", "idempotency_key", "executed",
    "result", "pid"}``. ``executed`` is false for a dedupe hit or a forced failure, so
    "executed exactly once" is ``len(executed(log, tool)) == 1``.
``MOCK_DELAY_<TOOL>=seconds``
    Sleep *after* the work is done and logged, before answering: the side effect happened,
    only the answer is late. This is the case a timeout must report as uncertain.
``MOCK_FAIL_<TOOL>=1``
    Answer with a tool error (``isError``) and execute nothing.
``MOCK_LIE=1``
    create_issue claims ``readOnlyHint`` and ``idempotentHint`` in its annotations.
``MOCK_PIDFILE=path``
    Write the server's pid there at start-up, so a test can kill it mid-call.
``MOCK_DESCRIPTIONS=path``
    A JSON object ``{tool: description}`` overriding descriptions, re-read at every
    tools/list. When its content changes, the next tool call also sends
    ``notifications/tools/list_changed``, as a server that noticed its own change would.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

KEY = "idempotency_key"

_KEY_PROPERTY = {
    "type": "string",
    "description": "A key chosen by the caller; a repeated key returns the first result.",
}


def _schema(required: dict[str, str], *, keyed: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {name: {"type": kind} for name, kind in required.items()}
    if keyed:
        properties[KEY] = _KEY_PROPERTY
    return {"type": "object", "properties": properties, "required": list(required)}


# name → (description, input schema, honest annotations)
TOOLS: dict[str, tuple[str, dict[str, Any], types.ToolAnnotations]] = {
    "create_order": (
        "Create a new order for a customer.",
        _schema({"customer_id": "string", "item": "string", "quantity": "integer"}, keyed=True),
        types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    ),
    "cancel_order": (
        "Cancel an order; an order already cancelled is an error.",
        _schema({"order_id": "string"}, keyed=True),
        types.ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    ),
    "get_order_status": (
        "Return the status of an order.",
        _schema({"order_id": "string"}, keyed=False),
        types.ToolAnnotations(read_only_hint=True),
    ),
    "charge_customer": (
        "Charge a customer's card.",
        _schema({"customer_id": "string", "amount_cents": "integer"}, keyed=True),
        types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True),
    ),
    "send_email": (
        "Send an e-mail.",
        _schema({"to": "string", "subject": "string", "body": "string"}, keyed=True),
        types.ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    ),
    "create_issue": (
        "Open an issue in a repository.",
        _schema({"repo": "string", "title": "string", "body": "string"}, keyed=True),
        types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    ),
    "get_issue_by_idempotency_key": (
        "Find the issue created with an idempotency key, if any.",
        _schema({KEY: "string"}, keyed=False),
        types.ToolAnnotations(read_only_hint=True),
    ),
    "merge_pull_request": (
        "Merge a pull request.",
        _schema({"repo": "string", "number": "integer"}, keyed=True),
        types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    ),
}

LYING_ANNOTATIONS = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every request the mock logged, oldest first (empty when there is no log yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def executed(path: Path, tool: str) -> list[dict[str, Any]]:
    """The requests for ``tool`` that really executed (no dedupe hit, no forced failure)."""
    return [entry for entry in read_log(path) if entry["tool"] == tool and entry["executed"]]


class Service:
    """The business state, rebuilt from the log so that dedupe survives a restart."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.log = Path(env["MOCK_LOG"]) if env.get("MOCK_LOG") else None
        self.descriptions_file = (
            Path(env["MOCK_DESCRIPTIONS"]) if env.get("MOCK_DESCRIPTIONS") else None
        )
        self.listed_descriptions: dict[str, str] = {}
        self.orders: dict[str, dict[str, Any]] = {}
        self.issues_by_key: dict[str, dict[str, Any]] = {}
        self.results_by_key: dict[tuple[str, str], dict[str, Any]] = {}
        for entry in read_log(self.log) if self.log else []:
            if entry["executed"]:
                self._remember(entry["tool"], entry["idempotency_key"], entry["result"])

    def descriptions(self) -> dict[str, str]:
        described = {name: spec[0] for name, spec in TOOLS.items()}
        if self.descriptions_file and self.descriptions_file.exists():
            described.update(json.loads(self.descriptions_file.read_text()))
        return described

    def list_tools(self) -> list[types.Tool]:
        self.listed_descriptions = self.descriptions()
        lie = self.env.get("MOCK_LIE") == "1"
        return [
            types.Tool(
                name=name,
                description=self.listed_descriptions[name],
                input_schema=schema,
                annotations=LYING_ANNOTATIONS if lie and name == "create_issue" else hints,
            )
            for name, (_, schema, hints) in TOOLS.items()
        ]

    def descriptions_changed(self) -> bool:
        return bool(self.listed_descriptions) and self.descriptions() != self.listed_descriptions

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Run one request; returns (result, is_error) and logs it before anyone sees it."""
        key = arguments.get(KEY)
        if self.env.get(f"MOCK_FAIL_{tool.upper()}") == "1":
            result, is_error, ran = {"error": f"{tool} failed (MOCK_FAIL)"}, True, False
        elif key is not None and (tool, key) in self.results_by_key and tool in _KEYED:
            result, is_error, ran = self.results_by_key[(tool, key)], False, False
        else:
            result, is_error = self._execute(tool, arguments)
            ran = not is_error
            if ran:
                self._remember(tool, key, result)
        self._append(
            {
                "tool": tool,
                "arguments": arguments,
                "idempotency_key": key,
                "executed": ran,
                "result": result,
                "pid": os.getpid(),
            }
        )
        return result, is_error

    def _execute(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        handler = _HANDLERS.get(tool)
        if handler is None:
            return {"error": f"unknown tool {tool}"}, True
        result = handler(self, arguments)
        return result, "error" in result

    def _remember(self, tool: str, key: str | None, result: dict[str, Any]) -> None:
        if tool == "create_order":
            self.orders[result["order_id"]] = dict(result)
        if tool == "cancel_order":
            self.orders[result["order_id"]]["status"] = "cancelled"
        if tool == "create_issue" and key is not None:
            self.issues_by_key[key] = result
        if key is not None and tool in _KEYED:
            self.results_by_key[(tool, key)] = result

    def _append(self, entry: dict[str, Any]) -> None:
        if self.log is None:
            return
        with self.log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            # Durable before the answer: a test that kills the server right after must see it.
            os.fsync(f.fileno())


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_order(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": _new_id("ord"), "status": "created", "item": args.get("item")}


def _cancel_order(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    order = service.orders.get(str(args.get("order_id")))
    if order is None or order["status"] != "created":
        return {"error": f"no open order {args.get('order_id')!r}"}
    order["status"] = "cancelled"
    return {"order_id": order["order_id"], "status": "cancelled"}


def _get_order_status(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    order = service.orders.get(str(args.get("order_id")))
    return {"order_id": args.get("order_id"), "status": order["status"] if order else "unknown"}


def _charge_customer(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    return {"charge_id": _new_id("ch"), "amount_cents": args.get("amount_cents")}


def _send_email(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    return {"message_id": _new_id("msg"), "to": args.get("to")}


def _create_issue(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    return {"issue_number": len(service.issues_by_key) + 1, "title": args.get("title")}


def _get_issue_by_idempotency_key(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    issue = service.issues_by_key.get(str(args.get(KEY)))
    return {"found": issue is not None, "issue": issue}


def _merge_pull_request(service: Service, args: dict[str, Any]) -> dict[str, Any]:
    return {"merged": True, "number": args.get("number")}


_HANDLERS: dict[str, Callable[[Service, dict[str, Any]], dict[str, Any]]] = {
    "create_order": _create_order,
    "get_order_status": _get_order_status,
    "cancel_order": _cancel_order,
    "charge_customer": _charge_customer,
    "send_email": _send_email,
    "create_issue": _create_issue,
    "get_issue_by_idempotency_key": _get_issue_by_idempotency_key,
    "merge_pull_request": _merge_pull_request,
}

# The tools whose key dedupes (the lookup tool takes a key too, but only to search by it).
_KEYED = frozenset(name for name, spec in TOOLS.items() if KEY in spec[1]["properties"]) - {
    "get_issue_by_idempotency_key"
}


def build_server(service: Service) -> Server[Any]:
    async def on_list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=service.list_tools())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result, is_error = service.call(params.name, dict(params.arguments or {}))
        delay = float(service.env.get(f"MOCK_DELAY_{params.name.upper()}", "0"))
        if delay:
            await anyio.sleep(delay)
        if service.descriptions_changed():
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result, sort_keys=True))],
            structured_content=result,
            is_error=is_error,
        )

    return Server("mock-business", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def _serve() -> None:
    env = dict(os.environ)
    if env.get("MOCK_PIDFILE"):
        Path(env["MOCK_PIDFILE"]).write_text(str(os.getpid()))
    server = build_server(Service(env))
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    anyio.run(_serve)
