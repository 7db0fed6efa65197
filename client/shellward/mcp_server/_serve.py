"""Serving the MCP handlers: stdio (what hosts start), or streamable HTTP on loopback.

Choices, and why:
- Before serving, one GetStatus: a host that starts ``shellward mcp`` without a daemon gets
  a failed start with the reason on stderr (which hosts show), not a server whose every
  call fails.
- HTTP requires a bearer token on every request (compared in constant time) and binds to
  loopback unless the operator says ``allow_remote``: whoever reaches the port can run
  commands in the workspace. The SDK's DNS-rebinding protection stays on for loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

from shellward._exceptions import InvalidRequest

from ._server import Settings, ShellwardMcp

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _check_daemon(front: ShellwardMcp) -> None:
    """Raises DaemonUnavailable (with how to start one) when no daemon answers."""
    await front.client.status()


def serve_stdio(settings: Settings) -> None:
    async def main() -> None:
        front = ShellwardMcp(settings)
        try:
            await _check_daemon(front)
            server = front.server()
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await front.close()

    anyio.run(main)


def parse_listen(text: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); refuses a non-loopback host unless allowed."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise InvalidRequest(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765; got {text!r}")
    if not allow_remote and not _loopback(host):
        raise InvalidRequest(
            f"--http {text}: {host} is not a loopback address, and anyone who reaches it could "
            "run commands in your workspace. Use 127.0.0.1, or add --http-allow-remote if "
            "you mean it (the bearer token is then all that protects it)."
        )
    return host, int(port_text)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_guard(app: Asgi, token: str) -> Asgi:
    """Answer 401 to an HTTP request without ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b'Bearer realm="shellward"'),
                        ],
                    }
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"shellward mcp: send the token given to `shellward mcp --http` "
                        b"as `Authorization: Bearer TOKEN`\n",
                    }
                )
                return
        await app(scope, receive, send)

    return guarded


def serve_http(settings: Settings, host: str, port: int, token: str) -> None:
    import uvicorn

    async def main() -> None:
        front = ShellwardMcp(settings)
        try:
            await _check_daemon(front)
            app = front.server().streamable_http_app(host=host)
            config = uvicorn.Config(
                bearer_guard(app, token), host=host, port=port, log_level="warning"
            )
            await uvicorn.Server(config).serve()
        finally:
            await front.close()

    anyio.run(main)
