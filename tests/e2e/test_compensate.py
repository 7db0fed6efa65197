"""Compensation of business tool calls, on a real daemon and the mock business service:
create_order then compensate cancels exactly that order, once, whoever asks twice; calls
that cannot be compensated are refused with nothing sent."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, Code
from shellward._exceptions import InvalidRequest, ShellwardError
from tests.helpers import Daemon, start_daemon
from tests.mocks.business_mcp import executed, read_log

MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"
ORDER = {"customer_id": "c-1", "item": "tea", "quantity": 2}

TOOLS = """\
[[tool]]
server = "biz"
name = "create_order"
key_argument = "idempotency_key"
compensate = { tool = "cancel_order", arguments = { order_id = "{output.order_id}" } }

[[tool]]
server = "biz"
name = "cancel_order"
key_argument = "idempotency_key"

[[tool]]
server = "biz"
name = "charge_customer"
compensate = { tool = "cancel_order", arguments = { order_id = "{output.refund_of}" } }

[[tool]]
server = "biz"
name = "send_email"
key_argument = "idempotency_key"
compensate = { tool = "cancel_order", arguments = { order_id = "{input.idempotency_key}" } }
"""


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "mock-log.jsonl"


def _daemon(tmp_path: Path, workspace: Path, log: Path, **env: str) -> Daemon:
    config = tmp_path / "tools.toml"
    mock_env = {"MOCK_LOG": str(log), **env}
    config.write_text(
        '[[server]]\nname = "biz"\n'
        f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
        f"env = {json.dumps(mock_env).replace(':', ' =')}\n"
        "timeout_seconds = 3\n\n" + TOOLS
    )
    return start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--tools-config", str(config)
    )


@pytest.fixture
def client(tmp_path: Path, workspace: Path, log: Path) -> Iterator[Client]:
    daemon = _daemon(tmp_path, workspace, log)
    try:
        with daemon.client() as c:
            yield c
    finally:
        daemon.stop()


def test_compensate_cancels_exactly_that_order_once(client: Client, log: Path) -> None:
    other = client.call_tool("create_order", ORDER, run_id="r1", step_id="s0")
    created = client.call_tool("create_order", ORDER, run_id="r1", step_id="s1")
    assert created.ok, created.content
    order_id = created.output["order_id"]

    first = client.compensate(created.call_id)
    assert first.ok, first.content
    assert (first.run_id, first.step_id) == ("r1", f"compensate:{created.call_id}")
    assert client.call_tool("get_order_status", {"order_id": order_id}).output == {
        "order_id": order_id,
        "status": "cancelled",
    }
    other_status = client.call_tool("get_order_status", {"order_id": other.output["order_id"]})
    assert other_status.output["status"] == "created"

    again = client.compensate(created.call_id)
    assert again.ok and again.replayed, again.content
    assert again.call_id == first.call_id
    cancels = executed(log, "cancel_order")
    assert [c["arguments"]["order_id"] for c in cancels] == [order_id]
    # The compensating call has its own business key, derived from the original call.
    assert cancels[0]["idempotency_key"].endswith(
        f":r1:cancel_order:compensate%3A{created.call_id}"
    )


def test_a_call_without_identity_is_compensated_once_too(client: Client, log: Path) -> None:
    created = client.call_tool("create_order", ORDER)
    assert client.compensate(created.call_id).ok
    assert client.compensate(created.call_id).replayed
    assert len(executed(log, "cancel_order")) == 1


def test_refusals_send_nothing(client: Client, log: Path) -> None:
    no_compensation = client.call_tool("get_order_status", {"order_id": "x"})
    with pytest.raises(InvalidRequest, match="has no compensation configured"):
        client.compensate(no_compensation.call_id)

    command = client.run_command("true", run_id="r2", step_id="cmd")
    with pytest.raises(InvalidRequest, match="compensation is for business tools"):
        client.compensate(command.call_id)

    # The template reads {output.refund_of}, which the answer does not have.
    charged = client.call_tool("charge_customer", {"customer_id": "c", "amount_cents": 5})
    assert charged.ok
    with pytest.raises(InvalidRequest, match=r"needs \{output.refund_of\}.*nothing was sent"):
        client.compensate(charged.call_id)

    with pytest.raises(ShellwardError) as unknown:
        client.compensate("no-such-call")
    assert unknown.value.code is Code.NOT_FOUND
    assert all(entry["tool"] != "cancel_order" for entry in read_log(log))


def test_a_call_that_failed_is_not_compensated(tmp_path: Path, workspace: Path, log: Path) -> None:
    daemon = _daemon(tmp_path, workspace, log, MOCK_FAIL_CREATE_ORDER="1")
    try:
        with daemon.client() as client:
            failed = client.call_tool("create_order", ORDER, run_id="r", step_id="s")
            assert failed.code is Code.COMMAND_FAILED
            with pytest.raises(InvalidRequest, match="did not take effect"):
                client.compensate(failed.call_id)
    finally:
        daemon.stop()
    assert not executed(log, "cancel_order")


def test_uncertain_calls_name_their_compensation_only_when_it_can_run(
    tmp_path: Path, workspace: Path, log: Path
) -> None:
    daemon = _daemon(
        tmp_path, workspace, log, MOCK_DELAY_CREATE_ORDER="3", MOCK_DELAY_SEND_EMAIL="3"
    )
    mail = {"to": "a@b.c", "subject": "s", "body": "b"}
    try:
        with daemon.client() as client:
            # Its compensation needs the answer it never got: not offered, refused.
            order = client.call_tool("create_order", ORDER, run_id="r", step_id="o", timeout=0.5)
            assert order.code is Code.SIDE_EFFECT_UNCERTAIN, order.content
            assert "compensate" not in order.content
            with pytest.raises(ShellwardError, match="needs values from that answer") as refused:
                client.compensate(order.call_id)
            assert refused.value.code is Code.SIDE_EFFECT_UNCERTAIN

            # Its compensation reads only what was sent: offered, in the first answer and
            # in the retry's refusal, and it runs with the key that was sent.
            sent = client.call_tool("send_email", mail, run_id="r", step_id="m", timeout=0.5)
            assert sent.code is Code.SIDE_EFFECT_UNCERTAIN
            assert f"shellward compensate {sent.call_id}" in sent.content
            retry = client.call_tool("send_email", mail, run_id="r", step_id="m", timeout=0.5)
            assert retry.code is Code.SIDE_EFFECT_UNCERTAIN
            assert f"shellward compensate {sent.call_id}" in retry.content
            assert "Compensate RPC" in retry.content
            compensated = client.compensate(sent.call_id)
            assert compensated.code is Code.COMMAND_FAILED  # the mock knows no such order
    finally:
        daemon.stop()
    (cancel,) = [e for e in read_log(log) if e["tool"] == "cancel_order"]
    assert cancel["arguments"]["order_id"] == sent.idempotency_key


def test_a_conflict_about_a_call_names_its_compensation(
    tmp_path: Path, workspace: Path, log: Path
) -> None:
    config = tmp_path / "tools.toml"
    config.write_text(
        '[[server]]\nname = "biz"\n'
        f"command = {json.dumps([sys.executable, str(MOCK)])}\n"
        f"env = {{ MOCK_LOG = {json.dumps(str(log))} }}\n\n"
        '[[tool]]\nserver = "biz"\nname = "create_order"\nidempotency = "conditional"\n'
        'compensate = { tool = "cancel_order", arguments = { order_id = "{output.order_id}" } }\n'
    )
    daemon = start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--tools-config", str(config)
    )
    try:
        with daemon.client() as client:
            created = client.call_tool("create_order", ORDER, run_id="r", step_id="s")
            # A conditional call asked to run again is checked; a business tool's effects
            # cannot be: a human decides, and the sentence offers the compensation.
            again = client.replay(created.call_id, rerun=True)
    finally:
        daemon.stop()
    assert again.code is Code.CONFLICT, again.content
    assert f"shellward compensate {created.call_id}" in again.content
    assert len(executed(log, "create_order")) == 1
