"""`shellward approvals`, `approve` and `deny`: the human's answer to a pending call."""

from __future__ import annotations

import argparse
import sys

from shellward import _render
from shellward._render import Style

from ._base import EXIT_OK, Commands, add_json, answer, connect, find_call, subparser

APPROVALS_EPILOG = """\
Calls waiting for a human: a rule asked for approval before a first run (NEEDS_APPROVAL), or
a replay found the files it changed were changed since by someone else (CONFLICT). Columns:
call id, age, code, verdict, command, the daemon's reason. Unanswered approvals are denied
after the daemon's approval timeout.

examples:
  shellward approvals
  shellward approvals --json | jq '.[].call_id'
"""


def cmd_approvals(args: argparse.Namespace) -> int:
    with connect(args) as client:
        pending = client.approvals()
    return answer(
        args.json,
        pending,
        lambda style: _render.approvals_table(pending, style),
        empty="no calls are waiting for approval",
    )


ANSWER_EPILOG = """\
CALL_ID is a pending call's id or a unique prefix of it (see `shellward approvals`). An
approved call starts at once in the daemon; follow it with `shellward wait CALL_ID`. A
denied call never runs, and the agent is told not to retry it.

examples:
  shellward approve 3f2a9c1e
  shellward deny 3f2a9c1e --reason 'the user edited that file on purpose'
"""


def cmd_answer(args: argparse.Namespace) -> int:
    """`approve` or `deny` (``args.approve``) a pending call."""
    with connect(args) as client:
        call_id = find_call(client, args.call_id).call_id
        answer = client.approve if args.approve else client.deny
        entry = answer(call_id, reason=args.reason or "")
    print(_render.answer_text(entry, Style.for_stream(sys.stdout)))
    return EXIT_OK


def add(commands: Commands) -> None:
    approvals = subparser(
        commands, "approvals", cmd_approvals, "List calls waiting for approval.", APPROVALS_EPILOG
    )
    add_json(approvals, "a JSON array of the entries")
    for name, approve, summary in (
        ("approve", True, "Approve a pending call: it runs now."),
        ("deny", False, "Deny a pending call: it never runs."),
    ):
        answer = subparser(commands, name, cmd_answer, summary, ANSWER_EPILOG)
        answer.set_defaults(approve=approve)
        answer.add_argument(
            "call_id", metavar="CALL_ID", help="a pending call's id, or a unique prefix of one"
        )
        answer.add_argument("--reason", metavar="TEXT", help="why; kept in the call's history")
