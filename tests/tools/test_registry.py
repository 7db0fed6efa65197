"""The tool registry over real mock servers: verdicts, trust, changes, names, keys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shellward.types import Idempotency, ReplayPolicy
from shellwardd.errors import InvalidArgument, NotFound
from shellwardd.tools.classify import Source
from shellwardd.tools.compensation import Compensation
from shellwardd.tools.config import ServerConfig, ToolPin, ToolsConfig, Trust
from shellwardd.tools.connection import OutcomeKind
from shellwardd.tools.keys import KeyScope, default_template
from shellwardd.tools.registry import ToolRegistry, description_hash, uncertain_content
from tests.mocks.business_mcp import TOOLS, executed, read_log

from .conftest import eventually, mock_server

Start = Callable[..., ToolRegistry]

ORDER_PIN = ToolPin(
    "biz",
    "create_order",
    key_argument="idempotency_key",
    object_argument="customer_id",
    key_scope=KeyScope.OBJECT,
    key_template=default_template(KeyScope.OBJECT, has_object=True),
)
RUN_ORDER_PIN = ToolPin(
    "biz",
    "create_order",
    key_argument="idempotency_key",
    object_argument="customer_id",
    key_template=default_template(KeyScope.RUN, has_object=True),
)
ISSUE_PIN = ToolPin(
    "biz",
    "create_issue",
    key_argument="idempotency_key",
    key_template=default_template(KeyScope.RUN, has_object=False),
    status_tool="get_issue_by_idempotency_key",
)


@pytest.fixture
def start() -> Iterator[Start]:
    """Start a registry over the given servers and pins; stopped at the end of the test."""
    started: list[ToolRegistry] = []

    def run(*servers: ServerConfig, pins: tuple[ToolPin, ...] = ()) -> ToolRegistry:
        registry = ToolRegistry(ToolsConfig(servers, pins, "mcp.toml"))
        started.append(registry)
        registry.start()
        return registry

    yield run
    for registry in started:
        registry.stop()


def test_untrusted_lies_are_ignored_and_a_pin_beats_a_trusted_one(start: Start) -> None:
    pin = ToolPin(
        "trusted",
        "create_issue",
        idempotency=Idempotency.NON_IDEMPOTENT,
        replay_policy=ReplayPolicy.NEVER,
    )
    registry = start(
        mock_server("biz", MOCK_LIE="1"),
        mock_server("trusted", trust=Trust.TRUSTED, MOCK_LIE="1"),
        mock_server("believed", trust=Trust.TRUSTED, MOCK_LIE="1"),
        pins=(pin,),
    )
    assert len(registry.list()) == 3 * len(TOOLS)
    untrusted = registry.resolve("biz.create_issue")
    assert (untrusted.verdict.idempotency, untrusted.verdict.replay_policy) == (
        Idempotency.NON_IDEMPOTENT,
        ReplayPolicy.NEVER,
    )
    assert "ignored hint from an untrusted server: readOnlyHint=true" in untrusted.verdict.reason
    assert untrusted.trust is Trust.UNTRUSTED
    assert untrusted.annotations is not None and untrusted.annotations.read_only is True

    believed = registry.resolve("believed.create_issue")
    assert believed.verdict.source is Source.ANNOTATIONS
    assert believed.verdict.idempotency is Idempotency.IDEMPOTENT

    pinned = registry.resolve("trusted.create_issue")
    assert pinned.verdict.source is Source.PIN
    assert pinned.verdict.replay_policy is ReplayPolicy.NEVER
    assert pinned.pin == pin

    status = registry.resolve("biz.get_order_status")
    assert status.verdict.idempotency is Idempotency.IDEMPOTENT
    assert registry.problems() == []


def test_names_resolve_qualified_or_when_unique(start: Start) -> None:
    registry = start(mock_server("biz"), mock_server("other"))
    assert registry.resolve("biz.send_email").qualified_name == "biz.send_email"
    with pytest.raises(InvalidArgument, match=r"ambiguous: call one of biz\.send_email"):
        registry.resolve("send_email")
    with pytest.raises(NotFound, match="no tool named `refund_everyone`"):
        registry.resolve("refund_everyone")
    with pytest.raises(NotFound):
        registry.resolve("nope.send_email")


def test_a_plain_name_resolves_when_one_server_has_it(start: Start) -> None:
    registry = start(mock_server("biz"))
    assert registry.resolve("send_email").qualified_name == "biz.send_email"


def test_list_changed_reclassifies_and_flags_the_tool(tmp_path: Path, start: Start) -> None:
    descriptions = tmp_path / "descriptions.json"
    registry = start(mock_server("biz", MOCK_DESCRIPTIONS=str(descriptions)))
    before = registry.resolve("get_order_status")
    assert not before.changed
    assert before.verdict.idempotency is Idempotency.IDEMPOTENT

    # The read tool now says it creates things: flagged, and no longer a read.
    descriptions.write_text(json.dumps({"get_order_status": "Creates an order if needed."}))
    registry.call("get_order_status", {"order_id": "x"}, key=None, timeout=5)
    assert eventually(lambda: registry.resolve("get_order_status").changed)
    after = registry.resolve("get_order_status")
    assert after.description_hash == description_hash("Creates an order if needed.")
    assert after.description_hash != before.description_hash
    assert after.verdict.idempotency is Idempotency.NON_IDEMPOTENT
    assert not registry.resolve("create_order").changed

    # Back to what was first seen: no longer flagged.
    descriptions.write_text("{}")
    registry.call("get_order_status", {"order_id": "x"}, key=None, timeout=5)
    assert eventually(lambda: not registry.resolve("get_order_status").changed)


def test_a_restart_with_a_new_description_is_flagged(tmp_path: Path, start: Start) -> None:
    descriptions = tmp_path / "descriptions.json"
    pidfile = tmp_path / "mock.pid"
    registry = start(
        mock_server("biz", MOCK_DESCRIPTIONS=str(descriptions), MOCK_PIDFILE=str(pidfile))
    )
    assert not registry.resolve("send_email").changed
    descriptions.write_text(json.dumps({"send_email": "Send an e-mail to everyone."}))
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert eventually(lambda: not registry.status()["biz"].running)
    outcome = registry.call("get_order_status", {"order_id": "x"}, key=None, timeout=10)
    assert outcome.kind is OutcomeKind.OK
    assert eventually(lambda: registry.resolve("send_email").changed)
    assert registry.status()["biz"].starts == 2


def test_object_scoped_key_dedupes_across_runs(tmp_path: Path, start: Start) -> None:
    log = tmp_path / "mock.jsonl"
    registry = start(mock_server("biz", MOCK_LOG=str(log)), pins=(ORDER_PIN,))
    tool = registry.resolve("create_order")
    order = {"customer_id": "c-1", "item": "book", "quantity": 1}
    keys = [
        registry.key_for(tool, user="ana", run_id=run, step_id="s1", arguments=order)
        for run in ("run-1", "run-2")
    ]
    assert keys == ["agent:ana:create_order:c-1"] * 2
    # Whatever the model put in the key argument is replaced by the runtime's key.
    forged = {**order, "idempotency_key": "chosen-by-the-model"}
    first = registry.call("create_order", forged, key=keys[0], timeout=5)
    second = registry.call("create_order", order, key=keys[1], timeout=5)
    assert first.structured == second.structured
    assert [e["idempotency_key"] for e in read_log(log)] == keys
    assert len(executed(log, "create_order")) == 1


def test_run_scoped_key_makes_a_new_run_a_new_order(tmp_path: Path, start: Start) -> None:
    log = tmp_path / "mock.jsonl"
    registry = start(mock_server("biz", MOCK_LOG=str(log)), pins=(RUN_ORDER_PIN,))
    tool = registry.resolve("create_order")
    order = {"customer_id": "c-1", "item": "book", "quantity": 1}
    for run in ("run-1", "run-1", "run-2"):
        key = registry.key_for(tool, user="ana", run_id=run, step_id="s1", arguments=order)
        assert registry.call("create_order", order, key=key, timeout=5).kind is OutcomeKind.OK
    assert [e["idempotency_key"] for e in executed(log, "create_order")] == [
        "agent:ana:run-1:create_order:c-1",
        "agent:ana:run-2:create_order:c-1",
    ]


def test_key_errors(start: Start) -> None:
    registry = start(mock_server("biz"), pins=(ORDER_PIN,))
    with pytest.raises(InvalidArgument, match="needs the argument `customer_id`"):
        registry.key_for(
            registry.resolve("create_order"), user="ana", run_id="r", step_id="s", arguments={}
        )
    unkeyed = registry.resolve("send_email")
    assert registry.key_for(unkeyed, user="ana", run_id="r", step_id="s", arguments={}) is None
    with pytest.raises(InvalidArgument, match="has no key_argument configured"):
        registry.call("send_email", {"to": "a", "subject": "b", "body": "c"}, key="k")


def test_timed_out_create_issue_names_the_status_tool_and_key(tmp_path: Path, start: Start) -> None:
    log = tmp_path / "mock.jsonl"
    registry = start(
        mock_server("biz", MOCK_LOG=str(log), MOCK_DELAY_CREATE_ISSUE="30"), pins=(ISSUE_PIN,)
    )
    tool = registry.resolve("create_issue")
    arguments = {"repo": "acme/shop", "title": "Checkout is down", "body": "500s"}
    key = registry.key_for(tool, user="ana", run_id="run-7", step_id="call_3", arguments=arguments)
    assert key == "agent:ana:run-7:create_issue:call_3"
    outcome = registry.call("create_issue", arguments, key=key, timeout=0.5)
    assert outcome.kind is OutcomeKind.TIMEOUT
    assert uncertain_content(tool, outcome, key) == (
        "create_issue was sent but the response timed out. It may already have taken effect;"
        " do not retry automatically. First call get_issue_by_idempotency_key with the"
        " idempotency key 'agent:ana:run-7:create_issue:call_3', or ask the user."
    )
    # The status tool finds what the timed-out call created.
    found = registry.call("get_issue_by_idempotency_key", {"idempotency_key": key}, key=None)
    assert found.structured["found"] is True
    assert len(executed(log, "create_issue")) == 1


def test_problems_with_pins_and_servers(start: Start) -> None:
    pins = (
        ToolPin("biz", "refund_everything"),
        ToolPin("biz", "send_email", key_argument="dedupe", status_tool="find_email"),
        ToolPin("biz", "create_order", compensate=Compensation("uncreate_order")),
    )
    broken = ServerConfig(name="broken", command=("/nonexistent/mcp-server",))
    registry = start(mock_server("biz"), broken, pins=pins)
    problems = registry.problems()
    assert any("server `biz` offers no tool `refund_everything`" in p for p in problems)
    assert any("key_argument `dedupe` is not an argument of biz.send_email" in p for p in problems)
    assert any("status_tool `find_email` is not a tool of server `biz`" in p for p in problems)
    assert any(
        "compensate.tool `uncreate_order` is not a tool of server `biz`" in p for p in problems
    )
    assert any(p.startswith("MCP server `broken`: could not start") for p in problems)
    # The working server's tools are there all the same.
    assert len(registry.list()) == len(TOOLS)


def test_a_daemon_without_servers_does_not_load_the_mcp_sdk() -> None:
    # Half of a daemon's start-up imports; only a configured server needs it.
    script = (
        "import sys, shellwardd.main\n"
        "from shellwardd.tools.config import ToolsConfig\n"
        "from shellwardd.tools.registry import ToolRegistry\n"
        "ToolRegistry(ToolsConfig()).start()\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert found.strip() == "[]"
