"""Real local servers for the egress tests: HTTP and HTTPS (a self-signed certificate for
``svc.test``) on 127.0.0.1, reachable from a sandbox only through the daemon's proxy."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import self_signed_certificate

NAME = "svc.test"


@dataclass
class Server:
    port: int
    # (method, path, body) of every request that reached the server.
    seen: list[tuple[str, str, bytes]] = field(default_factory=list)
    # The Host header of each.
    hosts: list[str] = field(default_factory=list)


def _handler(server: Server) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server.seen.append((self.command, self.path, body))
            server.hosts.append(self.headers.get("Host", ""))
            reply = f"{self.command} {self.path} ok\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply)

        do_GET = do_POST = do_HEAD = do_PUT = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def _serve(context: ssl.SSLContext | None) -> Iterator[Server]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    server = Server(httpd.server_address[1])
    httpd.RequestHandlerClass = _handler(server)
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for svc.test (and 127.0.0.1)."""
    return self_signed_certificate(tmp_path_factory.mktemp("tls"), NAME)


@pytest.fixture
def http_server() -> Iterator[Server]:
    yield from _serve(None)


@pytest.fixture
def https_server(certificate: tuple[Path, Path]) -> Iterator[Server]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, certificate))
    yield from _serve(context)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[object]]]:
    """A bare TCP listener on the host's loopback; the list fills with what connects."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[object] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept())
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    # shutdown wakes the blocked accept (close alone would leave it, and the port, held).
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(5)
    assert not thread.is_alive(), "the listener's accept thread did not end"
    for connection, _ in accepted:  # type: ignore[misc]
        connection.close()
