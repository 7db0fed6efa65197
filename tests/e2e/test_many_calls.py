"""64 long calls in flight do not starve the short RPCs: GetStatus, Classify, ListApprovals
and the health check still answer while every one of them runs."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shellward import Client
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon, host_processes, wait_for

LONG_CALLS = 64


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
