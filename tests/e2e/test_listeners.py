"""The listeners: a taken TCP port refuses a second daemon (no SO_REUSEPORT sharing), and
server reflection answers under grpc.reflection.v1 as well as v1alpha."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2

from tests.helpers import Daemon, start_daemon


def test_a_second_daemon_on_a_taken_tcp_port_refuses_to_start(
    tmp_path: Path, workspace: Path
) -> None:
    first = start_daemon(
        tmp_path / "a" / "s.sock", tmp_path / "a-state", workspace,
        "--tcp", "127.0.0.1:0", "--token", "s3cret",
    )  # fmt: skip
    try:
        port = int(first.banner.rsplit(":", 1)[1].split()[0])
        with pytest.raises(RuntimeError, match="the port is taken") as refused:
            second = start_daemon(
                tmp_path / "b" / "s.sock", tmp_path / "b-state", workspace,
                "--tcp", f"127.0.0.1:{port}", "--token", "s3cret",
            )  # fmt: skip
            second.stop(signal.SIGKILL)
        assert f"127.0.0.1:{port}" in str(refused.value)
    finally:
        first.stop()


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_and_describes_the_service(daemon: Daemon, version: str) -> None:
    path = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="shellward.v1.Shellward"),
    ]
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        info = channel.stream_stream(
            path,
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        listed, described = list(info(iter(requests), timeout=30))
    names = {s.name for s in listed.list_services_response.service}
    assert {"shellward.v1.Shellward", "grpc.reflection.v1.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto
