"""The built-in tools beside run_command: read_file, list_files, write_file, apply_patch.

Each tool validates its arguments and prepares its work *before* the call is recorded as
started (a path outside the workspace, a stale ``base_hash``: refused, nothing ran), then
runs. A write is planned (hash before and after, new content) at preparation and applied
atomically when run, after the content it replaces is kept in the blob store (so that
``shellward undo`` can put it back); its replay is checked against those hashes through
the write detector's file effects, like any command's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shellward.types import Idempotency, ReplayPolicy, Verdict
from shellwardd import filetools
from shellwardd.config import Config
from shellwardd.errors import InvalidArgument
from shellwardd.staging.blobs import BlobStore


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool returns: raw bytes (a file's content), structured output, a sentence."""

    summary: str
    output: Mapping[str, Any] = field(default_factory=dict)
    data: bytes = b""


# A prepared call: everything checked, the work not done yet.
Prepared = Callable[[], ToolAnswer]


@dataclass(frozen=True)
class BuiltinTool:
    name: str
    description: str
    writes: bool
    input_schema: Mapping[str, Any]
    # (workspace, arguments, config, the store that keeps what a write replaces)
    prepare: Callable[[Path, Mapping[str, Any], Config, BlobStore], Prepared]

    @property
    def verdict(self) -> Verdict:
        if self.writes:
            return Verdict(
                Idempotency.CONDITIONAL,
                ReplayPolicy.ASK,
                f"{self.name} changes a file: a replay first checks the file's hash",
            )
        return Verdict(
            Idempotency.IDEMPOTENT,
            ReplayPolicy.AUTO,
            f"{self.name} only reads: idempotent, safe to replay automatically",
        )

    def summary(self, arguments: Mapping[str, Any]) -> str:
        """A one-line description for the ledger's command column."""
        path = arguments.get("path", ".")
        return f"{self.name} {path}" if isinstance(path, str) else self.name


def _take(
    arguments: Mapping[str, Any], tool: str, spec: Mapping[str, tuple[type, bool]]
) -> dict[str, Any]:
    """Check ``arguments`` against ``spec`` (name → (type, required)); return them."""
    unknown = sorted(set(arguments) - set(spec))
    if unknown:
        raise InvalidArgument(
            f"{tool} does not take {', '.join(unknown)}; it takes {', '.join(sorted(spec))}"
        )
    values = {}
    for name, (kind, required) in spec.items():
        if name not in arguments:
            if required:
                raise InvalidArgument(f"{tool} needs the argument {name!r} ({kind.__name__})")
            continue
        value = arguments[name]
        if kind is int and isinstance(value, float) and value.is_integer():
            value = int(value)  # an older client's Struct sends every number as a float
        if value is not None and (
            not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)
        ):
            raise InvalidArgument(
                f"{tool}: {name!r} must be {kind.__name__}, got {type(value).__name__}"
            )
        values[name] = value
    return values


def _prepare_read(
    workspace: Path, arguments: Mapping[str, Any], config: Config, blobs: BlobStore
) -> Prepared:
    args = _take(arguments, "read_file", {"path": (str, True), "max_bytes": (int, False)})
    ceiling = config.read_max_bytes
    max_bytes = args.get("max_bytes") or min(1 << 20, ceiling)
    if max_bytes > ceiling:
        raise InvalidArgument(
            f"max_bytes is {max_bytes}, more than the {ceiling} bytes read_file may read at"
            " once on this daemon (its --read-max-bytes): ask for at most that. The answer"
            " gives the whole file's size and hash either way; run_command (head -c, sed -n)"
            " reads other parts of a larger file."
        )
    filetools.check_path(workspace, args["path"])  # refuse a bad path before the start

    def run() -> ToolAnswer:
        read = filetools.read_file(workspace, args["path"], max_bytes=max_bytes)
        more = f" (first {len(read.content)} of {read.size} bytes)" if read.truncated else ""
        return ToolAnswer(
            summary=f"Read {read.path}{more}; its hash is {read.hash}: pass it as base_hash "
            "to write_file or apply_patch.",
            output={"path": read.path, "hash": read.hash, "size": read.size,
                    "truncated": read.truncated},
            data=read.content,
        )  # fmt: skip

    return run


def _prepare_list(
    workspace: Path, arguments: Mapping[str, Any], config: Config, blobs: BlobStore
) -> Prepared:
    spec = {"path": (str, False), "pattern": (str, False), "recursive": (bool, False),
            "limit": (int, False)}  # fmt: skip
    args = _take(arguments, "list_files", spec)
    filetools.check_path(workspace, args.get("path") or ".")

    def run() -> ToolAnswer:
        listing = filetools.list_files(
            workspace,
            args.get("path") or ".",
            pattern=args.get("pattern") or "*",
            recursive=bool(args.get("recursive")),
            limit=args.get("limit") or 1000,
        )
        more = " (truncated: raise limit or narrow the pattern)" if listing.truncated else ""
        return ToolAnswer(
            summary=f"Listed {len(listing.entries)} entries of {listing.path}{more}.",
            output={
                "path": listing.path,
                "truncated": listing.truncated,
                "entries": [
                    {"path": e.path, "kind": e.kind.value, "size": e.size} for e in listing.entries
                ],
            },
        )

    return run


def _writer(
    workspace: Path, plan: filetools.FileWritePlan, verb: str, blobs: BlobStore
) -> Prepared:
    def run() -> ToolAnswer:
        # What was really replaced: the file may have changed since the plan (no base_hash).
        before = filetools.apply_write(workspace, plan, blobs)
        return ToolAnswer(
            summary=f"{verb} {plan.path}; its hash is now {plan.after_hash}.",
            output={"path": plan.path, "before_hash": before,
                    "after_hash": plan.after_hash},
        )  # fmt: skip

    return run


def _prepare_write(
    workspace: Path, arguments: Mapping[str, Any], config: Config, blobs: BlobStore
) -> Prepared:
    spec = {"path": (str, True), "content": (str, True), "base_hash": (str, False)}
    args = _take(arguments, "write_file", spec)
    plan = filetools.plan_write(
        workspace, args["path"], args["content"].encode("utf-8"), args.get("base_hash")
    )
    return _writer(workspace, plan, "Wrote", blobs)


def _prepare_patch(
    workspace: Path, arguments: Mapping[str, Any], config: Config, blobs: BlobStore
) -> Prepared:
    spec = {"path": (str, True), "patch": (str, True), "base_hash": (str, False)}
    args = _take(arguments, "apply_patch", spec)
    plan = filetools.plan_patch(workspace, args["path"], args["patch"], args.get("base_hash"))
    return _writer(workspace, plan, "Patched", blobs)


_PATH = {"type": "string", "description": "relative to the workspace (or absolute inside it)"}
_BASE = {
    "type": ["string", "null"],
    "description": 'the hash read_file returned; "" if the file must not exist; '
    "omit to write whatever is there",
}

BUILTIN_TOOLS: Mapping[str, BuiltinTool] = {
    tool.name: tool
    for tool in (
        BuiltinTool(
            "read_file", "Read a file of the workspace (and its hash, for base_hash).", False,
            {"type": "object", "required": ["path"],
             "properties": {"path": _PATH, "max_bytes": {"type": "integer"}}},
            _prepare_read,
        ),
        BuiltinTool(
            "list_files", "List a directory of the workspace.", False,
            {"type": "object",
             "properties": {"path": _PATH, "pattern": {"type": "string"},
                            "recursive": {"type": "boolean"}, "limit": {"type": "integer"}}},
            _prepare_list,
        ),
        BuiltinTool(
            "write_file", "Write a whole file atomically, if it is still at base_hash.", True,
            {"type": "object", "required": ["path", "content"],
             "properties": {"path": _PATH, "content": {"type": "string"}, "base_hash": _BASE}},
            _prepare_write,
        ),
        BuiltinTool(
            "apply_patch", "Apply a unified diff to one file, if it is still at base_hash.", True,
            {"type": "object", "required": ["path", "patch"],
             "properties": {"path": _PATH, "patch": {"type": "string"}, "base_hash": _BASE}},
            _prepare_patch,
        ),
    )
}  # fmt: skip
