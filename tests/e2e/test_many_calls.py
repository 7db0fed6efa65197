"""64 long calls in flight do not starve the short RPCs: GetStatus, Classify, ListApprovals
and the health check still answer while every one of them runs. Past --max-running-calls a
long call is refused and health says so (a small limit here; bench/short_rpcs.py runs 500)."""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shellward import Client
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon, host_processes, start_daemon, wait_for

LONG_CALLS = 64
SLOTS = 8


def test_64_long_calls_leave_room_for_short_rpcs(daemon: Daemon, client: Client) -> None:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stub = pb_grpc.ShellwardStub(channel)
        streams = [
            stub.RunCommand(pb.RunCommandRequest(command="sleep 344", timeout_seconds=300))
            for _ in range(LONG_CALLS)
        ]
        try:
            wait_for(lambda: len(host_processes("sleep 344")) == LONG_CALLS, timeout=180)
            # Each would wait forever for a thread if the long calls held them all.
            status = stub.GetStatus(pb.GetStatusRequest(), timeout=30)
            assert status.running_calls == LONG_CALLS
            assert stub.Classify(pb.ClassifyRequest(command="ls"), timeout=30).verdict
            stub.ListApprovals(pb.ListApprovalsRequest(), timeout=30)
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="shellward.v1.Shellward"), timeout=30
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            for stream in streams:
                stream.cancel()  # the daemon cancels each call
    wait_for(lambda: not host_processes("sleep 344"), timeout=120)


def test_more_long_calls_than_the_old_fixed_limit_run(daemon: Daemon, client: Client) -> None:
    """The default capacity is not the 112 slots of a fixed 128-thread pool."""
    check = health_pb2.HealthCheckRequest(service="shellward.v1.Shellward")
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stub = pb_grpc.ShellwardStub(channel)
        pending = client.run_command("sudo touch made.txt")
        wait = pb.WaitCallRequest(call_id=pending.call_id, timeout_seconds=120)
        waits = [stub.WaitCall.future(wait, timeout=180) for _ in range(120)]
        try:
            wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=30).version != "")
            answer = health_pb2_grpc.HealthStub(channel).Check(check, timeout=30)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            client.deny(pending.call_id)
        for future in waits:  # the 113th on raised UNAVAILABLE with a fixed pool
            assert future.result(timeout=60).metadata.call_id == pending.call_id


@pytest.fixture
def small_daemon(tmp_path: Path, workspace: Path) -> Iterator[Daemon]:
    handle = start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace,
        "--max-running-calls", str(SLOTS),
    )  # fmt: skip
    yield handle
    handle.stop(signal.SIGKILL)


@pytest.fixture
def small_client(small_daemon: Daemon) -> Iterator[Client]:
    with small_daemon.client() as c:
        yield c


def test_a_long_rpc_past_the_slots_is_unavailable_and_health_says_so(
    small_daemon: Daemon, small_client: Client
) -> None:
    daemon, client = small_daemon, small_client
    pending = client.run_command("sudo touch made.txt")
    assert pending.code.value == "NEEDS_APPROVAL"
    check = health_pb2.HealthCheckRequest(service="shellward.v1.Shellward")
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stub = pb_grpc.ShellwardStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        wait = pb.WaitCallRequest(call_id=pending.call_id, timeout_seconds=120)
        waits = [stub.WaitCall.future(wait, timeout=180) for _ in range(SLOTS)]
        try:
            wait_for(
                lambda: (
                    health.Check(check, timeout=30).status
                    == health_pb2.HealthCheckResponse.NOT_SERVING
                )
            )
            with pytest.raises(grpc.RpcError) as refused:
                stub.WaitCall(wait, timeout=30)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
            assert "--max-running-calls" in refused.value.details()  # type: ignore[attr-defined]
            assert stub.GetStatus(pb.GetStatusRequest(), timeout=30).version
        finally:
            client.deny(pending.call_id)
            for answer in waits:
                answer.result(timeout=60)
    wait_for(lambda: _serving(daemon, check) == health_pb2.HealthCheckResponse.SERVING)


def _serving(daemon: Daemon, check: health_pb2.HealthCheckRequest) -> int:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        return health_pb2_grpc.HealthStub(channel).Check(check, timeout=30).status  # type: ignore[no-any-return]


def test_health_is_not_serving_while_the_ledger_does_not_answer(daemon: Daemon) -> None:
    check = health_pb2.HealthCheckRequest(service="shellward.v1.Shellward")
    locker = sqlite3.connect(daemon.state_dir / "ledger.sqlite3", isolation_level=None)
    try:
        locker.execute("BEGIN EXCLUSIVE")  # every write of the daemon now waits, then fails
        wait_for(
            lambda: _serving(daemon, check) == health_pb2.HealthCheckResponse.NOT_SERVING,
            timeout=120,
        )
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    wait_for(lambda: _serving(daemon, check) == health_pb2.HealthCheckResponse.SERVING)
