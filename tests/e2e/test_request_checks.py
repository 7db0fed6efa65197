"""Identity and input checks at the edge: cwd compared as a place, run_id and step_id
together on every RPC, size limits on strings, invalid UTF-8 as INVALID_ARGUMENT."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from shellward import Client
from shellward.types import Code
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon


@pytest.fixture(scope="module")
def daemon(module_daemon: Daemon) -> Daemon:
    """One daemon for the module: each check is a refused request; "nothing was recorded"
    compares the ledger before and after it."""
    return module_daemon


def _refused(daemon: Daemon, call: str, request: object) -> tuple[str, str]:
    """(ErrorInfo reason, message) of an RPC that must fail with INVALID_ARGUMENT."""
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        method = getattr(pb_grpc.ShellwardStub(channel), call)
        with pytest.raises(grpc.RpcError) as caught:
            answer = method(request, timeout=30)
            list(answer) if call in ("RunCommand", "Replay") else answer
    error = caught.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    trailer = dict(error.trailing_metadata())  # type: ignore[attr-defined]
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(trailer["grpc-status-details-bin"]).details[0].Unpack(info)
    return info.reason, error.details()  # type: ignore[attr-defined]


def test_cwd_is_compared_as_a_place(client: Client, daemon: Daemon) -> None:
    first = client.run_command("echo same", run_id="cwd", step_id="1")
    assert first.ok and not first.replayed
    for cwd in (str(daemon.workspace), f"{daemon.workspace}/", f"{daemon.workspace}/."):
        again = client.run_command("echo same", cwd=cwd, run_id="cwd", step_id="1")
        assert again.code is not Code.IDEMPOTENCY_KEY_MISMATCH, cwd
        assert again.replayed and again.call_id == first.call_id


@pytest.mark.parametrize(
    ("call", "request_"),
    [
        ("RunCommand", pb.RunCommandRequest(command="echo x", run_id="r")),
        ("RunCommand", pb.RunCommandRequest(command="echo x", step_id="s")),
        ("CallTool", pb.CallToolRequest(tool="list_files", run_id="r")),
        ("GetCall", pb.GetCallRequest(run_id="r")),
        ("Replay", pb.ReplayRequest(step_id="s")),
    ],
)
def test_run_id_without_step_id_is_refused_by_every_rpc(
    daemon: Daemon, client: Client, call: str, request_: object
) -> None:
    recorded = client.list_calls()
    reason, message = _refused(daemon, call, request_)
    assert reason == "INVALID_ARGUMENT" and "run_id and step_id go together" in message
    assert client.list_calls() == recorded  # nothing was recorded


def test_a_3_mb_run_id_is_refused_and_not_stored(daemon: Daemon, client: Client) -> None:
    huge = "r" * 3_000_000
    request = pb.RunCommandRequest(command="echo x", run_id=huge, step_id="1")
    recorded = client.list_calls()
    reason, message = _refused(daemon, "RunCommand", request)
    assert reason == "INVALID_ARGUMENT"
    assert "run_id is 3000000 bytes, over the limit of 1024" in message
    assert client.list_calls() == recorded


def test_invalid_utf8_is_invalid_argument_not_internal(daemon: Daemon) -> None:
    # RunCommandRequest.command (field 1, length-delimited) holding two bytes that are not
    # UTF-8, as a buggy client in any language could send.
    raw = b"\x0a\x02\xff\xfe"
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        for path in ("/shellward.v1.Shellward/RunCommand", "/shellward.v1.Shellward/Classify"):
            if path.endswith("RunCommand"):
                send = channel.unary_stream(path)
            else:
                send = channel.unary_unary(path)
            with pytest.raises(grpc.RpcError) as caught:
                answer = send(raw, timeout=30)
                list(answer) if path.endswith("RunCommand") else answer
            error = caught.value
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
            assert "UTF-8" in error.details()  # type: ignore[attr-defined]
