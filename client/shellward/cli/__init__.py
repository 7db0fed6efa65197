"""``shellward``: run commands and call tools through the daemon, read its ledger, replay and
recover calls, answer approvals, list tools, classify, check and reload rules.

One module per group of commands; in each, a command's handler (parse → one client call →
render with ``_render``) sits beside the function that adds its parser. What they share
(exit codes, connection, ``--json`` and identity options, finding a call) is in ``_base``;
how a call's result is shown, in ``_results``. Every ``ShellwardError`` ends as
``shellward: <message>`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from shellward._exceptions import InvalidRequest, ShellwardError
from shellward._version import package_version

from . import approvals, calls, classify, mcp, replay, rules, run, status, tools
from ._base import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_RUN,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    UsageError,
    add_connection_options,
    error,
)
from ._results import run_exit_code
from .tools import call_exit_code

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_RUN",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "build_parser",
    "call_exit_code",
    "main",
    "run_exit_code",
]

MAIN_EPILOG = """\
examples:
  shellward status
  shellward run -- pytest -q
  shellward tools
  shellward call read_file --arg path=README.md
  shellward ledger --run r1
  shellward show 3f2a9c1e
  shellward replay --run-id r1 --step-id s3
  shellward recover r1
  shellward undo 3f2a9c1e
  shellward undo --run r1 --from-step s3
  shellward compensate 3f2a9c1e
  shellward approvals
  shellward approve 3f2a9c1e && shellward wait 3f2a9c1e
  shellward classify --explain 'npm test && git push'
  shellward rules check
  shellward rules reload
  shellward status --socket /run/user/1000/shellward/shellward.sock
  shellward mcp                      (an MCP server on stdio, for agent hosts)

Connection options (--socket, --tcp, --token) go before or after the command.
Start a daemon with `make serve WORKSPACE=DIR` (or `shellwardd`); see `shellward COMMAND --help`.
"""

# In the order `shellward --help` lists them.
_COMMANDS = (run, calls, replay, approvals, classify, rules, status, tools, mcp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shellward",
        description="Talk to the shellward daemon: sandboxed commands that know if they may "
        "run again.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shellward {package_version()}")
    add_connection_options(parser, after_command=False)
    parser.set_defaults(handler=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module in _COMMANDS:
        module.add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return int(exc.code or 0)
    if args.handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except (UsageError, InvalidRequest) as exc:
        error(exc.message)
        return EXIT_USAGE
    except ShellwardError as exc:
        error(exc.message)
        return EXIT_ERROR
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Point stdout at /dev/null so that the interpreter's final flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
