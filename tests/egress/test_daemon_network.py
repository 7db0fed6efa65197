"""Network through a real daemon: flags, the daemon's own port, the hostile sequence."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, Code, Idempotency, ReplayPolicy
from tests.egress.conftest import NAME, Server
from tests.helpers import Daemon, start_daemon, wait_for


@pytest.fixture
def daemon(tmp_path: Path, workspace: Path) -> Iterator[Daemon]:
    # The operator names the test's servers: a pinned name and the loopback address.
    handle = start_daemon(
        tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace,
        "--tcp", "127.0.0.1:0", "--token", "s3cret",
        "--allow-domain", NAME, "--allow-domain", "127.0.0.1",
        "--resolve", f"{NAME}=127.0.0.1",
    )  # fmt: skip
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def _tcp_port(daemon: Daemon) -> int:
    found = re.search(r"tcp:127\.0\.0\.1:(\d+)", daemon.banner)
    assert found, daemon.banner
    return int(found.group(1))


def test_network_never_reaches_the_daemons_own_port(daemon: Daemon, workspace: Path) -> None:
    port = _tcp_port(daemon)
    # Even with the operator allowing 127.0.0.1: directly it is the sandbox's own loopback
    # (nothing listens), and the proxy refuses it.
    command = (
        f"curl -sS -m 10 --noproxy '' http://127.0.0.1:{port}/ ; "
        f"curl -sS -m 10 -x http://127.0.0.1:3128 http://127.0.0.1:{port}/ ; "
        f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    )
    with daemon.client() as client:
        result = client.run_command(command, cwd=workspace, network=True)
    assert b"connected" not in result.stdout.data
    assert result.stdout.data.count(b"the daemon's own port") == 1


def test_git_then_a_socket_cannot_reach_a_host_listener(
    daemon: Daemon, workspace: Path, listener: tuple[int, list[object]]
) -> None:
    # The attack: a command that earns network (git ls-remote), then a direct socket.
    port, accepted = listener
    command = (
        "git ls-remote x; "
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)' "
        "&& echo connected"
    )
    with daemon.client() as client:
        result = client.run_command(command, cwd=workspace, network=True)
    assert b"connected" not in result.stdout.data
    assert accepted == []


def test_allowed_destination_through_the_daemon(
    daemon: Daemon, workspace: Path, http_server: Server
) -> None:
    command = f"curl -sS -m 10 -X POST --data-binary x http://{NAME}:{http_server.port}/p"
    with daemon.client() as client:
        result = client.run_command(command, cwd=workspace)
    assert result.ok, result.stderr.data
    assert http_server.seen == [("POST", "/p", b"x")]


def test_a_call_without_network_reaches_nothing(
    client: Client, workspace: Path, http_server: Server
) -> None:
    # `cat` needs no network: no namespace exit, no proxy variables.
    with client:
        result = client.run_command("cat /dev/null; env", cwd=workspace, network=True)
    assert b"PROXY" not in result.stdout.data.upper()


# An operator's tool the rules call idempotent, which POSTs where the classifier cannot see.
REPORT_RULE = """
[[rule]]
id = "report"
program = "report"
idempotency = "idempotent"
replay = "auto"
network = true
reason = "fetches a report"
match = ["report x"]
"""


@pytest.fixture
def report_daemon(
    tmp_path: Path, workspace: Path, host_dir: Path, http_server: Server
) -> Iterator[Daemon]:
    tool = host_dir / "bin"
    tool.mkdir()
    script = tool / "report"
    script.write_text(
        f'#!/bin/sh\nexec curl -sS -m 10 -X "$1" --data-binary x http://{NAME}:{http_server.port}/r\n'
    )
    script.chmod(0o755)
    rules = tmp_path / "user-rules.toml"
    rules.write_text(REPORT_RULE)
    handle = start_daemon(
        tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace,
        "--allow-domain", NAME, "--allow-domain", "127.0.0.1", "--resolve", f"{NAME}=127.0.0.1",
        "--user-rules", str(rules), "--toolchain", str(tool),
    )  # fmt: skip
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def test_an_idempotent_call_that_posts_is_downgraded_and_not_replayed(
    report_daemon: Daemon, workspace: Path, http_server: Server
) -> None:
    with report_daemon.client() as client:
        first = client.run_command("report POST", cwd=workspace, run_id="r", step_id="s")
        assert first.ok, first.stderr.data
        assert first.idempotency is Idempotency.CONDITIONAL
        assert first.replay_policy is ReplayPolicy.ASK and "POST http://" in first.content
        entry = client.get_call(first.call_id)
        assert entry.unexpected_network
        (effect,) = entry.network_effects
        assert (effect.method, effect.path, effect.host) == ("POST", "/r", NAME)
        assert effect.bytes_sent > 0 and effect.bytes_received > 0
        again = client.run_command(
            "report POST", cwd=workspace, run_id="r", step_id="s", rerun=True
        )
        assert not again.ok and again.code is Code.CONFLICT
    assert http_server.seen == [("POST", "/r", b"x")]


def test_a_read_outside_the_verdicts_destinations_is_unexpected(
    report_daemon: Daemon, workspace: Path, http_server: Server
) -> None:
    # The tool's rule names no destination, so even a GET reaches one outside the verdict's.
    with report_daemon.client() as client:
        result = client.run_command("report GET", cwd=workspace)
        assert result.ok and result.idempotency is Idempotency.CONDITIONAL
        assert client.get_call(result.call_id).unexpected_network


def test_a_destination_off_the_allow_list_asks_and_approval_grants_it(
    tmp_path: Path, workspace: Path, http_server: Server
) -> None:
    # The operator names the address, not the name: the name needs a human's approval.
    handle = start_daemon(
        tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace,
        "--allow-domain", "127.0.0.1", "--deny-domain", "evil.test",
        "--resolve", f"{NAME}=127.0.0.1",
    )  # fmt: skip
    try:
        with handle.client() as client:
            url = f"http://{NAME}:{http_server.port}/ask"
            asked = client.run_command(f"curl -sS -m 10 {url}", cwd=workspace)
            assert asked.code is Code.NEEDS_APPROVAL and NAME in asked.content
            assert http_server.seen == []
            denied = client.run_command("curl -sS http://evil.test/", cwd=workspace)
            assert denied.code is Code.PERMISSION_DENIED and "evil.test" in denied.content
            address = client.run_command("curl -sS http://169.254.169.254/", cwd=workspace)
            assert address.code is Code.PERMISSION_DENIED and "169.254.169.254" in address.content
            client.approve(asked.call_id)
            wait_for(lambda: client.get_call(asked.call_id).status.is_final, timeout=60)
            entry = client.get_call(asked.call_id)
            assert entry.stdout.data == b"GET /ask ok\n", entry
        assert http_server.seen == [("GET", "/ask", b"")]
    finally:
        handle.stop()
