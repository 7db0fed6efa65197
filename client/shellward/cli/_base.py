"""What every command shares: exit codes, the options defined once (connection, ``--json``,
identity), argument types, and finding a call by a prefix of its id.

Connection options (``--socket``, ``--tcp``/``--address``, ``--token``) are accepted before
the command and after it (``shellward status --socket X``): each command's parser has them
too, with ``SUPPRESS`` defaults, so a value given after the command overrides one given
before it and an absent one leaves it alone.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Sequence

from shellward import _render
from shellward._client import Client
from shellward._exceptions import NotFound, ShellwardError
from shellward._paths import default_socket_path
from shellward._render import Style
from shellward.types import LedgerEntry

EXIT_OK = 0
EXIT_ERROR = 1  # a shellward error: no daemon, unknown call id, rule file problems, …
EXIT_USAGE = 2  # a bad command line, or input the daemon refused as invalid
EXIT_TIMEOUT = 124  # `run`: the command was killed at its time limit (as timeout(1) does)
EXIT_NOT_RUN = 125  # `run`: no exit status for another reason (refused, sandbox error, …)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # stdout closed early (`shellward ledger | head`)

PREFIX_SEARCH_LIMIT = 1000

Handler = Callable[[argparse.Namespace], int]
Commands = argparse._SubParsersAction  # type: ignore[type-arg]


class UsageError(ShellwardError):
    """The command line is wrong in a way argparse cannot see."""


# --- options ------------------------------------------------------------------------------


def add_connection_options(parser: argparse._ActionsContainer, *, after_command: bool) -> None:
    """``after_command``: the copy on a command's parser, which only overrides when given."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_command else value

    parser.add_argument(
        "--socket",
        metavar="PATH",
        default=default(None),
        help=f"the daemon's Unix socket (env SHELLWARD_SOCKET; default {default_socket_path()})",
    )
    parser.add_argument(
        "--tcp",
        "--address",
        dest="address",
        metavar="HOST:PORT",
        default=default(os.environ.get("SHELLWARD_ADDRESS") or None),
        help="talk to the daemon's TCP listener instead (env SHELLWARD_ADDRESS); needs --token",
    )
    parser.add_argument(
        "--token",
        default=default(None),
        help="bearer token for --tcp (env SHELLWARD_TOKEN; prefer the env)",
    )


def subparser(
    commands: Commands, name: str, handler: Handler, summary: str, epilog: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    group = parser.add_argument_group("connection (also accepted before the command)")
    add_connection_options(group, after_command=True)
    return parser


def add_json(parser: argparse._ActionsContainer, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=what)


def add_identity(
    parser: argparse.ArgumentParser,
    run_help: str = "agent run id; with --step-id names the call, so that a retry of the same "
    "pair is answered from the ledger (replayed, checked or refused), not run twice",
    step_help: str = "step id within the run (with --run-id)",
) -> None:
    """--run-id/--step-id: the call's identity, as the agent runtime gives it."""
    parser.add_argument("--run-id", metavar="R", help=run_help)
    parser.add_argument("--step-id", metavar="S", help=step_help)


def identity(args: argparse.Namespace) -> tuple[str, str]:
    """(run_id, step_id), both or neither."""
    if bool(args.run_id) != bool(args.step_id):
        raise UsageError("--run-id and --step-id go together: give both, or neither")
    return args.run_id or "", args.step_id or ""


def env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


# --- helpers ------------------------------------------------------------------------------


def answer(as_json: bool, value: object, text: Callable[[Style], str], *, empty: str = "") -> int:
    """Print ``value`` as JSON, or as ``text`` renders it for stdout. ``empty``: the sentence
    for stderr when there is nothing to show (as JSON, an empty list is shown as is)."""
    if as_json:
        print(_render.to_json(value))
    elif empty and not value:
        error(empty)
    else:
        print(text(Style.for_stream(sys.stdout)))
    return EXIT_OK


def connect(args: argparse.Namespace) -> Client:
    if args.address and not (args.token or os.environ.get("SHELLWARD_TOKEN")):
        # The daemon would refuse every RPC (TCP is never served without one): say so here.
        raise UsageError(
            f"--address {args.address} needs the daemon's token: pass --token TOKEN "
            "(or set SHELLWARD_TOKEN), the value of the daemon's --token"
        )
    return Client(args.socket, address=args.address, token=args.token)


def error(message: str) -> None:
    print(f"shellward: {message}", file=sys.stderr)


def command_line(words: Sequence[str], verb: str) -> str:
    """One command line from CMD words: one word as is, several joined with shlex.join."""
    words = list(words[1:] if words[:1] == ["--"] else words)
    if not "".join(words).strip():
        raise UsageError(f"no command given; write it after `--`: shellward {verb} -- ls -la")
    return words[0] if len(words) == 1 else shlex.join(words)


def absolute_cwd(cwd: str | None) -> str:
    return os.path.abspath(cwd or os.getcwd())


def find_call(client: Client, call_id: str) -> LedgerEntry:
    """The entry with this id, or with the one recent id that starts with it."""
    try:
        return client.get_call(call_id)
    except NotFound as missing:
        recent = client.list_calls(limit=PREFIX_SEARCH_LIMIT)
        matches = [entry.call_id for entry in recent if entry.call_id.startswith(call_id)]
        if len(matches) == 1:
            return client.get_call(matches[0])
        if len(matches) > 1:
            raise UsageError(
                f"call id prefix {call_id!r} matches {len(matches)} calls "
                f"({', '.join(matches[:3])}, …); give more characters"
            ) from None
        raise NotFound(
            f"no call {call_id!r} in the ledger; `shellward ledger` lists the recent ones",
            status=missing.status,
            code=missing.code,
            details=missing.details,
        ) from missing
