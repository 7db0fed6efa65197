"""A ledger of calls with ~1 MB of output each: every listing answers (paged below the
4 MiB any gRPC client accepts by default), output is fetched per call, and pages neither
skip nor repeat a call."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from shellward import Client
from shellward.cli import main
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon

MEGABYTE = 1_000_000


@pytest.fixture
def big_calls(client: Client, workspace: Path) -> list[str]:
    ids = []
    for step in range(5):
        result = client.run_command(
            f"yes {step} | head -c {MEGABYTE}", cwd=workspace, run_id="big", step_id=str(step)
        )
        assert result.ok and result.stdout.total_bytes == MEGABYTE
        ids.append(result.call_id)
    return ids[::-1]  # newest first


def test_list_calls_limit_50_answers_a_default_grpc_client(
    daemon: Daemon, big_calls: list[str]
) -> None:
    # A channel with gRPC's default 4 MiB receive limit, as grpcurl or @grpc/grpc-js have.
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stub = pb_grpc.ShellwardStub(channel)
        listed = stub.ListCalls(pb.ListCallsRequest(limit=50), timeout=30)
        assert [c.call_id for c in listed.calls] == big_calls and not listed.next_page_token
        assert all(c.output_omitted and not c.stdout.data for c in listed.calls)

        seen: list[str] = []
        request = pb.ListCallsRequest(limit=50, include_output=True)
        while True:
            page = stub.ListCalls(request, timeout=30)
            assert page.ByteSize() < 4 * 1024 * 1024
            seen += [c.call_id for c in page.calls if len(c.stdout.data) == MEGABYTE]
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        assert seen == big_calls

        one = stub.GetCall(pb.GetCallRequest(call_id=big_calls[0]), timeout=30)
        assert len(one.stdout.data) == MEGABYTE and not one.output_omitted


def test_the_client_and_the_cli_page_through(
    daemon: Daemon, client: Client, big_calls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert [e.call_id for e in client.list_calls()] == big_calls
    full = client.list_calls(include_output=True)
    assert [e.call_id for e in full] == big_calls
    assert all(e.stdout.total_bytes == MEGABYTE and len(e.stdout.data) == MEGABYTE for e in full)
    assert [e.call_id for e in client.list_calls(limit=2)] == big_calls[:2]

    assert main(["--socket", str(daemon.socket), "ledger", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["call_id"] for entry in listed] == big_calls


def test_a_forged_page_token_is_invalid_argument(daemon: Daemon) -> None:
    with (
        grpc.insecure_channel(f"unix:{daemon.socket}") as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        pb_grpc.ShellwardStub(channel).ListCalls(
            pb.ListCallsRequest(page_token="not a token"), timeout=30
        )
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
