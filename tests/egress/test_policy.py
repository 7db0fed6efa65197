"""The allow-list on its own: names, then resolved addresses."""

from __future__ import annotations

import pytest

from shellwardd.egress.policy import EgressPolicy, check_entry


def test_a_name_must_be_listed_and_denial_wins() -> None:
    policy = EgressPolicy(
        domains=frozenset({"pypi.org"}),
        operator=frozenset({"*.example.com"}),
        denied=frozenset({"bad.example.com"}),
    )
    assert policy.refuse_name("pypi.org") == ""
    assert policy.refuse_name("PyPI.org.") == ""
    assert policy.refuse_name("api.example.com") == ""
    assert "not on this call's allow-list" in policy.refuse_name("example.com")
    assert "not on this call's allow-list" in policy.refuse_name("evilpypi.org")
    assert "not on this call's allow-list" in policy.refuse_name("pypi.org.evil.net")
    assert "denied by the operator" in policy.refuse_name("bad.example.com")


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.1.2.3", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("0.0.0.0", "reserved"),
    ],
)
def test_special_addresses_are_refused_after_resolution(address: str, kind: str) -> None:
    policy = EgressPolicy(domains=frozenset({"pypi.org"}))
    refusal = policy.refuse_address("pypi.org", address, 443)
    assert f"a {kind} address" in refusal or (kind == "reserved" and refusal)
    assert policy.refuse_address("pypi.org", "151.101.0.223", 443) == ""


def test_only_the_operator_names_special_addresses() -> None:
    rules = EgressPolicy(domains=frozenset({"127.0.0.1", "svc.test"}))
    assert "only an operator's --allow-domain" in rules.refuse_name("127.0.0.1")
    assert rules.refuse_address("svc.test", "127.0.0.1", 80)
    operator = EgressPolicy(operator=frozenset({"svc.test", "127.0.0.1", "10.0.0.0/8"}))
    assert operator.refuse_name("127.0.0.1") == ""
    assert operator.refuse_address("svc.test", "127.0.0.1", 80) == ""
    assert operator.refuse_address("svc.test", "10.9.8.7", 80) == ""
    assert operator.refuse_address("svc.test", "127.0.0.2", 80)
    assert operator.refuse_address("svc.test", "192.168.0.1", 80)


def test_the_daemons_own_port_is_never_reachable() -> None:
    policy = EgressPolicy(
        operator=frozenset({"127.0.0.0/8", "localhost"}),
        daemon_ports=frozenset({("127.0.0.1", 7433)}),
    )
    assert policy.refuse_address("localhost", "127.0.0.1", 8080) == ""
    assert "daemon's own port" in policy.refuse_address("localhost", "127.0.0.1", 7433)
    assert "daemon's own port" in policy.refuse_address("localhost", "127.0.0.9", 7433)


def test_entries_are_checked() -> None:
    assert check_entry("Example.COM.") == "example.com"
    assert check_entry("10.0.0.0/8") == "10.0.0.0/8"
    for bad in ("", "exa mple.com", "a..b", "http://x.com"):
        with pytest.raises(ValueError, match="neither a domain"):
            check_entry(bad)
