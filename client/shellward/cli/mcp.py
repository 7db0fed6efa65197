"""`shellward mcp`: serve the daemon to an agent host as an MCP server (stdio or HTTP)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from shellward._version import package_version

from . import _hostconfig as install
from ._base import EXIT_OK, Commands, absolute_cwd, subparser

MCP_EPILOG = """\
An agent host (Claude Code, Codex CLI, Gemini CLI, Cursor, VS Code, …) starts this
command and talks MCP to it on stdin/stdout; every tool call goes to the running daemon,
which classifies, sandboxes and records it. Tools: run_command, classify, recover, and
every tool `shellward tools` lists (read_file, list_files, write_file, apply_patch, the
business tools of the daemon's MCP servers). A daemon must be running: start one with
`make serve WORKSPACE=DIR` or `shellwardd`. See docs/mcp-server.md for each host's configuration.

Identity: the run is --run-id, else the MCP session; a tool call's `step_id` argument
names the step, so a host (or model) retrying the same step gets the ledger's answer.

--http HOST:PORT serves streamable HTTP at http://HOST:PORT/mcp instead; every request
needs `Authorization: Bearer TOKEN` (TOKEN from SHELLWARD_MCP_TOKEN, else a new one is
printed to stderr). Only loopback addresses, unless --http-allow-remote.

`shellward mcp install --client HOST` writes the entry that makes a host start this
command into the host's configuration file (see `shellward mcp install --help`).

examples:
  shellward mcp
  shellward mcp --run-id nightly-refactor --cwd ~/src/app
  SHELLWARD_MCP_TOKEN=s3cret shellward mcp --http 127.0.0.1:8765
  shellward mcp install --client claude-code --dry-run
"""

INSTALL_EPILOG = """Adds (or updates) a server named `shellward` that runs this interpreter's
`python -m shellward.cli mcp`, with the --socket given here if any. A second run changes
nothing. Files:
  claude-code  project: .mcp.json               user: ~/.claude.json
  cursor       project: .cursor/mcp.json        user: ~/.cursor/mcp.json
  gemini       project: .gemini/settings.json   user: ~/.gemini/settings.json
  vscode       project: .vscode/mcp.json
  codex                                         user: ~/.codex/config.toml
A file that does not parse, or a different codex entry, is left alone with a message.

examples:
  shellward mcp install --client claude-code
  shellward mcp install --client codex --dry-run
  shellward --socket /run/shellward.sock mcp install --client cursor --scope user
"""

TOKEN_ENV = "SHELLWARD_MCP_TOKEN"


def cmd_mcp(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is heavy, and no other command needs it.
    from shellward.mcp_server import Settings, parse_listen, serve_http, serve_stdio

    settings = Settings(
        socket=args.socket,
        address=args.address,
        token=args.token,
        cwd=absolute_cwd(args.cwd),
        run_id=args.run_id or None,
        version=package_version(),
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


def cmd_install(args: argparse.Namespace) -> int:
    scope = args.scope or ("user" if install.HOSTS[args.client].project is None else "project")
    path = install.config_path(
        args.client, scope, project=Path(absolute_cwd(args.cwd)), home=Path.home()
    )
    server_args = [
        "-m",
        "shellward.cli",
        *(["--socket", os.path.abspath(args.socket)] if args.socket else []),
    ]
    change = install.plan(args.client, path, sys.executable, [*server_args, "mcp"])
    if not change.changed:
        print(f"{path}: shellward is already configured; nothing to change")
    elif args.dry_run:
        print(change.diff(), end="")
        print(f"(dry run: {path} not written)", file=sys.stderr)
    else:
        install.write(change)
        print(f"{path}: shellward added for {args.client}; restart the host to use it")
    return EXIT_OK


def add(commands: Commands) -> None:
    mcp = subparser(
        commands, "mcp", cmd_mcp, "Serve the daemon to an agent host as an MCP server.", MCP_EPILOG
    )
    actions = mcp.add_subparsers(title="more", metavar="install", required=False)
    setup = subparser(
        actions,
        "install",
        cmd_install,
        "Write the entry that starts `shellward mcp` into an agent host's configuration.",
        INSTALL_EPILOG,
    )
    setup.add_argument("--client", required=True, choices=sorted(install.HOSTS), help="the host")
    setup.add_argument(
        "--scope",
        choices=("project", "user"),
        help="this project's file or your user file (default: project where the host has one)",
    )
    setup.add_argument("--dry-run", action="store_true", help="print the change, write nothing")
    setup.add_argument("--cwd", metavar="DIR", help="the project root (default: here)")
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
