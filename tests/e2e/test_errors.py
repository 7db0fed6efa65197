"""Errors of unary RPCs keep the daemon's domain code (trailing metadata), and a tool's
arguments from an older client (a protobuf Struct) are still read."""

from __future__ import annotations

import pytest

from shellward import Client, InvalidRequest, NotFound
from shellward.types import Code
from shellward.v1 import shellward_pb2 as pb
from shellwardd.server import _tool_arguments


def test_a_unary_error_carries_the_domain_code(client: Client) -> None:
    with pytest.raises(NotFound) as missing:
        client.get_call("no-such-call")
    assert missing.value.code is Code.NOT_FOUND and "no call" in missing.value.message
    with pytest.raises(InvalidRequest) as bad:
        client.wait_call("no-such-call", timeout=-1)
    assert bad.value.code is Code.INVALID_ARGUMENT


def test_arguments_json_wins_and_an_older_clients_struct_is_still_read() -> None:
    old = pb.CallToolRequest(tool="read_file")
    old.arguments.update({"path": "a.txt"})
    assert _tool_arguments(old) == {"path": "a.txt"}
    new = pb.CallToolRequest(tool="read_file", arguments_json='{"max_bytes": 10}')
    new.arguments.update({"max_bytes": 99})
    assert _tool_arguments(new) == {"max_bytes": 10}
