"""The client package's public face: what ``shellward`` exports, the two clients kept equal,
and the one-way dependency (the client never imports the daemon)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import shellward
from shellward import AsyncClient, Client

CLIENT = Path(__file__).resolve().parent.parent / "client"

# Every public name, spelled out: adding or dropping one is a decision, not an accident.
PUBLIC = {
    "ArgumentFact", "ArgumentKind", "AsyncClient", "AuthenticationError", "CallAccepted",
    "CallStatus", "CapturedOutput", "Client", "Code", "CommandPart", "CommandResult",
    "DaemonStatus", "DaemonUnavailable", "DeadlineExceeded", "EffectKind", "FileEffect",
    "Idempotency", "InvalidRequest", "LedgerEntry", "NetworkEffect", "NotFound", "OutputChunk",
    "PermissionDenied", "ProtocolError", "RecoveryItem", "ReloadOutcome", "ReplayPolicy",
    "RuleFileCheck", "RuleLayer", "ShellwardError", "Stream", "StreamEvent", "ToolInfo",
    "ToolServerStatus", "Transition", "Verdict", "WorkspaceStatus", "ContainmentControl",
}  # fmt: skip


def test_all_lists_every_public_name_and_nothing_private() -> None:
    assert set(shellward.__all__) == PUBLIC
    assert len(shellward.__all__) == len(PUBLIC), "a name is listed twice"
    assert shellward.__all__ == sorted(shellward.__all__)
    for name in shellward.__all__:
        assert not name.startswith("_")
        assert not inspect.ismodule(getattr(shellward, name))  # importable from the package
    exported = {
        name for name, value in vars(shellward).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }  # fmt: skip
    assert exported - {"annotations"} == PUBLIC, "a public name is missing from __all__"


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_the_sync_and_async_clients_offer_the_same_calls_with_the_same_options() -> None:
    sync, aio = _public_methods(Client), _public_methods(AsyncClient)
    assert sorted(sync) == sorted(aio)
    for name, signature in sync.items():
        # Parameters, kinds and defaults alike; only the return (awaitable or not) differs.
        assert list(signature.parameters.values()) == list(aio[name].parameters.values()), name
    assert inspect.signature(Client.__init__) == inspect.signature(AsyncClient.__init__)


def test_no_client_module_imports_the_daemon() -> None:
    offenders = []
    for path in CLIENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            offenders += [f"{path.relative_to(CLIENT)}: {n}" for n in names if
                          n.split(".")[0] == "shellwardd"]  # fmt: skip
    assert offenders == []


def test_the_client_and_cli_import_without_the_daemon() -> None:
    """Every module under client/ imports with only client/ on the path."""
    probe = (
        "import importlib, pkgutil, sys, shellward\n"
        "for m in pkgutil.walk_packages(shellward.__path__, 'shellward.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "assert 'shellward.cli.rules' in sys.modules\n"
        "print(sorted(n for n in sys.modules if n.startswith('shellwardd')))\n"
    )
    deps = [p for p in sys.path if p.endswith("site-packages")]
    done = subprocess.run(
        [sys.executable, "-I", "-c",
         f"import sys; sys.path[:0] = {[str(CLIENT), *deps]!r}\n" + probe],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
