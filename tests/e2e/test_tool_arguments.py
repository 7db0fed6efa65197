"""Tool arguments cross the wire as sent: integers stay integers, floats floats, nested
objects and nulls intact, all the way to the MCP server (the mock business service)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.helpers import start_daemon
from tests.mocks.business_mcp import read_log

MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"


def test_integer_float_nested_and_null_arguments_arrive_as_sent(
    tmp_path: Path, workspace: Path
) -> None:
    log = tmp_path / "mock-log.jsonl"
    config = tmp_path / "tools.toml"
    config.write_text(
        '[[server]]\nname = "biz"\n'
        f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
        f"env = {{ MOCK_LOG = {json.dumps(str(log))} }}\n"
    )
    daemon = start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--tools-config", str(config)
    )
    sent = {
        "order_id": 10,
        "ratio": 2.5,
        "big": 2**53 + 1,  # not representable as a double
        "filter": {"ids": [1, 2, 3], "deep": {"n": 0, "x": -7.25}},
        "cursor": None,
    }
    try:
        with daemon.client() as client:
            result = client.call_tool("biz.get_order_status", sent, cwd=workspace)
    finally:
        daemon.stop()
    assert result.ok, result.content
    (entry,) = read_log(log)
    # Compared as JSON text: 10 == 10.0 in Python, but not on the wire.
    assert json.dumps(entry["arguments"], sort_keys=True) == json.dumps(sent, sort_keys=True)
