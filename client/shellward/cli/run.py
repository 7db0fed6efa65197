"""`shellward run`: a command in the daemon's sandbox, its output streamed live."""

from __future__ import annotations

import argparse
import os
import stat
import sys

from ._base import (
    Commands,
    UsageError,
    absolute_cwd,
    add_identity,
    add_json,
    command_line,
    connect,
    env_pair,
    identity,
    positive,
    subparser,
)
from ._results import report_stream

# The daemon's limit (requests.MAX_STDIN_BYTES): refused here before anything is sent.
MAX_STDIN_BYTES = 1024 * 1024

RUN_EPILOG = """\
The words after `--` form one command line: a single word is sent as is (so
`shellward run -- 'ls | wc -l'` runs a pipeline); several words are joined with
shlex.join (so `shellward run -- echo 'a b'` runs `echo 'a b'`).

Standard input is forwarded when it is a pipe or a file (`echo hi | shellward run -- cat`,
`shellward run -- wc -l < notes.txt`), up to 1 MiB; it is part of the call's identity. A
terminal, /dev/null or a socket is not read (the command's stdin is empty); --no-stdin
never reads it (e.g. in a `while read` loop).

Output is streamed live, byte for byte, to this terminal's stdout and stderr (a call
replayed from the ledger shows the output it recorded); then one summary line (call id,
status, code, exit, verdict) goes to stderr.

exit status:
  the command's own    when it ran and exited
  0                    also when its changes were already applied (ALREADY_APPLIED)
  124                  it was killed at its time limit
  125                  it has no exit status for another reason: refused replay, needs
                       approval, sandbox error, daemon shut down (the summary says which)
  1 / 2                shellward itself failed / bad command line

examples:
  shellward run -- ls -la
  shellward run --timeout 600 -- npm test
  shellward run --run-id r1 --step-id s3 -- 'git status && git diff'
  shellward run --json -- make build | jq .metadata.call_id
"""


def piped_stdin() -> bytes:
    """Our stdin when it is a pipe or a file, at most MAX_STDIN_BYTES; else nothing. Never
    a terminal (it would wait for a person) nor a socket (agent hosts often leave one open
    that never ends)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):  # closed, or replaced by something without a descriptor
        return b""
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return b""
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise UsageError(
            f"stdin is over {MAX_STDIN_BYTES} bytes, more than a call carries; write it to a "
            "file in the workspace and have the command read it (or pass --no-stdin)"
        )
    return data


def cmd_run(args: argparse.Namespace) -> int:
    run_id, step_id = identity(args)
    command = command_line(args.command, "run")
    stdin = b"" if args.no_stdin else piped_stdin()
    with connect(args) as client:
        events = client.stream_command(
            command,
            cwd=absolute_cwd(args.cwd),
            run_id=run_id,
            step_id=step_id,
            timeout=args.timeout,
            env=dict(args.env or ()),
            network=args.network,
            stdin=stdin,
        )
        return report_stream(client, events, args.json)


def add(commands: Commands) -> None:
    run = subparser(commands, "run", cmd_run, "Run a command in the daemon's sandbox.", RUN_EPILOG)
    run.add_argument("--cwd", metavar="DIR", help="working directory (default: the current one)")
    add_identity(run)
    run.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive(float),
        help="kill the command after this long (default: the daemon's)",
    )
    run.add_argument(
        "--env",
        metavar="K=V",
        type=env_pair,
        action="append",
        help="set an environment variable for the command; repeatable",
    )
    run.add_argument(
        "--network",
        action="store_true",
        help="ask for network access; it never grants it: a command gets network only when its "
        "rules say it uses the network, in its own network namespace whose only exit is the "
        "daemon's proxy, to the destinations its rules and the operator allow "
        "(docs/network.md)",
    )
    run.add_argument(
        "--no-stdin",
        action="store_true",
        help="do not read this program's stdin (by default a pipe or a file is forwarded)",
    )
    add_json(run, "no live output: print the structured result as JSON")
    run.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD…", help="the command line to run"
    )
