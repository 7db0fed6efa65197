"""`shellward mcp`: serve the daemon to an agent host as an MCP server (stdio or HTTP)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from ._base import EXIT_OK, Commands, absolute_cwd, subparser

MCP_EPILOG = """\
An agent host (Claude Code, Codex CLI, Gemini CLI, Cursor, VS Code, …) starts this
command and talks MCP to it on stdin/stdout; every tool call goes to the running daemon,
which classifies, sandboxes and records it. Tools: run_command, classify, recover, and
every tool `shellward tools` lists (read_file, list_files, write_file, apply_patch, the
business tools of the daemon's MCP servers). A daemon must be running: start one with
`make serve` or `shellwardd`. See docs/mcp-server.md for each host's configuration.

Identity: the run is --run-id, else the MCP session; a tool call's `step_id` argument
names the step, so a host (or model) retrying the same step gets the ledger's answer.

--http HOST:PORT serves streamable HTTP at http://HOST:PORT/mcp instead; every request
needs `Authorization: Bearer TOKEN` (TOKEN from SHELLWARD_MCP_TOKEN, else a new one is
printed to stderr). Only loopback addresses, unless --http-allow-remote.

examples:
  shellward mcp
  shellward mcp --run-id nightly-refactor --cwd ~/src/app
  SHELLWARD_MCP_TOKEN=s3cret shellward mcp --http 127.0.0.1:8765
"""

TOKEN_ENV = "SHELLWARD_MCP_TOKEN"


def cmd_mcp(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is heavy, and no other command needs it.
    from shellward.mcp_server import Settings, parse_listen, serve_http, serve_stdio

    from . import _version

    settings = Settings(
        socket=args.socket,
        address=args.address,
        token=args.token,
        cwd=absolute_cwd(args.cwd),
        run_id=args.run_id or None,
        version=_version(),
    )
    if args.http is None:
        serve_stdio(settings)
        return EXIT_OK
    host, port = parse_listen(args.http, allow_remote=args.http_allow_remote)
    token = os.environ.get(TOKEN_ENV) or ""
    if not token:
        token = secrets.token_urlsafe(32)
        print(
            f"shellward mcp: bearer token (set {TOKEN_ENV} to choose one): {token}", file=sys.stderr
        )
    print(f"shellward mcp: serving http://{args.http}/mcp", file=sys.stderr, flush=True)
    serve_http(settings, host, port, token)
    return EXIT_OK


def add(commands: Commands) -> None:
    mcp = subparser(
        commands, "mcp", cmd_mcp, "Serve the daemon to an agent host as an MCP server.", MCP_EPILOG
    )
    mcp.add_argument(
        "--cwd",
        metavar="DIR",
        help="where commands run and relative paths start (default: the current directory)",
    )
    mcp.add_argument(
        "--run-id",
        metavar="R",
        help="the ledger run of every call (default: one run per MCP session); give one to "
        "let a restarted host's retries be answered from the ledger",
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (bearer token)",
    )
    mcp.add_argument(
        "--http-allow-remote",
        action="store_true",
        help="allow --http on a non-loopback address (anyone reaching it with the token can "
        "run commands)",
    )
