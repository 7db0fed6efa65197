"""`shellward status`: the daemon's state."""

from __future__ import annotations

import argparse
import sys

from shellward import _render
from shellward._render import Style

from ._base import EXIT_OK, Commands, add_json, connect, subparser

STATUS_EPILOG = """\
Exits 1 with a hint when no daemon answers (start one with `make serve`).

examples:
  shellward status
  shellward --socket /run/user/1000/shellward/shellward.sock status --json
"""


def cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        status = client.status()
    if args.json:
        print(_render.to_json(status))
    else:
        print(_render.status_text(status, Style.for_stream(sys.stdout)))
    return EXIT_OK


def add(commands: Commands) -> None:
    status = subparser(commands, "status", cmd_status, "Show the daemon's state.", STATUS_EPILOG)
    add_json(status, "the status as JSON")
