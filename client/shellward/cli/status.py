"""`shellward status`: the daemon's state."""

from __future__ import annotations

import argparse

from shellward import _render

from ._base import Commands, add_json, answer, connect, subparser

STATUS_EPILOG = """\
Exits 1 with a hint when no daemon answers (start one with `make serve WORKSPACE=DIR`).

examples:
  shellward status
  shellward --socket /run/user/1000/shellward/shellward.sock status --json
"""


def cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        status = client.status()
    return answer(args.json, status, lambda style: _render.status_text(status, style))


def add(commands: Commands) -> None:
    status = subparser(commands, "status", cmd_status, "Show the daemon's state.", STATUS_EPILOG)
    add_json(status, "the status as JSON")
