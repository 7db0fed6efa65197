"""The asyncio client against a real daemon: the same answers as the sync client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shellward import AsyncClient, CallAccepted, Code, CommandResult, NotFound, OutputChunk
from tests.helpers import Daemon


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
