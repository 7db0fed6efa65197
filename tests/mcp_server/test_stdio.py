"""``shellward mcp`` over stdio, through the MCP SDK's own client, against a real daemon."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp_types as types
import pytest
from mcp import ClientSession

from shellward.types import CallStatus
from tests.helpers import Daemon, wait_for
from tests.mcp_server.conftest import clean_env, mcp_command, mcp_session, mock_log
from tests.mocks.business_mcp import read_log

BUILTIN_FILE_TOOLS = {"read_file", "list_files", "write_file", "apply_patch"}


def _run(coro: Any) -> Any:
    return anyio.run(coro)


def _data(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def _step() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


async def _tools(session: ClientSession) -> dict[str, types.Tool]:
    return {tool.name: tool for tool in (await session.list_tools()).tools}


def test_tools_listed_with_truthful_hints_schemas_and_no_approve(mcp_daemon: Daemon) -> None:
    async def main() -> dict[str, types.Tool]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            return await _tools(session)

    tools = _run(main)
    assert {"run_command", "classify", "recover"} | BUILTIN_FILE_TOOLS <= set(tools)
    # Approving is the human's: no tool a model could call approves, denies or reruns.
    assert not [name for name in tools if "approve" in name or "deny" in name]
    hints = {name: tool.annotations for name, tool in tools.items()}
    run = hints["run_command"]
    assert run is not None and run.read_only_hint is False and run.destructive_hint is True
    assert run.idempotent_hint is False and run.open_world_hint is True
    for name in ("read_file", "list_files", "classify", "recover"):
        hint = hints[name]
        assert hint is not None and hint.read_only_hint is True, name
    for name in ("write_file", "apply_patch"):
        hint = hints[name]
        assert hint is not None and hint.read_only_hint is False and hint.destructive_hint, name
    for name, tool in tools.items():
        assert tool.output_schema is not None, name
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        if name not in ("classify", "recover"):
            assert "step_id" in tool.input_schema["properties"], name
            assert "NEEDS_APPROVAL" in (tool.description or ""), name


def test_run_command_result_matches_its_schema_and_progress_carries_output(
    mcp_daemon: Daemon,
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def main() -> tuple[types.CallToolResult, types.Tool]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            tool = (await _tools(session))["run_command"]
            result = await session.call_tool(
                "run_command",
                {"command": "echo made > made-by-mcp.txt && echo visible-line", "step_id": _step()},
                progress_callback=on_progress,
            )
            return result, tool

    result, tool = _run(main)
    data = _data(result)
    assert tool.output_schema is not None
    jsonschema.validate(data, tool.output_schema)
    assert data["ok"] is True and data["code"] == "OK" and data["exit_code"] == 0
    assert {"path": "made-by-mcp.txt", "kind": "created"} in data["effects"]
    assert data["verdict"]["idempotency"] == "conditional" and data["call_id"]
    assert (mcp_daemon.workspace / "made-by-mcp.txt").read_text() == "made\n"
    assert "visible-line" in _text(result)
    assert any(message and "visible-line" in message for _, message in progress), progress


def test_retried_step_is_answered_from_the_ledger_not_run_again(mcp_daemon: Daemon) -> None:
    step = _step()
    command = "echo once >> appended.txt"

    async def main() -> list[types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            first = await session.call_tool("run_command", {"command": command, "step_id": step})
            again = await session.call_tool("run_command", {"command": command, "step_id": step})
            other = await session.call_tool(
                "run_command", {"command": "echo twice >> appended.txt", "step_id": step}
            )
            return [first, again, other]

    first, again, other = _run(main)
    assert _data(first)["replayed"] is False and _data(again)["replayed"] is True
    assert _data(again)["call_id"] == _data(first)["call_id"]
    assert (mcp_daemon.workspace / "appended.txt").read_text() == "once\n"
    # The same step with another input is refused, never silently replayed or run.
    assert _data(other)["code"] == "IDEMPOTENCY_KEY_MISMATCH" and other.is_error


def test_without_a_step_every_call_is_new(mcp_daemon: Daemon) -> None:
    async def main() -> None:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            for _ in range(2):
                await session.call_tool("run_command", {"command": "echo x >> unnamed.txt"})

    _run(main)
    assert (mcp_daemon.workspace / "unnamed.txt").read_text() == "x\nx\n"


def test_step_from_the_hosts_request_metadata(mcp_daemon: Daemon) -> None:
    meta: types.RequestParamsMeta = {"shellward/step_id": _step()}  # type: ignore[typeddict-unknown-key]

    async def main() -> list[types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            return [
                await session.call_tool("run_command", {"command": "echo m >> meta.txt"}, meta=meta)
                for _ in range(2)
            ]

    first, again = _run(main)
    assert _data(again)["replayed"] is True and _data(again)["call_id"] == _data(first)["call_id"]
    assert (mcp_daemon.workspace / "meta.txt").read_text() == "m\n"


def test_run_is_the_session_or_run_id_and_a_restarted_host_gets_the_ledgers_answer(
    mcp_daemon: Daemon,
) -> None:
    run_id, step = f"r-{uuid.uuid4().hex[:8]}", _step()
    command = "echo r >> restarted.txt"

    async def one_session(*args: str) -> types.CallToolResult:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace, *args) as session:
            return await session.call_tool("run_command", {"command": command, "step_id": step})

    first = _run(lambda: one_session("--run-id", run_id))
    again = _run(lambda: one_session("--run-id", run_id))
    assert _data(again)["replayed"] is True
    assert (mcp_daemon.workspace / "restarted.txt").read_text() == "r\n"
    with mcp_daemon.client() as client:
        entry = client.get_call(_data(first)["call_id"])
        assert (entry.run_id, entry.step_id) == (run_id, step)
        # Without --run-id, each session is its own run: the same step runs in a new one.
        fresh = _run(lambda: one_session())
        other = client.get_call(_data(fresh)["call_id"])
    assert other.run_id.startswith("mcp-") and other.run_id != run_id
    assert _data(fresh)["replayed"] is False


def test_a_command_needing_approval_answers_needs_approval_and_does_not_run(
    mcp_daemon: Daemon,
) -> None:
    step = _step()

    async def main() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            asked = await session.call_tool(
                "run_command", {"command": "sudo touch approved.txt", "step_id": step}
            )
            recovered = await session.call_tool("recover", {})
            return asked, recovered

    asked, recovered = _run(main)
    data = _data(asked)
    assert asked.is_error and data["code"] == "NEEDS_APPROVAL"
    assert f"shellward approve {data['call_id']}" in _text(asked)
    assert not (mcp_daemon.workspace / "approved.txt").exists()
    with mcp_daemon.client() as client:
        assert client.get_call(data["call_id"]).status is CallStatus.PENDING_APPROVAL
    steps = _data(recovered)["steps"]
    assert [s["step_id"] for s in steps if s["call_id"] == data["call_id"]] == [step]


def test_file_tools_and_classify_go_through_the_daemon(mcp_daemon: Daemon) -> None:
    async def main() -> list[types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            wrote = await session.call_tool(
                "write_file", {"path": "tool.txt", "content": "via mcp\n", "step_id": _step()}
            )
            read = await session.call_tool("read_file", {"path": "tool.txt"})
            escape = await session.call_tool("read_file", {"path": "../../etc/passwd"})
            verdict = await session.call_tool("classify", {"command": "rm -rf build"})
            return [wrote, read, escape, verdict]

    wrote, read, escape, verdict = _run(main)
    assert _data(wrote)["ok"] and (mcp_daemon.workspace / "tool.txt").read_text() == "via mcp\n"
    assert _data(read)["output"]["hash"].startswith("sha256:") and "via mcp" in _text(read)
    assert escape.is_error and _data(escape)["ok"] is False
    assert "root:" not in _text(escape)
    assert _data(verdict)["idempotency"] == "non_idempotent"
    assert _data(verdict)["replay_policy"] == "never"


def test_bad_arguments_are_an_answer_not_a_crash(mcp_daemon: Daemon) -> None:
    async def main() -> list[types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            return [
                await session.call_tool("run_command", {"command": ""}),
                await session.call_tool("run_command", {"command": "ls", "step_id": 7}),
                await session.call_tool("run_command", {"command": "ls", "timeout": -1}),
                await session.call_tool("no_such_tool", {}),
                await session.call_tool("run_command", {"command": "echo still-alive"}),
            ]

    *bad, alive = _run(main)
    for result in bad:
        assert result.is_error and _data(result)["ok"] is False, result
    assert [_data(r)["code"] for r in bad[:3]] == ["INVALID_ARGUMENT"] * 3
    assert _data(alive)["ok"] and "still-alive" in _text(alive)


def test_a_cancelled_call_is_killed_and_a_retry_is_not_a_second_run(
    mcp_daemon: Daemon,
) -> None:
    step = _step()
    args = {"command": "sleep 3; echo done >> slow.txt", "step_id": step}

    async def main() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            with anyio.move_on_after(1):  # the SDK sends notifications/cancelled
                await session.call_tool("run_command", args)
            retry = await session.call_tool("run_command", args)
            after = await session.call_tool("run_command", {"command": "echo after-cancel"})
            return retry, after

    retry, after = _run(main)
    # The host's cancel closes the stream and the daemon cancels the call: the command is
    # killed, and the step's retry is answered from the ledger, never run a second time.
    assert retry.is_error and _data(retry)["code"] in ("IN_PROGRESS", "SIDE_EFFECT_UNCERTAIN")
    assert _data(after)["ok"] and "after-cancel" in _text(after)
    with mcp_daemon.client() as client:
        wait_for(lambda: client.get_call(_data(retry)["call_id"]).status.is_final)
        entry = client.get_call(_data(retry)["call_id"])
    assert entry.status is CallStatus.UNCERTAIN and entry.step_id == step
    time.sleep(3)  # past the command's own sleep: had it run on, the file would be there
    assert not (mcp_daemon.workspace / "slow.txt").exists()


def test_an_approved_call_is_answered_to_the_retried_step(mcp_daemon: Daemon) -> None:
    step = _step()
    args = {"command": "alias ll=ls", "step_id": step}

    async def main() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            asked = await session.call_tool("run_command", args)
            call_id = _data(asked)["call_id"]
            with mcp_daemon.client() as client:  # the human, outside the model's reach
                client.approve(call_id)
                client.wait_call(call_id, timeout=30)
            return asked, await session.call_tool("run_command", args)

    asked, answered = _run(main)
    assert _data(asked)["code"] == "NEEDS_APPROVAL" and "same step_id" in _text(asked)
    assert _data(answered)["ok"] and _data(answered)["replayed"] is True
    assert _data(answered)["call_id"] == _data(asked)["call_id"]


def test_no_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    missing = tmp_path / "nobody.sock"
    done = subprocess.run(
        mcp_command(missing),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    assert done.stdout == ""  # stdout is the protocol's: nothing else goes there
    assert "no shellward daemon answers" in done.stderr and "make serve" in done.stderr
    assert "Traceback" not in done.stderr


def test_business_tool_is_ledgered_and_a_retried_step_is_not_sent_twice(
    mcp_daemon: Daemon,
) -> None:
    step = _step()
    order = {"customer_id": f"c-{step}", "item": "book", "quantity": 1, "step_id": step}

    async def main() -> tuple[dict[str, types.Tool], types.CallToolResult, types.CallToolResult]:
        async with mcp_session(mcp_daemon.socket, mcp_daemon.workspace) as session:
            tools = await _tools(session)
            first = await session.call_tool("biz.create_order", order)
            again = await session.call_tool("biz.create_order", order)
            return tools, first, again

    tools, first, again = _run(main)
    hints = tools["biz.create_order"].annotations
    assert hints is not None and hints.read_only_hint is False and hints.open_world_hint is True
    assert "biz" in (tools["biz.create_order"].description or "")
    assert _data(first)["ok"] and _data(first)["output"]
    assert _data(again)["replayed"] is True and _data(again)["output"] == _data(first)["output"]
    sent = [
        entry
        for entry in read_log(mock_log(mcp_daemon))
        if entry["tool"] == "create_order" and entry["arguments"]["customer_id"] == f"c-{step}"
    ]
    assert len(sent) == 1, sent


def _human(action: str, approve: bool | None = None) -> Any:
    """A host whose user answers every elicitation with ``action`` (and ``approve``)."""
    asked: list[str] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        content = None if approve is None else {"approve": approve}
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    answer.asked = asked  # type: ignore[attr-defined]
    return answer


@pytest.mark.parametrize(
    ("action", "approve", "runs"),
    [("accept", True, True), ("accept", False, False), ("decline", None, False)],
)
def test_approval_through_elicitation(
    mcp_daemon: Daemon, action: str, approve: bool | None, runs: bool
) -> None:
    marker = f"elicited-{uuid.uuid4().hex[:8]}.txt"
    human = _human(action, approve)

    async def main() -> types.CallToolResult:
        async with mcp_session(
            mcp_daemon.socket, mcp_daemon.workspace, elicitation=human
        ) as session:
            return await session.call_tool(
                "run_command", {"command": f"alias ll=ls; touch {marker}", "step_id": _step()}
            )

    result = _run(main)
    data = _data(result)
    assert len(human.asked) == 1 and data["call_id"] in human.asked[0]
    assert (mcp_daemon.workspace / marker).exists() is runs
    with mcp_daemon.client() as client:
        status = client.get_call(data["call_id"]).status
    if runs:
        assert data["ok"] and data["code"] == "OK" and status is CallStatus.SUCCEEDED
    else:
        assert result.is_error and status is CallStatus.DENIED, data
        assert data["code"] == "PERMISSION_DENIED"


def test_a_dismissed_question_leaves_the_call_pending(mcp_daemon: Daemon) -> None:
    human = _human("cancel")

    async def main() -> types.CallToolResult:
        async with mcp_session(
            mcp_daemon.socket, mcp_daemon.workspace, elicitation=human
        ) as session:
            return await session.call_tool(
                "run_command", {"command": "alias la=ls", "step_id": _step()}
            )

    data = _data(_run(main))
    assert data["code"] == "NEEDS_APPROVAL" and len(human.asked) == 1
    with mcp_daemon.client() as client:
        assert client.get_call(data["call_id"]).status is CallStatus.PENDING_APPROVAL
