"""shellward as an MCP server (``shellward mcp``): the daemon's sandboxed commands, file tools
and business tools for any agent host, through the official ``mcp`` SDK and this package's
own :class:`shellward.AsyncClient`. See docs/mcp-server.md."""

from shellward.mcp_server._serve import bearer_guard, parse_listen, serve_http, serve_stdio
from shellward.mcp_server._server import Settings, ShellwardMcp

__all__ = ["Settings", "ShellwardMcp", "bearer_guard", "parse_listen", "serve_http", "serve_stdio"]
