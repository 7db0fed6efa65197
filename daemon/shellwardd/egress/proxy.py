"""The daemon's egress proxy: the only way out of a sandbox that has network.

Choices, and why:

- **One Unix socket per call.** Each call granted network gets its own listening socket in
  a fresh private directory, bound into its sandbox (:mod:`.relay` turns it into a TCP
  port inside). Whatever arrives on it belongs to that call: attribution needs no
  authentication, and the call's allow-list is the socket's.
- **The relay hands over the command's own socket** (``SCM_RIGHTS``): the proxy reads and
  writes it directly, no process copies in between. What it accepts so is one connected
  TCP socket; anything else a command could pass (a file, a Unix or UDP socket, a
  listener, several descriptors) ends that connection and is closed at once. A command
  that connects to the call's socket itself is served on it, as a client like any other.
- **HTTP CONNECT and plain HTTP forwarding** cover curl, pip, npm, git over HTTPS and
  Python's urllib through the ``*_PROXY`` variables; no SOCKS (nothing we support needs it).
  A plain HTTP request is forwarded with ``Connection: close``: one request per
  connection, so every request's method and path is seen and recorded. Only the request
  and its body (by ``Content-Length``) go to the server: bytes behind them, a second
  request pipelined on the connection, never do (refused if already read, left unread
  otherwise), and a chunked body, whose end the proxy cannot see without parsing it, is
  refused.
- **Resolve once, check, connect to what was checked.** The proxy resolves the name
  itself (the sandbox has no DNS), checks every address (:mod:`.policy`), and connects to
  the checked address: a second resolution could answer differently (DNS rebinding).
- **A small asyncio proxy, not a library.** The proxies on PyPI (proxy.py, mitmproxy)
  bring their own process model, plugins and TLS interception; we need a per-call socket,
  our own check between resolution and connect, and byte counts per connection, which is
  two hundred lines on asyncio's socket calls. One event loop in one daemon thread reads
  and checks every call's requests; once a connection is checked, :mod:`.tunnel` copies
  its bytes kernel to kernel in threads of its own. Plain sockets rather than asyncio
  streams: what the loop has read ahead is in the proxy's own buffer, so the hand-over
  loses nothing and no transport keeps reading behind the tunnel's back.
- **A tunnel's TLS server name must be its host** (or on the allow-list): the proxy reads
  the client's first record before forwarding it, so a ClientHello naming another site
  behind the same address (domain fronting) is refused.
- **Effects are recorded as connections end**, refusals at once, each at its place in
  the order the connections were accepted; the call's entry takes them after its process
  has exited and the proxy socket is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from shellward.types import NetworkEffect
from shellwardd.egress.policy import EgressPolicy, normal_host
from shellwardd.egress.tunnel import copy_both_ways
from shellwardd.metrics import count_proxy_error

log = logging.getLogger(__name__)


# Connections recorded one by one per call; the rest are summed in one more entry.
MAX_EFFECTS = 1000
_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT = 30.0
# How long a tunnel waits for the client's first bytes (its TLS ClientHello) before it
# assumes a protocol where the server speaks first.
_FIRST_WAIT = 0.5
_CONNECT_TIMEOUT = 30.0
_ACCEPT_PAUSE = 0.1
_CHUNK = 256 * 1024
# Hop-by-hop headers a forwarding proxy drops (RFC 9110 7.6.1), and the proxy's own.
_HOP_HEADERS = {
    "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
    "upgrade",
}  # fmt: skip


def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, eq=False)
class Resolver:
    """Names to addresses: the operator's pinned names first, an address stands for
    itself, anything else asks ``lookup`` (the host's resolver: DNS, which may block)."""

    pinned: Mapping[str, str]
    lookup: Callable[[str, int], list[str]] = _getaddrinfo

    def known(self, host: str) -> list[str] | None:
        """The answer that needs no lookup, or None: the proxy's event loop asks this
        first and sends only the rest to a worker thread (a hand-off that cost every
        connection to a pinned name or an address a tenth of a millisecond or more)."""
        if host in self.pinned:
            return [self.pinned[host]]
        try:
            # Written as an address: the same one the lookup would answer. A looser form
            # (127.1, 0x7f.1) is no address to ipaddress and goes to the lookup as before.
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            return None


def system_resolver(pinned: Mapping[str, str]) -> Resolver:
    """Resolve through the host's resolver, with the operator's pinned names first."""
    return Resolver(dict(pinned))


class CallEgress:
    """One call's socket and the effects recorded on it, in the order the connections
    were asked for (they end in any order: a long download outlives the requests after it)."""

    def __init__(self, directory: Path, policy: EgressPolicy) -> None:
        self.directory = directory
        self.socket_path = directory / "proxy.sock"
        self.policy = policy
        self._asked = itertools.count()
        self._effects: list[tuple[int, NetworkEffect]] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def ask(self) -> int:
        """A new connection's place in the order."""
        with self._lock:
            return next(self._asked)

    def record(self, effect: NetworkEffect, asked: int) -> None:
        """Record a connection's effect at its place (from :meth:`ask`)."""
        with self._lock:
            if len(self._effects) < MAX_EFFECTS:
                self._effects.append((asked, effect))
                return
            # Past the cap, one last entry sums the rest (its method is no read: fail closed).
            last = self._effects[-1][1] if len(self._effects) > MAX_EFFECTS else None
            self._effects[MAX_EFFECTS:] = [
                (sys.maxsize, NetworkEffect(
                    host="(further connections, summed)", port=0, method="*",
                    bytes_sent=effect.bytes_sent + (last.bytes_sent if last else 0),
                    bytes_received=effect.bytes_received + (last.bytes_received if last else 0),
                ))
            ]  # fmt: skip

    def effects(self) -> tuple[NetworkEffect, ...]:
        with self._lock:
            return tuple(effect for _, effect in sorted(self._effects, key=lambda e: e[0]))


class EgressProxy:
    """The event loop and the per-call sockets. ``owner``: the host uid that must be able
    to connect (a root daemon's sandbox uid); None for the daemon's own."""

    def __init__(self, resolver: Resolver, owner: int | None = None) -> None:
        self._resolve = resolver
        self._owner = owner
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="egress-proxy", daemon=True
        )
        self._thread.start()
        self._calls: set[CallEgress] = set()

    def open(self, policy: EgressPolicy) -> CallEgress:
        """A listening socket for one call, reachable by the sandbox's uid only."""
        directory = Path(tempfile.mkdtemp(prefix="shellward-egress-"))
        call = CallEgress(directory, policy)
        self._calls.add(call)
        try:
            future = asyncio.run_coroutine_threadsafe(self._listen(call), self._loop)
            future.result(timeout=10)
            if self._owner is not None:
                os.chown(call.socket_path, self._owner, self._owner)
                os.chown(directory, self._owner, self._owner)
        except BaseException:
            self.close_call(call)
            raise
        return call

    def close_call(self, call: CallEgress) -> None:
        """Stop accepting and drop what is still open; the effects stay readable."""
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            asyncio.run_coroutine_threadsafe(self._stop(call), self._loop).result(timeout=10)
        shutil.rmtree(call.directory, ignore_errors=True)
        self._calls.discard(call)

    def close(self) -> None:
        # A call still open loses its tunnels first: their threads end with them.
        for call in list(self._calls):
            self.close_call(call)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _listen(self, call: CallEgress) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(call.socket_path))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        call._listener = listener
        call._acceptor = self._loop.create_task(self._accept(call, listener))

    async def _accept(self, call: CallEgress, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = await self._loop.sock_accept(listener)
            except OSError:  # out of descriptors, say: the call keeps its socket, retry soon
                count_proxy_error("internal")
                log.exception("egress proxy cannot accept a connection")
                await asyncio.sleep(_ACCEPT_PAUSE)
                continue
            client.setblocking(False)
            task = self._loop.create_task(self._connection(call, client, call.ask()))
            call._connections.add(task)
            task.add_done_callback(call._connections.discard)

    async def _connection(self, call: CallEgress, conn: socket.socket, asked: int) -> None:
        client = conn
        try:
            try:
                client, first = await asyncio.wait_for(_client(self._loop, conn), _HEAD_TIMEOUT)
            except (_BadHead, TimeoutError):
                count_proxy_error("bad_request")
                return
            await self._serve(call, _Inbound(self._loop, client, first), asked)
        except Exception:  # a connection's fault never reaches the loop
            count_proxy_error("internal")
            log.exception("egress proxy connection failed")
        finally:
            client.close()
            conn.close()

    async def _stop(self, call: CallEgress) -> None:
        if call._acceptor is not None:
            call._acceptor.cancel()
        if call._listener is not None:
            call._listener.close()
        tasks = list(call._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, call: CallEgress, inbound: _Inbound, asked: int) -> None:
        try:
            head = await asyncio.wait_for(inbound.head(), _HEAD_TIMEOUT)
        except (_BadHead, TimeoutError):
            count_proxy_error("bad_request")
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            count_proxy_error("bad_request")
            await inbound.answer(400, "the proxy expects 'METHOD TARGET HTTP/1.1'")
            return
        method, target, _version = parts
        body: int | None = None  # a tunnel's client bytes are not counted out
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            path, rest, default_port = "", b"", 443
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                count_proxy_error("bad_request")
                await inbound.answer(
                    400, "plain HTTP through the proxy needs an absolute http:// URL; "
                    "use HTTPS (CONNECT) for anything else"
                )  # fmt: skip
                return
            try:
                host, port_text, default_port = url.hostname, str(url.port or ""), 80
            except ValueError:
                count_proxy_error("bad_request")
                await inbound.answer(400, f"{target!r} has a port that is not a number")
                return
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            authority = url.netloc.rpartition("@")[2]  # never forward user:password@
            rest = _forwarded_head(method, path, authority, lines[1:])
            body, problem = _body_length(lines[1:])
            if not problem and inbound.held() > body:
                problem = (
                    "one request per connection: a request sent behind another on the same "
                    "connection is not forwarded; send it on a new connection"
                )
            if problem:
                count_proxy_error("bad_request")
                await inbound.answer(400, problem)
                return
        host = normal_host(host)
        port = int(port_text) if port_text.isdigit() else default_port
        if not host or not 0 < port < 65536:
            count_proxy_error("bad_request")
            await inbound.answer(400, f"{target!r} names no host and port")
            return
        effect = NetworkEffect(host=host, port=port, method=method, path=path)
        upstream, address, refusal = await self._connect(call.policy, host, port)
        if upstream is None:
            call.record(replace(effect, address=address, refused=refusal), asked)
            await inbound.answer(403, f"shellward refused {host}:{port}: {refusal}")
            return
        counts = [0, 0]
        refused = ""
        try:
            if method == "CONNECT":
                await inbound.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                name = normal_host(server_name(await inbound.first_bytes()))
                if name and name != host and call.policy.refuse_name(name):
                    # Another site behind the same address (domain fronting): not the host
                    # the allow-list let through.
                    refused = f"the TLS server name {name} is not the tunnel's host {host}"
                    return
            # Checked: from here on the bytes are copied blind, the held ones first.
            held = inbound.take()
            limit = None if body is None else body - len(held)
            await copy_both_ways(inbound.sock, upstream, rest + held, counts, limit)
        finally:
            # Also when the call ends mid-transfer: what was sent so far is an effect.
            upstream.close()
            sent, received = counts
            call.record(
                replace(effect, address=address, bytes_sent=sent, bytes_received=received,
                        refused=refused),
                asked,
            )  # fmt: skip

    async def _connect(
        self, policy: EgressPolicy, host: str, port: int
    ) -> tuple[socket.socket | None, str, str]:
        """(socket, address, "") or (None, address or "", why refused)."""
        refusal = policy.refuse_name(host)
        if refusal:
            return None, "", refusal
        addresses = self._resolve.known(host)
        if addresses is None:
            try:
                lookup = self._resolve.lookup
                addresses = await self._loop.run_in_executor(None, lookup, host, port)
            except OSError as exc:
                count_proxy_error("resolve")
                return None, "", f"{host} does not resolve ({exc})"
        if not addresses:
            return None, "", f"{host} does not resolve"
        # Every address must pass: a name with one loopback answer is a loopback name.
        for address in addresses:
            refusal = policy.refuse_address(host, address, port)
            if refusal:
                return None, address, refusal
        last = ""
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.setblocking(False)
                # No Nagle: a handshake's small writes must not wait for delayed ACKs.
                upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await asyncio.wait_for(
                    self._loop.sock_connect(upstream, (address, port)), _CONNECT_TIMEOUT
                )
                return upstream, address, ""
            except (OSError, TimeoutError) as exc:
                upstream.close()
                last = str(exc) or type(exc).__name__
            except BaseException:
                upstream.close()
                raise
        count_proxy_error("connect")
        return None, addresses[-1], f"cannot connect to {host}:{port}: {last}"


class _BadHead(Exception):
    """The client closed, or sent more than a request head may hold, before its end (or
    passed something that is not a connected TCP socket)."""


async def _client(
    loop: asyncio.AbstractEventLoop, conn: socket.socket
) -> tuple[socket.socket, bytes]:
    """Who the proxy talks to on a connection to the call's socket, and its first bytes.

    The sandbox's relay passes the TCP socket it accepted (``SCM_RIGHTS``, one byte beside
    it): that socket is the client, and the Unix connection has served its purpose. A
    command that connects to the call's socket itself is its own client. Anything passed
    that is not one connected TCP socket (a file, a Unix or UDP socket, a listener, more
    than one descriptor) ends the connection: the proxy only ever speaks HTTP to a peer."""
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(conn, _HEAD_LIMIT, 1, socket.MSG_CMSG_CLOEXEC)
            break
        except (BlockingIOError, InterruptedError):
            await _readable(loop, conn)
    if flags & socket.MSG_CTRUNC:  # more descriptors than one: the kernel dropped the rest
        for fd in fds:
            os.close(fd)
        raise _BadHead
    if not fds:
        if not data:
            raise _BadHead
        return conn, data
    try:
        passed = socket.socket(fileno=fds[0])
    except OSError:  # not a socket
        os.close(fds[0])
        raise _BadHead from None
    try:
        if passed.family not in (socket.AF_INET, socket.AF_INET6):
            raise _BadHead
        if passed.type != socket.SOCK_STREAM:
            raise _BadHead
        passed.getpeername()  # connected, not a listener
        passed.setblocking(False)
    except (OSError, _BadHead):
        passed.close()
        raise _BadHead from None
    return passed, b""


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


class _Inbound:
    """A client's socket and what the proxy has read from it but not passed on yet."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, held: bytes) -> None:
        self._loop = loop
        self.sock = sock
        self._held = bytearray(held)

    async def head(self) -> bytes:
        """The request head, up to and with its empty line; what follows stays held."""
        while (end := self._held.find(b"\r\n\r\n")) < 0:
            if len(self._held) >= _HEAD_LIMIT or not await self._fill(_HEAD_LIMIT):
                raise _BadHead
        if end + 4 > _HEAD_LIMIT:
            raise _BadHead
        head = bytes(self._held[: end + 4])
        del self._held[: end + 4]
        return head

    async def first_bytes(self) -> bytes:
        """What the client sends first in a tunnel, a whole TLS record if it starts one. A
        protocol where the server speaks first gets nothing within a moment, and goes on.
        The bytes stay held (see :meth:`take`)."""
        if not self._held:
            try:
                await asyncio.wait_for(self._fill(_CHUNK), _FIRST_WAIT)
            except TimeoutError:
                return b""
        if len(self._held) >= 5 and self._held[0] == 0x16:
            need = 5 + int.from_bytes(self._held[3:5], "big")
            while len(self._held) < need:
                if not await asyncio.wait_for(self._fill(need - len(self._held)), _HEAD_TIMEOUT):
                    break
        return bytes(self._held)

    def held(self) -> int:
        """How many bytes are held."""
        return len(self._held)

    def take(self) -> bytes:
        """Everything held, for the tunnel to send first."""
        held = bytes(self._held)
        self._held.clear()
        return held

    async def send(self, data: bytes) -> None:
        await self._loop.sock_sendall(self.sock, data)

    async def answer(self, status: int, sentence: str) -> None:
        reason = {400: "Bad Request", 403: "Forbidden"}[status]
        body = (sentence + "\n").encode()
        with contextlib.suppress(OSError):
            await self.send(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )

    async def _fill(self, size: int) -> bool:
        """Read more; False at the client's end of stream."""
        data = await self._loop.sock_recv(self.sock, size)
        self._held += data
        return bool(data)


def _forwarded_head(method: str, path: str, authority: str, headers: list[str]) -> bytes:
    """The request as the origin server sees it: origin-form, no hop-by-hop headers,
    ``Connection: close`` (one request per connection, so each one is seen), and the
    checked host as ``Host``: a different one would reach another site behind the same
    address (a CDN's), which the allow-list never named."""
    dropped = _HOP_HEADERS | {"host"}
    kept = [h for h in headers if h and h.split(":", 1)[0].strip().lower() not in dropped]
    lines = [f"{method} {path} HTTP/1.1", f"Host: {authority}", *kept, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _body_length(headers: list[str]) -> tuple[int, str]:
    """The request body's length from its head, and "" or why it cannot be forwarded.

    Only a body whose end the proxy knows is forwarded: what follows it on the connection
    would reach the server unchecked and unrecorded (a second request, for another host).
    So ``Transfer-Encoding`` (chunked: its end is inside the stream) is refused, and so are
    several lengths that differ (request smuggling)."""
    lengths: set[str] = set()
    for line in headers:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "transfer-encoding":
            return 0, (
                "the proxy forwards a plain HTTP body only with a Content-Length, not "
                "Transfer-Encoding (chunked); send the length, or use HTTPS"
            )
        if name == "content-length":
            lengths |= {part.strip() for part in value.split(",")}
    if not lengths:
        return 0, ""
    if len(lengths) > 1 or not all(length.isdigit() for length in lengths):
        return 0, f"the Content-Length {', '.join(sorted(lengths))!r} is not one number"
    return int(lengths.pop()), ""


def server_name(record: bytes) -> str:
    """The SNI of a TLS ClientHello record ("" if it is none, or names none)."""
    try:
        if record[0] != 0x16 or record[5] != 0x01:
            return ""
        at = 5 + 4 + 2 + 32  # record header, handshake header, version, random
        at += 1 + record[at]  # session id
        at += 2 + int.from_bytes(record[at : at + 2], "big")  # cipher suites
        at += 1 + record[at]  # compression methods
        end = at + 2 + int.from_bytes(record[at : at + 2], "big")
        at += 2
        while at + 4 <= end:
            kind = int.from_bytes(record[at : at + 2], "big")
            size = int.from_bytes(record[at + 2 : at + 4], "big")
            if kind == 0:  # server_name: list length, type 0 (host name), length, name
                length = int.from_bytes(record[at + 7 : at + 9], "big")
                return record[at + 9 : at + 9 + length].decode("ascii", "replace")
            at += 4 + size
    except IndexError:
        return ""
    return ""
