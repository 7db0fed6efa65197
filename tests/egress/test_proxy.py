"""A sandbox with network: its own namespace, the daemon's proxy as the only way out.

Real bwrap, real local servers on the host's 127.0.0.1 (made reachable through an operator
allow-list entry and a pinned name, never the internet)."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward.types import NetworkEffect
from shellwardd.config import Limits
from shellwardd.egress.policy import EgressPolicy
from shellwardd.egress.proxy import MAX_EFFECTS, CallEgress, system_resolver
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec
from tests.egress.conftest import NAME, Server

# The operator names the test's servers: the name and, explicitly, the loopback address.
OPERATOR = EgressPolicy(operator=frozenset({NAME, "127.0.0.1"}))


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(state_dir=Path(tempfile.mkdtemp()), resolver=system_resolver({NAME: "127.0.0.1"}))
    box.check()
    yield box
    box.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    tmp_path.chmod(0o777)
    return tmp_path


def run(
    sandbox: Sandbox, workspace: Path, command: str, network: EgressPolicy | None
) -> ProcessOutcome:
    spec = SandboxSpec(command, workspace, workspace, {}, network, 30.0, Limits(), 1 << 20)
    return sandbox.run(spec, lambda chunk: None, threading.Event())


def _trust(workspace: Path, cert: Path) -> Path:
    """The certificate where the sandbox sees it (its /tmp is its own)."""
    inside = workspace / "cert.pem"
    inside.write_bytes(cert.read_bytes())
    return inside


def test_allowed_http_is_forwarded_and_recorded(
    sandbox: Sandbox, workspace: Path, http_server: Server
) -> None:
    url = f"http://{NAME}:{http_server.port}"
    command = f"curl -sS -m 10 {url}/a?b=1 && curl -sS -m 10 -X POST --data-binary hello {url}/pay"
    outcome = run(sandbox, workspace, command, OPERATOR)
    assert outcome.exit_code == 0, outcome.stderr.data
    assert outcome.stdout.data == b"GET /a?b=1 ok\nPOST /pay ok\n"
    assert http_server.seen == [("GET", "/a?b=1", b""), ("POST", "/pay", b"hello")]
    get, post = outcome.network_effects
    assert (get.host, get.port, get.address, get.method, get.path) == (
        NAME,
        http_server.port,
        "127.0.0.1",
        "GET",
        "/a?b=1",
    )
    assert (post.method, post.path, post.refused) == ("POST", "/pay", "")
    assert post.bytes_sent > get.bytes_sent > 0 and get.bytes_received > len(b"GET /a?b=1 ok\n")


def test_https_goes_through_connect(
    sandbox: Sandbox, workspace: Path, https_server: Server, certificate: tuple[Path, Path]
) -> None:
    cert = _trust(workspace, certificate[0])
    command = f"curl -sS -m 10 --cacert {cert} https://{NAME}:{https_server.port}/secure"
    outcome = run(sandbox, workspace, command, OPERATOR)
    assert outcome.exit_code == 0, outcome.stderr.data
    assert outcome.stdout.data == b"GET /secure ok\n"
    (effect,) = outcome.network_effects
    assert (effect.method, effect.host, effect.address) == ("CONNECT", NAME, "127.0.0.1")
    assert effect.bytes_sent > 0 and effect.bytes_received > 0 and not effect.refused


def test_python_urllib_uses_the_proxy(
    sandbox: Sandbox, workspace: Path, http_server: Server
) -> None:
    code = f"import urllib.request as u; print(u.urlopen('http://{NAME}:{http_server.port}/py').read())"
    outcome = run(sandbox, workspace, f'python3 -c "{code}"', OPERATOR)
    assert outcome.exit_code == 0, outcome.stderr.data
    assert http_server.seen == [("GET", "/py", b"")]


def test_a_name_not_on_the_allow_list_is_refused(
    sandbox: Sandbox, workspace: Path, http_server: Server
) -> None:
    policy = EgressPolicy(operator=frozenset({"other.test", "127.0.0.1"}))
    outcome = run(sandbox, workspace, f"curl -sS -m 10 http://{NAME}:{http_server.port}/", policy)
    assert b"not on this call's allow-list" in outcome.stdout.data
    assert http_server.seen == []
    (effect,) = outcome.network_effects
    assert effect.host == NAME and "allow-list" in effect.refused and effect.bytes_sent == 0


def test_a_name_resolving_to_loopback_is_loopback(
    sandbox: Sandbox, workspace: Path, https_server: Server, certificate: tuple[Path, Path]
) -> None:
    # The name is allowed; its address is not named by the operator.
    policy = EgressPolicy(operator=frozenset({NAME}))
    command = f"curl -sS -m 10 --cacert {_trust(workspace, certificate[0])} https://{NAME}:{https_server.port}/"
    outcome = run(sandbox, workspace, command, policy)
    assert outcome.exit_code != 0 and https_server.seen == []
    (effect,) = outcome.network_effects
    assert "loopback" in effect.refused and effect.address == "127.0.0.1"


def test_loopback_is_refused_by_default(
    sandbox: Sandbox, workspace: Path, http_server: Server
) -> None:
    policy = EgressPolicy(domains=frozenset({NAME, "localhost"}))
    # NO_PROXY keeps curl on the sandbox's own loopback; a hostile command asks the proxy.
    curl = "curl -sS -m 10 --noproxy ''"
    command = (
        f"{curl} http://127.0.0.1:{http_server.port}/ ; "
        f"{curl} http://localhost:{http_server.port}/ ; "
        f"{curl} http://169.254.169.254/latest/meta-data/"
    )
    outcome = run(sandbox, workspace, command, policy)
    assert http_server.seen == []
    assert [bool(e.refused) for e in outcome.network_effects] == [True, True, True]
    assert "only an operator's" in outcome.network_effects[0].refused
    assert "loopback" in outcome.network_effects[1].refused


def _connect_directly(port: int) -> str:
    """A command that prints "connected" if bash or Python reaches the host's 127.0.0.1:port
    without the proxy."""
    return (
        f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; "
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)' "
        "&& echo connected"
    )


def test_without_network_nothing_is_reachable(
    sandbox: Sandbox, workspace: Path, listener: tuple[int, list[object]]
) -> None:
    port, accepted = listener
    command = (
        _connect_directly(port)
        + "; test -e /dev/shellward-egress.sock && echo socket; env | grep -i proxy"
    )
    outcome = run(sandbox, workspace, command, None)
    assert b"connected" not in outcome.stdout.data and b"socket" not in outcome.stdout.data
    assert b"proxy" not in outcome.stdout.data.lower()
    assert accepted == [] and outcome.network_effects == ()


def test_with_network_only_the_proxy_leads_out(
    sandbox: Sandbox, workspace: Path, listener: tuple[int, list[object]]
) -> None:
    # Even with the operator naming loopback, a direct socket reaches the sandbox's own
    # loopback, not the host's: the namespace is the call's own.
    port, accepted = listener
    command = _connect_directly(port)
    outcome = run(sandbox, workspace, command, OPERATOR)
    assert b"connected" not in outcome.stdout.data
    assert accepted == []


def test_every_client_is_pointed_at_the_relay(sandbox: Sandbox, workspace: Path) -> None:
    names = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
    command = "test -S /dev/shellward-egress.sock && echo " + " ".join(
        f"${name} ${name.lower()}" for name in names
    )
    outcome = run(sandbox, workspace, command, OPERATOR)
    assert outcome.stdout.data.split() == [b"http://127.0.0.1:3128"] * 6


def test_a_rules_destination_needs_no_operator_entry_for_its_name(
    sandbox: Sandbox, workspace: Path, http_server: Server
) -> None:
    # The rule names the domain; only the (loopback) address needs the operator's word.
    policy = EgressPolicy(domains=frozenset({NAME}), operator=frozenset({"127.0.0.1"}))
    outcome = run(sandbox, workspace, f"curl -sS -m 10 http://{NAME}:{http_server.port}/r", policy)
    assert outcome.stdout.data == b"GET /r ok\n"
    other = run(sandbox, workspace, f"curl -sS -m 10 http://other.test:{http_server.port}/", policy)
    assert b"not on this call's allow-list" in other.stdout.data


def test_the_host_header_is_the_checked_host(
    sandbox: Sandbox, workspace: Path, http_server: Server
) -> None:
    # A Host header naming another site would reach it behind the same (allowed) address.
    command = f"curl -sS -m 10 -H 'Host: evil.example' http://{NAME}:{http_server.port}/h"
    outcome = run(sandbox, workspace, command, OPERATOR)
    assert outcome.exit_code == 0 and http_server.seen == [("GET", "/h", b"")]
    assert http_server.hosts == [f"{NAME}:{http_server.port}"]


def test_effects_past_the_cap_are_summed() -> None:
    call = CallEgress(Path("/nonexistent"), OPERATOR)
    for n in range(MAX_EFFECTS + 5):
        call.record(NetworkEffect(f"h{n}.test", 80, "203.0.113.7", "GET", "/", 10, 100), call.ask())
    effects = call.effects()
    assert len(effects) == MAX_EFFECTS + 1
    assert effects[-1].method == "*" and effects[-1].bytes_sent == 50
    assert effects[-1].bytes_received == 500


FRONTED = """
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT svc.test:{port} HTTP/1.1\\r\\n\\r\\n")
s.recv(1000)
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
tls = context.wrap_socket(s, server_hostname="{name}")
tls.sendall(b"GET /fronted HTTP/1.1\\r\\nHost: {name}\\r\\nConnection: close\\r\\n\\r\\n")
print(tls.recv(1000)[:15])
"""


def test_a_tunnel_to_an_allowed_host_cannot_name_another_in_tls(
    sandbox: Sandbox, workspace: Path, https_server: Server
) -> None:
    # Domain fronting: CONNECT to an allowed host, then ask its server for another site.
    for name, reached in (("evil.example", False), (NAME, True)):
        (workspace / "front.py").write_text(FRONTED.format(port=https_server.port, name=name))
        outcome = run(sandbox, workspace, "python3 front.py", OPERATOR)
        (effect,) = outcome.network_effects
        assert (b"HTTP/1.0 200" in outcome.stdout.data) is reached, outcome.stderr.data
        if not reached:
            assert "TLS server name evil.example" in effect.refused and effect.bytes_sent == 0
    assert https_server.seen == [("GET", "/fronted", b"")]
