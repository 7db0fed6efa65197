"""Issue 6's evaluation: business tools of a mock MCP server, through a real daemon over gRPC.

The mock (tests/mocks/business_mcp.py) never touches a real service; it logs every request it
really executed, so "executed exactly once" is checked against its log.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

from shellward import CallStatus, Code, CommandResult, Idempotency, ReplayPolicy
from tests.helpers import Daemon, start_daemon, wait_for
from tests.mocks.business_mcp import executed

MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"


def _config(tmp_path: Path, *, trust: str = "untrusted", pins: str = "", **env: str) -> Path:
    log = tmp_path / "mock-log.jsonl"
    switches = {"MOCK_LOG": str(log), **env}
    config = tmp_path / "tools.toml"
    config.write_text(
        "[[server]]\n"
        'name = "biz"\n'
        f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
        f'trust = "{trust}"\n'
        "timeout_seconds = 10\n"
        f"env = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in switches.items())} }}\n" + pins
    )
    return config


def _daemon(tmp_path: Path, workspace: Path, config: Path, name: str = "d") -> Daemon:
    return start_daemon(
        tmp_path / f"{name}.sock", tmp_path / "state", workspace,
        "--tools-config", str(config), "--user", "ana",
    )  # fmt: skip


def _log(tmp_path: Path) -> Path:
    return tmp_path / "mock-log.jsonl"


KEYED_CREATE_ORDER = """
[[tool]]
server = "biz"
name = "create_order"
key_argument = "idempotency_key"
key_scope = "run"
"""


def test_eval1_create_order_timeout_is_uncertain_and_not_retried(
    tmp_path: Path, workspace: Path
) -> None:
    config = _config(tmp_path, pins=KEYED_CREATE_ORDER, MOCK_DELAY_CREATE_ORDER="3")
    daemon = _daemon(tmp_path, workspace, config)
    try:
        with daemon.client() as client:
            args = {"customer_id": "c1", "item": "book", "quantity": 1}
            first = client.call_tool("create_order", args, run_id="r1", step_id="s1", timeout=1)
            assert first.code is Code.SIDE_EFFECT_UNCERTAIN and not first.retryable
            assert first.status is CallStatus.UNCERTAIN
            assert first.idempotency is Idempotency.NON_IDEMPOTENT
            assert "do not retry automatically" in first.content
            assert first.idempotency_key.startswith("agent:ana:r1:create_order")
            retry = client.call_tool("create_order", args, run_id="r1", step_id="s1", timeout=1)
            assert retry.code is Code.SIDE_EFFECT_UNCERTAIN and retry.call_id == first.call_id
        assert len(executed(_log(tmp_path), "create_order")) == 1
    finally:
        daemon.stop()


def test_eval2_get_order_status_timeout_can_be_retried(tmp_path: Path, workspace: Path) -> None:
    config = _config(tmp_path, MOCK_DELAY_GET_ORDER_STATUS="2")
    daemon = _daemon(tmp_path, workspace, config)
    try:
        with daemon.client() as client:
            args = {"order_id": "o-1"}
            first = client.call_tool("get_order_status", args, run_id="r", step_id="s", timeout=0.5)
            assert first.idempotency is Idempotency.IDEMPOTENT
            assert first.code is Code.TIMEOUT and first.retryable
            retry = client.call_tool("get_order_status", args, run_id="r", step_id="s", timeout=8)
            assert retry.ok and retry.call_id != first.call_id
    finally:
        daemon.stop()


def test_eval3_untrusted_lying_create_issue_is_never(tmp_path: Path, workspace: Path) -> None:
    daemon = _daemon(tmp_path, workspace, _config(tmp_path, MOCK_LIE="1"))
    try:
        with daemon.client() as client:
            tools = {tool.name: tool for tool in client.list_tools()}
        create_issue = tools["biz.create_issue"]
        assert create_issue.idempotency is Idempotency.NON_IDEMPOTENT
        assert create_issue.replay_policy is ReplayPolicy.NEVER
        assert create_issue.trust == "untrusted"
        assert "ignored hint" in create_issue.reason
    finally:
        daemon.stop()


def test_eval4_trusted_server_with_a_pin_the_pin_wins(tmp_path: Path, workspace: Path) -> None:
    pins = '\n[[tool]]\nserver = "biz"\nname = "create_issue"\nidempotency = "non_idempotent"\n'
    config = _config(tmp_path, trust="trusted", pins=pins, MOCK_LIE="1")
    daemon = _daemon(tmp_path, workspace, config)
    try:
        with daemon.client() as client:
            tools = {tool.name: tool for tool in client.list_tools()}
        assert tools["biz.create_issue"].source == "pin"
        assert tools["biz.create_issue"].replay_policy is ReplayPolicy.NEVER
        # Without the pin, the trusted server's (lying) annotation would have been believed.
        assert tools["biz.get_order_status"].idempotency is Idempotency.IDEMPOTENT
    finally:
        daemon.stop()


OBJECT_KEYED = """
[[tool]]
server = "biz"
name = "create_order"
key_argument = "idempotency_key"
object_argument = "customer_id"
key_scope = "{scope}"
"""


def test_eval5_object_scoped_key_survives_restart_and_run_scoped_does_not(
    tmp_path: Path, workspace: Path
) -> None:
    args = {"customer_id": "c42", "item": "lamp", "quantity": 1}
    for scope, expected in (("object", 1), ("run", 2)):
        case = tmp_path / scope
        case.mkdir()
        config = _config(case, pins=OBJECT_KEYED.format(scope=scope))
        daemon = _daemon(case, workspace, config)
        with daemon.client() as client:
            first = client.call_tool("create_order", args, run_id="run-1", step_id="s1")
            assert first.ok
        daemon.stop()
        daemon = _daemon(case, workspace, config)
        try:
            with daemon.client() as client:
                second = client.call_tool("create_order", args, run_id="run-2", step_id="s1")
            assert second.ok
            assert (second.idempotency_key == first.idempotency_key) is (scope == "object")
        finally:
            daemon.stop()
        assert len(executed(_log(case), "create_order")) == expected, scope


def test_eval6_charge_needs_approval_then_runs_once(tmp_path: Path, workspace: Path) -> None:
    pins = '\n[[tool]]\nserver = "biz"\nname = "charge_customer"\napproval = true\n'
    daemon = _daemon(tmp_path, workspace, _config(tmp_path, pins=pins))
    try:
        with daemon.client() as client:
            args = {"customer_id": "c1", "amount_cents": 1999}
            asked = client.call_tool("charge_customer", args, run_id="r", step_id="pay")
            assert asked.code is Code.NEEDS_APPROVAL
            assert executed(_log(tmp_path), "charge_customer") == []
            client.approve(asked.call_id, reason="customer confirmed")
            done = client.wait_call(asked.call_id, timeout=30)
            assert done.ok
            again = client.call_tool("charge_customer", args, run_id="r", step_id="pay")
            assert again.replayed and again.ok
        assert len(executed(_log(tmp_path), "charge_customer")) == 1
    finally:
        daemon.stop()


def test_eval7_server_killed_mid_call_is_uncertain_and_the_daemon_serves_on(
    tmp_path: Path, workspace: Path
) -> None:
    pidfile = tmp_path / "mock.pid"
    config = _config(tmp_path, MOCK_DELAY_SEND_EMAIL="20", MOCK_PIDFILE=str(pidfile))
    daemon = _daemon(tmp_path, workspace, config)
    try:
        with daemon.client() as client:
            results: list[CommandResult] = []
            args = {"to": "a@example.com", "subject": "hi", "body": "hello"}
            caller = threading.Thread(
                target=lambda: results.append(
                    client.call_tool("send_email", args, run_id="r", step_id="mail")
                )
            )
            caller.start()
            wait_for(lambda: len(executed(_log(tmp_path), "send_email")) == 1)
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
            caller.join(timeout=30)
            (result,) = results
            assert result.status is CallStatus.UNCERTAIN
            assert result.code is Code.SIDE_EFFECT_UNCERTAIN and not result.retryable
            assert "lost" in result.content
            # Still serving: commands, and the restarted server's tools.
            assert client.run_command("echo alive", cwd=workspace).ok
            status = client.call_tool("get_order_status", {"order_id": "o-1"}, timeout=15)
            assert status.ok, status.content
    finally:
        daemon.stop()
