"""The synchronous MCP client against the mock business server, for real over stdio."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellwardd.errors import Unavailable
from shellwardd.tools.classify import ToolHints
from shellwardd.tools.config import ServerConfig
from shellwardd.tools.mcp_client import (
    GRACE_SECONDS,
    McpServerConnection,
    OutcomeKind,
    backoff_delay,
)
from tests.mocks.business_mcp import executed, read_log

from .conftest import eventually, mock_server

ORDER = {"customer_id": "c-1", "item": "book", "quantity": 1}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "mock.jsonl"


def connect(server: ServerConfig, **kwargs: object) -> McpServerConnection:
    return McpServerConnection(server, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def connections() -> Iterator[list[McpServerConnection]]:
    """Connections to stop at the end of a test, whatever happened."""
    opened: list[McpServerConnection] = []
    yield opened
    for connection in opened:
        connection.stop()


def test_backoff_doubles_up_to_a_cap() -> None:
    assert [backoff_delay(n) for n in range(5)] == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(50) == 30.0


def test_list_and_call(log: Path, connections: list[McpServerConnection]) -> None:
    conn = connect(mock_server(MOCK_LOG=str(log), MOCK_FAIL_CHARGE_CUSTOMER="1"))
    connections.append(conn)
    conn.start()
    tools = {t.name: t for t in conn.list_tools()}
    assert set(tools) == {
        "create_order",
        "get_order_status",
        "charge_customer",
        "send_email",
        "create_issue",
        "get_issue_by_idempotency_key",
        "merge_pull_request",
        "cancel_order",
    }
    assert tools["get_order_status"].annotations == ToolHints(read_only=True)
    assert "idempotency_key" in tools["create_order"].input_schema["properties"]

    created = conn.call("create_order", {**ORDER, "idempotency_key": "k1"}, timeout=5)
    assert created.kind is OutcomeKind.OK and not created.is_error
    order_id = created.structured["order_id"]
    assert json.loads(created.content)["order_id"] == order_id

    status = conn.call("get_order_status", {"order_id": order_id}, timeout=5)
    assert (status.kind, status.structured["status"]) == (OutcomeKind.OK, "created")

    refused = conn.call("charge_customer", {"customer_id": "c-1", "amount_cents": 5}, timeout=5)
    assert (refused.kind, refused.is_error) == (OutcomeKind.ERROR, True)
    assert "MOCK_FAIL" in refused.content
    assert executed(log, "charge_customer") == []
    assert conn.status().starts == 1


def test_timeout_after_the_request_was_sent(
    log: Path, connections: list[McpServerConnection]
) -> None:
    conn = connect(mock_server(MOCK_LOG=str(log), MOCK_DELAY_CREATE_ORDER="30"))
    connections.append(conn)
    conn.start()
    began = time.monotonic()
    outcome = conn.call("create_order", {**ORDER, "idempotency_key": "k1"}, timeout=0.5)
    elapsed = time.monotonic() - began
    assert outcome.kind is OutcomeKind.TIMEOUT
    assert "no answer within 0.5 s" in outcome.detail
    assert 0.5 <= elapsed < 0.5 + GRACE_SECONDS
    # The service did the work: only the answer was late. Exactly once.
    assert len(executed(log, "create_order")) == 1
    # The connection survives a timed-out call.
    assert conn.call("get_order_status", {"order_id": "x"}, timeout=5).kind is OutcomeKind.OK


def test_server_killed_mid_call_is_lost_then_restarted(
    tmp_path: Path, log: Path, connections: list[McpServerConnection]
) -> None:
    pidfile = tmp_path / "mock.pid"
    changes: list[str] = []
    server = mock_server(MOCK_LOG=str(log), MOCK_DELAY_CREATE_ORDER="30", MOCK_PIDFILE=str(pidfile))
    conn = connect(server, on_tools_changed=changes.append)
    connections.append(conn)
    conn.start()
    first_pid = int(pidfile.read_text())

    def kill_once_executed() -> None:
        if eventually(lambda: len(executed(log, "create_order")) == 1):
            os.kill(first_pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_once_executed)
    killer.start()
    began = time.monotonic()
    outcome = conn.call("create_order", {**ORDER, "idempotency_key": "k1"}, timeout=20)
    killer.join()
    assert outcome.kind is OutcomeKind.LOST, outcome
    assert time.monotonic() - began < 10
    status = conn.status()
    assert (status.running, status.failures) == (False, 1)
    assert 0 < status.retry_in <= backoff_delay(1)

    # The next call restarts the server after the backoff, and works.
    began = time.monotonic()
    after = conn.call("get_order_status", {"order_id": "x"}, timeout=10)
    assert after.kind is OutcomeKind.OK, after
    assert time.monotonic() - began >= backoff_delay(1) - 0.2
    assert int(pidfile.read_text()) != first_pid
    status = conn.status()
    assert (status.running, status.starts, status.failures) == (True, 2, 0)
    assert eventually(lambda: changes == ["restart"])
    assert len(executed(log, "create_order")) == 1


def test_backoff_grows_while_the_server_cannot_start(
    connections: list[McpServerConnection],
) -> None:
    broken = ServerConfig(name="broken", command=(sys.executable, "-c", "raise SystemExit(3)"))
    conn = connect(broken)
    connections.append(conn)
    first = conn.call("anything", {}, timeout=5)
    assert first.kind is OutcomeKind.UNAVAILABLE
    assert "could not start the server" in first.detail
    assert conn.status().failures == 1

    # Too short a deadline to wait out the backoff: refused at once, nothing spawned.
    began = time.monotonic()
    second = conn.call("anything", {}, timeout=0.1)
    assert time.monotonic() - began < 0.3
    assert second.kind is OutcomeKind.UNAVAILABLE
    assert "next start in" in second.detail
    assert conn.status().failures == 1

    # A longer one waits the backoff out, tries again, fails again: the delay doubles.
    third = conn.call("anything", {}, timeout=5)
    assert third.kind is OutcomeKind.UNAVAILABLE
    status = conn.status()
    assert status.failures == 2
    assert backoff_delay(1) < status.retry_in <= backoff_delay(2)


def test_a_server_that_never_answers_does_not_hang_the_caller(
    connections: list[McpServerConnection],
) -> None:
    mute = ServerConfig(name="mute", command=(sys.executable, "-c", "import time; time.sleep(60)"))
    conn = connect(mute, start_timeout=0.5)
    connections.append(conn)
    began = time.monotonic()
    with pytest.raises(Unavailable, match="MCP server `mute`"):
        conn.start()
    assert time.monotonic() - began < 0.5 + GRACE_SECONDS
    began = time.monotonic()
    outcome = conn.call("anything", {}, timeout=5)
    assert outcome.kind is OutcomeKind.UNAVAILABLE
    assert time.monotonic() - began < 5 + GRACE_SECONDS


def test_list_changed_reaches_the_callback(
    tmp_path: Path, connections: list[McpServerConnection]
) -> None:
    descriptions = tmp_path / "descriptions.json"
    changes: list[str] = []
    conn = connect(
        mock_server(MOCK_DESCRIPTIONS=str(descriptions)), on_tools_changed=changes.append
    )
    connections.append(conn)
    before = {t.name: t.description for t in conn.list_tools()}
    descriptions.write_text(json.dumps({"create_order": "Creates an order and charges it."}))
    assert conn.call("get_order_status", {"order_id": "x"}, timeout=5).kind is OutcomeKind.OK
    assert eventually(lambda: changes == ["list_changed"])
    after = {t.name: t.description for t in conn.list_tools()}
    assert before["create_order"] != after["create_order"] == "Creates an order and charges it."


def test_stop_ends_the_server_and_refuses_calls(tmp_path: Path, log: Path) -> None:
    pidfile = tmp_path / "mock.pid"
    conn = connect(mock_server(MOCK_LOG=str(log), MOCK_PIDFILE=str(pidfile)))
    conn.start()
    pid = int(pidfile.read_text())
    conn.stop()
    assert eventually(lambda: not _alive(pid))
    outcome = conn.call("get_order_status", {"order_id": "x"}, timeout=5)
    assert outcome.kind is OutcomeKind.UNAVAILABLE
    assert "stopped" in outcome.detail
    assert read_log(log) == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"
