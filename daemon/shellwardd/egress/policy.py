"""Which destinations a call's network traffic may reach: pure, no I/O.

Choices, and why:

- **Names first, then addresses.** A destination must be named by the call's allow-list
  (the rules' destinations and the operator's ``--allow-domain`` entries, less the
  operator's ``--deny-domain`` entries), and every address its name resolves to must be
  public. A name resolving to 127.0.0.1 is loopback, whatever it is called.
- **Special addresses only by the operator's word.** Loopback, link-local (the cloud
  metadata address 169.254.169.254), private ranges (RFC 1918, ULA, CGNAT 100.64/10) and
  every other non-global range are refused unless an operator entry names the address or
  its network (``--allow-domain 127.0.0.1``, ``--allow-domain 10.0.0.0/8``). Rules and
  repositories can never name them.
- **The daemon's own TCP port is never a destination**, whatever the operator allowed.
- **Domain entries**: ``example.com`` is that name only; ``*.example.com`` its subdomains
  (not itself); matching ignores case and one trailing dot.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Not in Python's "non-global" tables on every version: CGNAT is shared, not private.
_SHARED = ipaddress.ip_network("100.64.0.0/10")


def normal_host(host: str) -> str:
    """A host as entries and requests are compared: lower case, no trailing dot or brackets."""
    return host.strip().strip("[]").rstrip(".").lower()


# Asked for every entry of a call's list on every connection; a name is the slow answer
# (ipaddress raises, twice), tens of microseconds each.
@functools.lru_cache(maxsize=4096)
def as_network(entry: str) -> Network | None:
    """An entry that names an address or a network, else None (a domain)."""
    try:
        return ipaddress.ip_network(normal_host(entry), strict=False)
    except ValueError:
        return None


def check_entry(entry: str) -> str:
    """The entry normalised; ValueError with a sentence if it is neither domain nor address."""
    host = normal_host(entry)
    if as_network(host) is not None:
        return host
    name = host[2:] if host.startswith("*.") else host
    labels = name.split(".")
    if not name or any(
        not label or len(label) > 63 or not all(c.isalnum() or c in "-_" for c in label)
        for label in labels
    ):
        raise ValueError(
            f"{entry!r} is neither a domain (example.com, *.example.com) nor an address or "
            "network (203.0.113.7, 10.0.0.0/8)"
        )
    return host


def url_host(text: str) -> str:
    """The host of a URL argument (``https://h/x``, or ``h.example/x`` as curl reads it);
    "" when it names none."""
    if text.startswith("-"):
        return ""
    url = urlsplit(text if "://" in text else f"http://{text}")
    try:
        host = url.hostname or ""
    except ValueError:
        return ""
    return host if ("://" in text or "." in host) and url.scheme in _WEB else ""


_WEB = frozenset({"http", "https", "ftp", "ftps", "ws", "wss"})


def _matches(host: str, entry: str) -> bool:
    if entry.startswith("*."):
        return host.endswith(entry[1:])
    return host == entry


def allowed(host: str, entries: Iterable[str]) -> bool:
    """Does one of the domain ``entries`` name ``host``?"""
    host = normal_host(host)
    return any(_matches(host, normal_host(entry)) for entry in entries)


@dataclass(frozen=True)
class EgressPolicy:
    """The allow-list of one call. ``domains`` come from rules and the operator;
    ``operator`` is the operator's own allow entries (the only ones that may name special
    addresses); ``denied`` always wins."""

    domains: frozenset[str] = frozenset()
    operator: frozenset[str] = frozenset()
    denied: frozenset[str] = frozenset()
    # The daemon's own TCP listener, as (address, port) pairs: never reachable.
    daemon_ports: frozenset[tuple[str, int]] = frozenset()

    def with_domains(self, extra: Iterable[str]) -> EgressPolicy:
        return EgressPolicy(
            self.domains | {normal_host(d) for d in extra},
            self.operator,
            self.denied,
            self.daemon_ports,
        )

    @property
    def allows_anything(self) -> bool:
        return bool((self.domains | self.operator) - self.denied)

    def denies(self, host: str) -> bool:
        """Does an operator's --deny-domain entry name ``host``?"""
        host = normal_host(host)
        return any(_matches(host, d) for d in self.denied if as_network(d) is None)

    def refuse_name(self, host: str) -> str:
        """Why ``host`` may not be contacted, or "" if its name is allowed."""
        host = normal_host(host)
        if self.denies(host):
            return f"{host} is denied by the operator (--deny-domain)"
        if as_network(host) is not None:
            if self._operator_network(host):
                return ""
            return f"{host} is an address; only an operator's --allow-domain entry may name one"
        if any(_matches(host, d) for d in self.domains | self.operator):
            return ""
        return f"{host} is not on this call's allow-list"

    def refuse_address(self, host: str, address: str, port: int) -> str:
        """Why the resolved ``address`` of ``host`` may not be contacted, or ""."""
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        own = [listener for listener, own_port in self.daemon_ports if own_port == port]
        if own and (not ip.is_global or str(ip) in own):
            return f"{host} ({ip}) port {port} is the daemon's own port"
        for entry in self.denied:
            network = as_network(entry)
            if network is not None and ip in network:
                return f"{host} resolves to {ip}, denied by the operator (--deny-domain)"
        if ip.is_global and ip not in _SHARED and not ip.is_multicast:
            return ""
        if self._operator_network(str(ip)):
            return ""
        return (
            f"{host} resolves to {ip}, a {_kind(ip)} address: refused unless the operator "
            f"names it (--allow-domain {ip})"
        )

    def _operator_network(self, host: str) -> bool:
        """Does an operator allow entry name this address or a network holding it?"""
        wanted = as_network(host)
        if wanted is None:
            return False
        for entry in self.operator - self.denied:
            network = as_network(entry)
            same_family = network is not None and network.version == wanted.version
            if same_family and wanted.subnet_of(network):  # type: ignore[arg-type]
                return True
        return False


def _kind(ip: Address) -> str:
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip in _SHARED:
        return "shared (CGNAT)"
    if ip.is_private:
        return "private"
    if ip.is_multicast:
        return "multicast"
    return "reserved"
