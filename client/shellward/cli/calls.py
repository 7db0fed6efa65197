"""`shellward ledger`, `shellward show` and `shellward cancel`: the calls the daemon
recorded, and stopping one that runs."""

from __future__ import annotations

import argparse

from shellward import _render

from ._base import (
    Commands,
    add_json,
    answer,
    connect,
    find_call,
    positive,
    subparser,
)

LEDGER_EPILOG = """\
Columns: local time, call id (first 8 characters; `shellward show` accepts them), status,
exit status, verdict (idempotency/replay policy), command. Newest first. With --run, the
verdict of each call that did not end cleanly also says what `shellward replay` would do
(`conditional/ask → check`), as `shellward recover` explains.

examples:
  shellward ledger
  shellward ledger --run r1 --limit 200
  shellward ledger --json | jq '.[] | select(.status == "uncertain") | .call_id'
"""


def cmd_ledger(args: argparse.Namespace) -> int:
    with connect(args) as client:
        entries = client.list_calls(
            run_id=args.run or "", limit=args.limit, include_output=args.json
        )
        actions = (
            {item.call.call_id: item.action for item in client.recover(args.run)}
            if args.run and entries and not args.json
            else {}
        )
    where = f" for run {args.run!r}" if args.run else ""
    return answer(
        args.json,
        entries,
        lambda style: _render.ledger_table(entries, style, actions),
        empty=f"no calls in the ledger{where} yet; run one with `shellward run -- CMD`",
    )


def _add_ledger(commands: Commands) -> None:
    ledger = subparser(commands, "ledger", cmd_ledger, "List recent calls.", LEDGER_EPILOG)
    ledger.add_argument("--run", metavar="RUN_ID", help="only the calls of this run")
    ledger.add_argument(
        "--limit",
        metavar="N",
        type=positive(int),
        default=50,
        help="how many calls, newest first (default 50, at most 1000)",
    )
    add_json(ledger, "a JSON array of full entries")


SHOW_EPILOG = """\
CALL_ID is a full call id or a unique prefix of a recent one (as `shellward ledger` shows).

examples:
  shellward show 3f2a9c1e
  shellward show 3f2a9c1e-0d4b-4c1e-9a57-2b8e61f0c3d2 --json | jq .file_effects
"""


def cmd_show(args: argparse.Namespace) -> int:
    with connect(args) as client:
        entry = find_call(client, args.call_id)
    return answer(args.json, entry, lambda style: _render.entry_details(entry, style))


def _add_show(commands: Commands) -> None:
    show = subparser(commands, "show", cmd_show, "Show everything about one call.", SHOW_EPILOG)
    show.add_argument("call_id", metavar="CALL_ID", help="a call id, or a unique prefix of one")
    add_json(show, "the full entry as JSON")


CANCEL_EPILOG = """\
Kills a running call (as `shellward run` does on Ctrl-C) and prints how it ended: a call that
may have written is uncertain; check its effects with `shellward show` before running it again.
A call waiting for approval is denied with `shellward deny` instead.

examples:
  shellward cancel 3f2a9c1e
  shellward cancel 3f2a9c1e --reason 'wrong branch'
"""


def cmd_cancel(args: argparse.Namespace) -> int:
    with connect(args) as client:
        call_id = find_call(client, args.call_id).call_id
        entry = client.cancel(call_id, reason=args.reason or "")
    return answer(args.json, entry, lambda style: _render.entry_details(entry, style))


def _add_cancel(commands: Commands) -> None:
    cancel = subparser(commands, "cancel", cmd_cancel, "Kill a running call.", CANCEL_EPILOG)
    cancel.add_argument("call_id", metavar="CALL_ID", help="a call id, or a unique prefix of one")
    cancel.add_argument("--reason", metavar="TEXT", help="why; kept in the call's note")
    add_json(cancel, "the call's entry as JSON")


def add(commands: Commands) -> None:
    _add_ledger(commands)
    _add_show(commands)
    _add_cancel(commands)
