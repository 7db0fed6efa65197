"""`shellward tools` and `shellward call`: the tool table and its JSON, file tools through the
ledger (bytes, replays, conflicts, refusals), and a business tool of the mock MCP server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import Daemon, start_daemon, wait_for

Shellward = Callable[..., subprocess.CompletedProcess[bytes]]
MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"
BUILTINS = {
    "read_file": "idempotent/auto",
    "list_files": "idempotent/auto",
    "write_file": "conditional/ask",
    "apply_patch": "conditional/ask",
}


@pytest.fixture(scope="module")
def cli_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """This module's daemon (`shellward_process` calls the CLI against it): its tools config
    declares the mock business server as `biz`, which reads descriptions that override its
    own from `descriptions.json` beside the workspace."""
    root = tmp_path_factory.mktemp("tools")
    workspace = root / "workspace"
    workspace.mkdir()
    config = root / "tools.toml"
    config.write_text(
        '[[server]]\nname = "biz"\n'
        f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
        f"env = {{ MOCK_LOG = {json.dumps(str(root / 'mock-log.jsonl'))}, "
        f"MOCK_DESCRIPTIONS = {json.dumps(str(_descriptions(workspace)))} }}\n"
        '[[tool]]\nserver = "biz"\nname = "create_order"\n'
        'compensate = { tool = "cancel_order", arguments = { order_id = "{output.order_id}" } }\n'
    )
    handle = start_daemon(
        root / "run" / "shellward.sock", root / "state", workspace, "--tools-config", str(config)
    )
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def _descriptions(workspace: Path) -> Path:
    return workspace.parent / "descriptions.json"


def _rows(table: bytes) -> dict[str, list[str]]:
    """The tab-separated table (stdout is not a terminal) by tool name."""
    header, *lines = table.decode().splitlines()
    assert header.split("\t") == [
        "TOOL", "SERVER", "TRUST", "VERDICT", "SOURCE", "APPROVAL", "CHANGED", "REASON"
    ]  # fmt: skip
    return {line.split("\t")[0]: line.split("\t") for line in lines}


def test_tools_table_lists_builtins_and_the_mcp_servers_tools(shellward_process: Shellward) -> None:
    done = shellward_process("tools")
    assert done.returncode == 0, done.stderr
    rows = _rows(done.stdout)
    for name, verdict in BUILTINS.items():
        assert rows[name][1:5] == ["builtin", "builtin", verdict, "builtin"]
    create = rows["biz.create_order"]
    assert create[1:5] == ["biz", "untrusted", "non_idempotent/never", "name"]
    assert create[6] == "-" and "create" in create[7]
    assert rows["biz.get_order_status"][3] == "idempotent/auto"


def test_tools_json_has_every_field_and_the_parsed_schema(shellward_process: Shellward) -> None:
    done = shellward_process("tools", "--json")
    assert done.returncode == 0, done.stderr
    tools = {tool["name"]: tool for tool in json.loads(done.stdout)}
    assert {tools[name]["replay_policy"] for name in BUILTINS} == {"auto", "ask"}
    assert tools["write_file"]["idempotency"] == "conditional"
    create = tools["biz.create_order"]
    assert create["server"] == "biz" and create["trust"] == "untrusted"
    assert (create["idempotency"], create["replay_policy"]) == ("non_idempotent", "never")
    assert create["needs_approval"] is False and create["changed"] is False
    assert create["source"] == "name" and create["reason"] and create["description"]
    assert "customer_id" in create["input_schema"]["properties"]
    assert "input_schema_json" not in create


def test_call_read_file_prints_the_bytes(shellward_process: Shellward, cli_daemon: Daemon) -> None:
    (cli_daemon.workspace / "x.bin").write_bytes(b"\xff\x00line\n")
    done = shellward_process("call", "read_file", "--arg", "path=x.bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"\xff\x00line\n"
    assert b"succeeded" in done.stderr and b"sha256:" in done.stderr
    short = shellward_process("call", "read_file", "--arg", "path=x.bin", "--arg", "max_bytes=2")
    assert short.returncode == 0, short.stderr
    assert short.stdout == b"\xff\x00"
    # From a directory inside the workspace, paths stay relative to the workspace root.
    (cli_daemon.workspace / "sub").mkdir()
    (cli_daemon.workspace / "sub" / "a.txt").write_text("in sub")
    inside = shellward_process(
        "call", "read_file", "--arg", "path=sub/a.txt", cwd=cli_daemon.workspace / "sub"
    )
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout == b"in sub"


def test_write_file_writes_and_the_same_step_is_replayed(
    shellward_process: Shellward, cli_daemon: Daemon
) -> None:
    args = ("call", "write_file", "--args", '{"path": "y.txt", "content": "hi"}')
    step = ("--run-id", "tools-r1", "--step-id", "s1")
    first = shellward_process(*args, *step)
    assert first.returncode == 0, first.stderr
    assert (cli_daemon.workspace / "y.txt").read_text() == "hi"
    assert json.loads(first.stdout)["path"] == "y.txt"
    assert b"nothing ran" not in first.stderr
    (cli_daemon.workspace / "y.txt").write_text("changed by hand")
    again = shellward_process(*args, *step)
    assert again.returncode == 0, again.stderr
    assert b"nothing ran" in again.stderr and b"replayed" in again.stderr
    assert (cli_daemon.workspace / "y.txt").read_text() == "changed by hand"


def test_write_file_with_a_wrong_base_hash_is_a_conflict(
    shellward_process: Shellward, cli_daemon: Daemon
) -> None:
    target = cli_daemon.workspace / "z.txt"
    target.write_text("original")
    wrong = "sha256:" + "0" * 64
    done = shellward_process(
        "call", "write_file", "--arg", "path=z.txt", "--arg", "content=new",
        "--arg", f"base_hash={wrong}", "--json",
    )  # fmt: skip
    assert done.returncode == 125, done.stderr
    result = json.loads(done.stdout)
    assert result["code"] == "CONFLICT" and result["ok"] is False
    assert set(result) >= {"output", "idempotency_key", "metadata"}
    assert target.read_text() == "original"


def test_a_path_out_of_the_workspace_is_permission_denied(shellward_process: Shellward) -> None:
    done = shellward_process("call", "read_file", "--arg", "path=../x")
    assert done.returncode == 125
    assert done.stdout == b""
    assert b"PERMISSION_DENIED" in done.stderr and b"workspace" in done.stderr


def test_business_tool_answers_with_json(shellward_process: Shellward) -> None:
    done = shellward_process("call", "biz.get_order_status", "--arg", "order_id=o1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"order_id": "o1", "status": "unknown"}
    assert b"idempotent/auto" in done.stderr


def test_compensate_cancels_the_order_once(shellward_process: Shellward) -> None:
    created = shellward_process(
        "call", "biz.create_order", "--json", "--arg", "customer_id=c", "--arg", "item=tea",
        "--arg", "quantity=1",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    answer = json.loads(created.stdout)
    first = shellward_process("compensate", answer["metadata"]["call_id"][:12])
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["status"] == "cancelled"
    again = shellward_process("compensate", "--json", answer["metadata"]["call_id"])
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["metadata"]["replayed"] is True
    refused = shellward_process("compensate", "nope")
    assert refused.returncode == 1 and b"no call 'nope'" in refused.stderr


def test_unknown_tool_is_not_found(shellward_process: Shellward) -> None:
    done = shellward_process("call", "no_such_tool")
    assert done.returncode == 1
    assert b"NOT_FOUND" in done.stderr and b"no tool named" in done.stderr


def test_bad_arguments_are_usage_errors(shellward_process: Shellward) -> None:
    not_object = shellward_process("call", "read_file", "--args", "[1]")
    assert not_object.returncode == 2 and b"--args must be a JSON object" in not_object.stderr
    no_value = shellward_process("call", "read_file", "--arg", "no-equals-sign")
    assert no_value.returncode == 2 and b"expected KEY=VALUE" in no_value.stderr
    missing = shellward_process("call", "write_file", "--arg", "path=w.txt")
    assert missing.returncode == 2 and b"INVALID_ARGUMENT" in missing.stderr


def test_a_tool_whose_description_changed_is_flagged(
    shellward_process: Shellward, cli_daemon: Daemon
) -> None:
    assert _rows(shellward_process("tools").stdout)["biz.send_email"][6] == "-"
    _descriptions(cli_daemon.workspace).write_text(
        json.dumps({"send_email": "Sends an e-mail to every customer."})
    )
    # The server notices at its next call and tells the daemon its tool list changed.
    assert shellward_process("call", "biz.get_order_status", "--arg", "order_id=o2").returncode == 0
    wait_for(
        lambda: _rows(shellward_process("tools").stdout)["biz.send_email"][6] == "CHANGED",
        timeout=10,
    )


def test_status_shows_the_tool_servers(shellward_process: Shellward) -> None:
    done = shellward_process("status")
    assert done.returncode == 0, done.stderr
    assert "tool server: biz (running, started 1 time(s))" in done.stdout.decode()
