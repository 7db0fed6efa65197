"""Every error answered by status carries a google.rpc.Status with an ErrorInfo, decoded
here from the raw trailer the way a client in another language would."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from shellward import Client, InvalidRequest, NotFound
from shellward.types import Code
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from shellwardd.server import _STATUS
from tests.helpers import Daemon


@pytest.fixture(scope="module")
def daemon(module_daemon: Daemon) -> Daemon:
    """One daemon for the module: each test asks for an error, which changes nothing."""
    return module_daemon


def _error_info(error: grpc.RpcError) -> tuple[status_pb2.Status, error_details_pb2.ErrorInfo]:
    trailer = dict(error.trailing_metadata())  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(trailer["grpc-status-details-bin"])
    assert len(status.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return status, info


def _raw_error(daemon: Daemon, method: str, request: object) -> grpc.RpcError:
    with (
        grpc.insecure_channel(f"unix:{daemon.socket}") as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        getattr(pb_grpc.ShellwardStub(channel), method)(request, timeout=30)
    return caught.value


def test_a_unary_error_names_its_code_and_call_in_an_error_info(daemon: Daemon) -> None:
    error = _raw_error(daemon, "GetCall", pb.GetCallRequest(call_id="no-such-call"))
    status, info = _error_info(error)
    assert error.code() is grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    assert status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert status.message == error.details()  # type: ignore[attr-defined]
    assert (info.reason, info.domain) == ("NOT_FOUND", "shellward")
    assert dict(info.metadata) == {"retryable": "false", "call_id": "no-such-call"}


def test_a_streamed_rpcs_error_carries_the_details_too(daemon: Daemon) -> None:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stream = pb_grpc.ShellwardStub(channel).Replay(
            pb.ReplayRequest(run_id="r1", step_id="missing"), timeout=30
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(stream)
    _, info = _error_info(caught.value)
    assert info.reason == "NOT_FOUND"
    assert dict(info.metadata) == {"retryable": "false", "run_id": "r1", "step_id": "missing"}


def test_approve_without_a_call_id_asks_for_the_call_id_not_for_absent_fields(
    daemon: Daemon,
) -> None:
    error = _raw_error(daemon, "Approve", pb.ApproveRequest(approve=True))
    _, info = _error_info(error)
    assert info.reason == "INVALID_ARGUMENT"
    message = error.details()  # type: ignore[attr-defined]
    assert "call_id" in message and "run_id" not in message and "step_id" not in message


def test_every_domain_code_has_its_status_and_shared_statuses_differ_by_reason() -> None:
    assert set(_STATUS) == set(Code) - {Code.OK}
    assert _STATUS[Code.CONFLICT] is _STATUS[Code.SANDBOX_ERROR]  # told apart by ErrorInfo


def test_the_python_client_reads_the_details(client: Client) -> None:
    with pytest.raises(NotFound) as missing:
        client.get_call("no-such-call")
    assert missing.value.code is Code.NOT_FOUND and not missing.value.retryable
    assert missing.value.details["call_id"] == "no-such-call"
    with pytest.raises(InvalidRequest) as bad:
        client.get_call(run_id="r1")
    assert bad.value.code is Code.INVALID_ARGUMENT and bad.value.details["run_id"] == "r1"
