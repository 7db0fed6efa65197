"""The asyncio client against a real daemon: the same answers as the sync client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shellward import (
    AsyncClient,
    CallAccepted,
    CallStatus,
    Code,
    CommandResult,
    NotFound,
    OutputChunk,
    RuleLayer,
)
from tests.helpers import Daemon, start_daemon


def test_async_client_runs_streams_and_replays(daemon: Daemon, workspace: Path) -> None:
    async def scenario() -> None:
        async with AsyncClient(daemon.socket) as client:
            events = [e async for e in client.stream_command("echo hi", cwd=workspace)]
            assert isinstance(events[0], CallAccepted)
            assert any(isinstance(e, OutputChunk) and e.data == b"hi\n" for e in events)
            result = events[-1]
            assert isinstance(result, CommandResult) and result.ok
            first = await client.run_command(
                "echo x >> log.txt", cwd=workspace, run_id="a", step_id="1"
            )
            again = await client.run_command(
                "echo x >> log.txt", cwd=workspace, run_id="a", step_id="1"
            )
            assert first.ok and again.replayed and again.call_id == first.call_id
            assert (await client.replay(first.call_id)).replayed
            assert (await client.get_call(first.call_id)).command == "echo x >> log.txt"
            assert [e.call_id for e in await client.list_calls(run_id="a")] == [first.call_id]
            assert (await client.classify("npm publish")).replay_policy.value == "never"
            written = await client.call_tool("write_file", {"path": "n.txt", "content": "v"},
                                             cwd=workspace)  # fmt: skip
            assert written.ok and (workspace / "n.txt").read_text() == "v"
            assert (await client.wait_call(written.call_id)).ok
            assert await client.recover("a") == []
            assert (await client.status()).socket == str(daemon.socket)
            with pytest.raises(NotFound):
                await client.get_call("nope")
            refused = await client.run_command("", cwd=workspace)
            assert refused.code is Code.INVALID_ARGUMENT

    asyncio.run(scenario())
    assert (workspace / "log.txt").read_text() == "x\n"


APPROVAL_RULE = """\
[[rule]]
id = "deploy-it"
program = "deploy-it"
idempotency = "non_idempotent"
replay = "never"
approval = true
reason = "deploys to production"
match = ["deploy-it now"]
"""


def test_async_client_answers_approvals_lists_tools_and_manages_rules(
    tmp_path: Path, workspace: Path
) -> None:
    """The calls the asyncio client once lacked, against a real daemon."""
    user_rules = tmp_path / "user-rules.toml"
    user_rules.write_text(APPROVAL_RULE)
    daemon = start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--user-rules", str(user_rules)
    )

    async def scenario() -> None:
        async with AsyncClient(daemon.socket) as client:
            assert await client.approvals() == []
            denied = await client.run_command("deploy-it now", cwd=workspace)
            approved = await client.run_command("deploy-it later", cwd=workspace)
            assert denied.code is Code.NEEDS_APPROVAL and approved.code is Code.NEEDS_APPROVAL
            pending = {e.call_id for e in await client.approvals()}
            assert pending == {denied.call_id, approved.call_id}
            entry = await client.deny(denied.call_id, reason="not on a Friday")
            assert entry.status is CallStatus.DENIED
            assert (await client.approve(approved.call_id, reason="ok")).call_id == approved.call_id
            ran = await client.wait_call(approved.call_id, timeout=30)
            assert ran.status.is_final and ran.status is not CallStatus.DENIED
            assert (await client.wait_call(denied.call_id)).status is CallStatus.DENIED
            assert await client.approvals() == []

            assert {"read_file", "write_file"} <= {t.name for t in await client.list_tools()}
            reloaded = await client.reload_rules()
            assert reloaded.ok and str(user_rules) in reloaded.sources
            checks = await client.check_rules()
            assert [(c.layer, c.ok) for c in checks] == [
                (RuleLayer.BUILTIN, True), (RuleLayer.USER, True)
            ]  # fmt: skip
            assert (await client.check_rules([user_rules]))[0].path == str(user_rules)

            echoed = await client.run_command("echo out", cwd=workspace, run_id="r", step_id="1")
            listed = await client.list_calls(run_id="r")
            assert [e.call_id for e in listed] == [echoed.call_id]
            assert listed[0].stdout.data == b""
            again = await client.replay(echoed.call_id, rpc_timeout=30)
            assert again.replayed and again.stdout.data == b"out\n"
            read = await client.call_tool("list_files", {}, cwd=workspace, rpc_timeout=30)
            assert read.ok

    try:
        asyncio.run(scenario())
    finally:
        daemon.stop()
