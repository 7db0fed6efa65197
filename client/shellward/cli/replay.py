"""`shellward replay`, `recover`, `wait` and `undo`: what happens to a call after its first run."""

from __future__ import annotations

import argparse

from shellward import _render
from shellward.types import CallStatus

from ._base import (
    EXIT_NOT_RUN,
    EXIT_OK,
    Commands,
    UsageError,
    absolute_cwd,
    add_identity,
    add_json,
    answer,
    connect,
    error,
    find_call,
    identity,
    positive,
    subparser,
)
from ._results import print_run_summary, report_stream, result_json, run_exit_code, write_recorded

REPLAY_EPILOG = """\
Applies the replay table to a recorded call: by CALL_ID (a unique prefix is enough), or by
--run-id and --step-id (that step's newest attempt).

  ledger says               idempotent/auto    conditional/ask       non_idempotent/never
  succeeded                 the recorded result, nothing runs (--rerun: runs / checks / refused)
  uncertain, or failed      runs again         checks its file       refused:
  after it started                             effects first         SIDE_EFFECT_UNCERTAIN
  failed before it started  the same answer again, nothing runs

The check: every file as the call left it → ALREADY_APPLIED (nothing runs); every file as it
was before → runs again; anything else → CONFLICT: a new attempt waits for a human
(`shellward approvals`, `shellward approve ID`).

Output streams as with `shellward run` when the command runs again (a recorded result shows
its recorded output); then the summary line and the daemon's sentence go to stderr.

exit status: as `shellward run`: the command's own; 0 for ALREADY_APPLIED; 124 killed at
its time limit; 125 nothing ran (refused, needs approval, conflict, record expired).

examples:
  shellward replay 3f2a9c1e
  shellward replay --run-id r1 --step-id s3
  shellward replay --rerun 3f2a9c1e
  shellward replay --json 3f2a9c1e | jq .code
"""


def cmd_replay(args: argparse.Namespace) -> int:
    run_id, step_id = identity(args)
    if bool(args.call_id) == bool(run_id):
        raise UsageError("name the call to replay: a CALL_ID, or --run-id R --step-id S")
    with connect(args) as client:
        call_id = find_call(client, args.call_id).call_id if args.call_id else ""
        events = client.stream_replay(call_id, run_id=run_id, step_id=step_id, rerun=args.rerun)
        return report_stream(client, events, args.json, content=True)


def _add_replay(commands: Commands) -> None:
    replay = subparser(
        commands,
        "replay",
        cmd_replay,
        "Run a recorded call again as far as the replay table allows.",
        REPLAY_EPILOG,
    )
    replay.add_argument(
        "call_id", nargs="?", metavar="CALL_ID", help="a call id, or a unique prefix of one"
    )
    add_identity(
        replay,
        run_help="the run of the step (with --step-id)",
        step_help="replay this step's newest call",
    )
    replay.add_argument(
        "--rerun",
        action="store_true",
        help="run a succeeded call again where its policy allows (auto: runs; ask: checks "
        "its files first; never: refused)",
    )
    add_json(replay, "no live output: print the structured result as JSON")


RECOVER_EPILOG = """\
Lists each step of the run whose newest call did not end cleanly (uncertain, failed after
it started, waiting for approval, still running) and what the replay table says to do:

  replay   run it again (`shellward replay ID`): it is idempotent
  check    its recorded file effects were compared with the workspace: replay answers
           ALREADY_APPLIED, or runs it again when none of them is in place
  ask      a human must decide: it waits for approval, or its files were changed since
  refuse   not run again automatically: check what it did first (`shellward show ID`)
  wait     still running: `shellward wait ID`

Exit status 0, also when there is nothing to recover.

examples:
  shellward recover r1
  shellward recover r1 --json | jq '.[] | select(.action == "replay") | .call.call_id'
"""


def cmd_recover(args: argparse.Namespace) -> int:
    with connect(args) as client:
        items = client.recover(args.run_id)
    return answer(
        args.json,
        items,
        lambda style: _render.recovery_table(items, style),
        empty=f"nothing to recover in run {args.run_id!r}: no step of it is left unfinished",
    )


def _add_recover(commands: Commands) -> None:
    recover = subparser(
        commands,
        "recover",
        cmd_recover,
        "List a run's steps that did not end cleanly, with what to do about each.",
        RECOVER_EPILOG,
    )
    recover.add_argument("run_id", metavar="RUN_ID", help="the agent run to recover")
    add_json(recover, "a JSON array of {call, action, reason}")


WAIT_EPILOG = """\
Waits until the call is final (an approved call has run, a running one has finished), then
shows it like `shellward run`: its recorded output, then the summary line on stderr.
CALL_ID may be a unique prefix.

exit status: as `shellward run` (the command's own, 124 killed at its time limit, 125 no
exit status: denied, refused, …); 125 also when it is still not final after --timeout.

examples:
  shellward wait 3f2a9c1e
  shellward wait --timeout 600 3f2a9c1e
  shellward wait --json 3f2a9c1e | jq .metadata.status
"""


def cmd_wait(args: argparse.Namespace) -> int:
    with connect(args) as client:
        call_id = find_call(client, args.call_id).call_id
        result = client.wait_call(call_id, timeout=args.timeout)
        if args.json:
            print(result_json(result))
        elif not result.status.is_final:
            why = (
                " (it waits for a human: `shellward approvals`)"
                if result.status is CallStatus.PENDING_APPROVAL
                else ""
            )
            error(
                f"call {call_id} is still {result.status.value} after {args.timeout:g}s{why}; "
                f"wait again with `shellward wait {call_id}`"
            )
        else:
            write_recorded(result)
            print_run_summary(result, accepted=True)
        return run_exit_code(client, result, accepted=True)


def _add_wait(commands: Commands) -> None:
    wait = subparser(
        commands, "wait", cmd_wait, "Wait for a call to be final and show its result.", WAIT_EPILOG
    )
    wait.add_argument("call_id", metavar="CALL_ID", help="a call id, or a unique prefix of one")
    wait.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive(float),
        default=60.0,
        help="give up waiting after this long (default 60; the call goes on)",
    )
    add_json(wait, "print the structured result as JSON")


UNDO_EPILOG = """\
Puts back the files a call changed: files it created are removed, files it modified or
deleted are restored from the before-images the daemon kept, renames are reversed. Only
when every one of them is still exactly as the call left it; otherwise CONFLICT names the
files changed since and nothing is restored. The undo is itself a ledgered call (tool
`undo`, step `undo:<CALL_ID>`): undoing the same call again answers ALREADY_APPLIED.

With --run R --from-step S: the run's steps from its last back to S, newest first, each
undone as above; it stops at the first that cannot be undone and says why. Steps that
changed no files, business tool calls (see `shellward compensate`) and the run's own undos
are skipped.

--cwd (default: the current directory) names the workspace: the call must have run in it.

exit status: 0 everything undone (or already undone); 125 a step of a run could not be
undone; 1 the daemon refused the undo (conflict, expired before-image, another workspace).

examples:
  shellward undo 3f2a9c1e
  shellward undo --run r1 --from-step s3
"""


def cmd_undo(args: argparse.Namespace) -> int:
    if bool(args.call_id) == bool(args.run):
        raise UsageError("name what to undo: a CALL_ID, or --run R --from-step S")
    if bool(args.run) != bool(args.from_step):
        raise UsageError("--run and --from-step go together")
    cwd = absolute_cwd(args.cwd)
    with connect(args) as client:
        if args.call_id:
            results = [client.undo(find_call(client, args.call_id).call_id, cwd=cwd)]
        else:
            results = client.undo_run(args.run, args.from_step, cwd=cwd)
    if args.json:
        print("[" + ",\n".join(result_json(r) for r in results) + "]")
    elif not results:
        error(f"nothing to undo in run {args.run!r} from step {args.from_step!r}")
    for result in [] if args.json else results:
        print_run_summary(result, accepted=not result.replayed, content=True)
    return EXIT_OK if all(r.ok for r in results) else EXIT_NOT_RUN


def _add_undo(commands: Commands) -> None:
    undo = subparser(
        commands,
        "undo",
        cmd_undo,
        "Put back the files a call (or a run's steps from one on) changed.",
        UNDO_EPILOG,
    )
    undo.add_argument(
        "call_id", nargs="?", metavar="CALL_ID", help="a call id, or a unique prefix of one"
    )
    undo.add_argument("--run", metavar="R", help="undo this run's steps (with --from-step)")
    undo.add_argument("--from-step", metavar="S", help="the run's earliest step to undo")
    undo.add_argument(
        "--cwd",
        metavar="DIR",
        help="the workspace the call ran in (default: the current directory)",
    )
    add_json(undo, "a JSON array of the undo calls' results")


def add(commands: Commands) -> None:
    _add_replay(commands)
    _add_recover(commands)
    _add_wait(commands)
    _add_undo(commands)
