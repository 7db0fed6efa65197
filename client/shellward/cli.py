"""``shellward``: run commands and call tools through the daemon, read its ledger, replay and
recover calls, answer approvals, list tools, classify, check and reload rules.

Each sub-command is one small function: parse → one client call → render (``_render``).
Every ``ShellwardError`` ends as ``shellward: <message>`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from shellward import _render
from shellward._client import Client, StreamEvent
from shellward._exceptions import InvalidRequest, NotFound, ProtocolError, ShellwardError
from shellward._paths import default_socket_path, default_user_rules
from shellward._render import Style
from shellward.types import (
    CallAccepted,
    CallStatus,
    Code,
    CommandResult,
    LedgerEntry,
    OutputChunk,
    Stream,
)

EXIT_OK = 0
EXIT_ERROR = 1  # a shellward error: no daemon, unknown call id, rule file problems, …
EXIT_USAGE = 2  # a bad command line, or input the daemon refused as invalid
EXIT_TIMEOUT = 124  # `run`: the command was killed at its time limit (as timeout(1) does)
EXIT_NOT_RUN = 125  # `run`: no exit status for another reason (refused, sandbox error, …)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # stdout closed early (`shellward ledger | head`)

REPO_RULES = Path(".shellward") / "rules.toml"
READ_FILE = "read_file"  # `call`: the tool whose answer is raw bytes
_PREFIX_SEARCH_LIMIT = 1000

Handler = Callable[[argparse.Namespace], int]


class UsageError(ShellwardError):
    """The command line is wrong in a way argparse cannot see."""


# --- run --------------------------------------------------------------------------------

RUN_EPILOG = """\
The words after `--` form one command line: a single word is sent as is (so
`shellward run -- 'ls | wc -l'` runs a pipeline); several words are joined with
shlex.join (so `shellward run -- echo 'a b'` runs `echo 'a b'`).

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


def cmd_run(args: argparse.Namespace) -> int:
    if bool(args.run_id) != bool(args.step_id):
        raise UsageError("--run-id and --step-id go together: give both, or neither")
    command = command_line(args.command, "run")
    with _connect(args) as client:
        events = client.stream_command(
            command,
            cwd=_absolute_cwd(args.cwd),
            run_id=args.run_id or "",
            step_id=args.step_id or "",
            timeout=args.timeout,
            env=dict(args.env or ()),
            network=args.network,
        )
        return _report_stream(client, events, args.json)


def _report_stream(
    client: Client, events: Iterator[StreamEvent], as_json: bool, *, content: bool = False
) -> int:
    """Show a streamed call (live output, then its summary, or only its JSON) and return
    its exit status. ``content``: print the result's sentence even when the call succeeded."""
    try:
        result, accepted = _consume(events, live=not as_json)
    except KeyboardInterrupt:
        _error(
            "interrupted: the command keeps running in the daemon and will be recorded; "
            "find it with `shellward ledger`"
        )
        return EXIT_INTERRUPTED
    if as_json:
        print(_result_json(result))
    else:
        _print_run_summary(result, accepted=accepted, content=content)
    return run_exit_code(client, result, accepted=accepted)


def _consume(events: Iterator[StreamEvent], *, live: bool) -> tuple[CommandResult, bool]:
    """The call's result, and whether it was accepted as a new call (False: answered at
    once from the ledger, e.g. a replay or a refusal). ``live`` streams its output here."""
    accepted = False
    for event in events:
        if isinstance(event, CallAccepted):
            accepted = True
        elif isinstance(event, OutputChunk):
            if live:
                _write_chunk(event)
        else:
            if live and event.replayed:
                _write_recorded(event)
            return event, accepted
    raise ProtocolError("the daemon closed the stream without a final result")


def _result_json(result: CommandResult, *, tool: bool = False) -> str:
    """``tool``: also the tool's structured ``output`` and the ``idempotency_key`` sent."""
    extra = {"output": result.output, "idempotency_key": result.idempotency_key} if tool else {}
    return _render.to_json({"call_id": result.call_id, **result.to_dict(), **extra})


def _write_chunk(chunk: OutputChunk) -> None:
    stream = sys.stdout if chunk.stream is Stream.STDOUT else sys.stderr
    stream.flush()
    stream.buffer.write(chunk.data)
    stream.buffer.flush()


def _write_recorded(result: CommandResult) -> None:
    """A replayed result streams nothing: show the output the ledger kept instead."""
    _write_chunk(OutputChunk(Stream.STDOUT, result.stdout.data))
    _write_chunk(OutputChunk(Stream.STDERR, result.stderr.data))


def _print_run_summary(result: CommandResult, *, accepted: bool, content: bool = False) -> None:
    style = Style.for_stream(sys.stderr)
    print(_render.run_summary(result, style, accepted=accepted), file=sys.stderr)
    if content or (not result.ok and result.code is not Code.COMMAND_FAILED):
        print(_render.one_line(result.content), file=sys.stderr)


def run_exit_code(client: Client, result: CommandResult, *, accepted: bool) -> int:
    """The command's exit status; 0 when its changes were already applied (nothing ran);
    124 when it was killed at its time limit; else 125.

    ``accepted``: the daemon took it as a new call. A refusal answered from the ledger carries
    the earlier call's fields, so its exit status and times are not this run's.
    """
    if result.code is Code.ALREADY_APPLIED:
        return EXIT_OK
    if result.code in (Code.OK, Code.COMMAND_FAILED) and result.exit_code is not None:
        return result.exit_code
    return EXIT_TIMEOUT if accepted and _timed_out(client, result) else EXIT_NOT_RUN


def _timed_out(client: Client, result: CommandResult) -> bool:
    """TIMEOUT, or SIDE_EFFECT_UNCERTAIN from a run that lasted its whole time limit."""
    if result.code is Code.TIMEOUT:
        return True
    if result.code is not Code.SIDE_EFFECT_UNCERTAIN:
        return False
    if result.started_at is None or result.finished_at is None:
        return False
    limit = client.get_call(result.call_id).timeout_seconds
    return 0 < limit <= result.finished_at - result.started_at


# --- ledger and show --------------------------------------------------------------------

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
    with _connect(args) as client:
        entries = client.list_calls(
            run_id=args.run or "", limit=args.limit, omit_output=not args.json
        )
        actions = (
            {item.call.call_id: item.action for item in client.recover(args.run)}
            if args.run and entries and not args.json
            else {}
        )
    if args.json:
        print(_render.to_json(entries))
    elif not entries:
        where = f" for run {args.run!r}" if args.run else ""
        _error(f"no calls in the ledger{where} yet; run one with `shellward run -- CMD`")
    else:
        print(_render.ledger_table(entries, Style.for_stream(sys.stdout), actions))
    return EXIT_OK


SHOW_EPILOG = """\
CALL_ID is a full call id or a unique prefix of a recent one (as `shellward ledger` shows).

examples:
  shellward show 3f2a9c1e
  shellward show 3f2a9c1e-0d4b-4c1e-9a57-2b8e61f0c3d2 --json | jq .file_effects
"""


def cmd_show(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        entry = find_call(client, args.call_id)
    if args.json:
        print(_render.to_json(entry))
    else:
        print(_render.entry_details(entry, Style.for_stream(sys.stdout)))
    return EXIT_OK


def find_call(client: Client, call_id: str) -> LedgerEntry:
    """The entry with this id, or with the one recent id that starts with it."""
    try:
        return client.get_call(call_id)
    except NotFound:
        recent = client.list_calls(limit=_PREFIX_SEARCH_LIMIT, omit_output=True)
        matches = [entry.call_id for entry in recent if entry.call_id.startswith(call_id)]
        if len(matches) == 1:
            return client.get_call(matches[0])
        if len(matches) > 1:
            raise UsageError(
                f"call id prefix {call_id!r} matches {len(matches)} calls "
                f"({', '.join(matches[:3])}, …); give more characters"
            ) from None
        raise


# --- replay, recover, wait --------------------------------------------------------------

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
    if bool(args.run_id) != bool(args.step_id):
        raise UsageError("--run-id and --step-id go together: give both, or neither")
    if bool(args.call_id) == bool(args.run_id):
        raise UsageError("name the call to replay: a CALL_ID, or --run-id R --step-id S")
    with _connect(args) as client:
        call_id = find_call(client, args.call_id).call_id if args.call_id else ""
        events = client.stream_replay(
            call_id, run_id=args.run_id or "", step_id=args.step_id or "", rerun=args.rerun
        )
        return _report_stream(client, events, args.json, content=True)


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
    with _connect(args) as client:
        items = client.recover(args.run_id)
    if args.json:
        print(_render.to_json(items))
    elif not items:
        _error(f"nothing to recover in run {args.run_id!r}: no step of it is left unfinished")
    else:
        print(_render.recovery_table(items, Style.for_stream(sys.stdout)))
    return EXIT_OK


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
    with _connect(args) as client:
        call_id = find_call(client, args.call_id).call_id
        result = client.wait_call(call_id, timeout=args.timeout)
        if args.json:
            print(_result_json(result))
        elif not result.status.is_final:
            why = (
                " (it waits for a human: `shellward approvals`)"
                if result.status is CallStatus.PENDING_APPROVAL
                else ""
            )
            _error(
                f"call {call_id} is still {result.status.value} after {args.timeout:g}s{why}; "
                f"wait again with `shellward wait {call_id}`"
            )
        else:
            _write_recorded(result)
            _print_run_summary(result, accepted=True)
        return run_exit_code(client, result, accepted=True)


# --- approvals --------------------------------------------------------------------------

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
    with _connect(args) as client:
        pending = client.approvals()
    if args.json:
        print(_render.to_json(pending))
    elif not pending:
        _error("no calls are waiting for approval")
    else:
        print(_render.approvals_table(pending, Style.for_stream(sys.stdout)))
    return EXIT_OK


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
    with _connect(args) as client:
        call_id = find_call(client, args.call_id).call_id
        answer = client.approve if args.approve else client.deny
        entry = answer(call_id, reason=args.reason or "")
    print(_render.answer_text(entry, Style.for_stream(sys.stdout)))
    return EXIT_OK


# --- classify ---------------------------------------------------------------------------

CLASSIFY_EPILOG = """\
CMD is joined like `shellward run` does: one word as is, several with shlex.join.
Nothing runs: the daemon only parses the command and applies its rules.

examples:
  shellward classify 'npm test && git push'
  shellward classify --explain -- find . -name '*.pyc' -delete
  shellward classify --json 'curl -X POST https://example.com' | jq .replay_policy
"""


def cmd_classify(args: argparse.Namespace) -> int:
    command = command_line(args.command, "classify")
    with _connect(args) as client:
        verdict = client.classify(command, cwd=_absolute_cwd(args.cwd))
    style = Style.for_stream(sys.stdout)
    if args.json:
        print(_render.to_json(verdict))
    elif args.explain:
        print(_render.explain(verdict, style))
    else:
        print(_render.verdict_text(verdict, style))
    return EXIT_OK


# --- rules check ------------------------------------------------------------------------

RULES_EPILOG = f"""\
With FILEs, checks each: TOML syntax, known fields, and that every rule's `match` /
`not_match` examples classify as the rule says. Without FILEs, checks the built-in rules,
then the user file ($SHELLWARD_USER_RULES, else {default_user_rules()}) and
{REPO_RULES} in the current directory, when they exist. No daemon needed.

exit status: 0 all clean, 1 problems found (listed as file:line: what to fix).

examples:
  shellward rules check
  shellward rules check .shellward/rules.toml ~/.config/shellward/rules.toml
"""


def cmd_rules_check(args: argparse.Namespace) -> int:
    # Imported here: the daemon's classifier is only needed by this command.
    try:
        from shellwardd.classifier import RuleFileError, check_rule_file, load_rules
    except ImportError as exc:
        raise ShellwardError(
            f"cannot check rules: the classifier is not importable ({exc}); reinstall "
            "shellward (`pip install -e .`) in this environment"
        ) from exc
    problems: list[str] = []
    paths = [Path(p) for p in args.files]
    if not paths:
        try:
            load_rules()
            print("ok: built-in rules")
        except RuleFileError as exc:
            problems.append(str(exc))
        paths = [path for path in (_user_rules_path(), REPO_RULES) if path.is_file()]
    for path in paths:
        found = check_rule_file(path) if path.is_file() else [f"{path}: no such file"]
        problems.extend(found)
        if not found:
            print(f"ok: {path}")
    for problem in problems:
        print(problem)
    if problems:
        _error(f"{len(problems)} problem(s) in rule files; fix them and run the check again")
        return EXIT_ERROR
    return EXIT_OK


RELOAD_EPILOG = """\
The daemon reads its built-in, user and workspace (repo) rule files again and prints the
files now in force, one `reloaded: SOURCE` line each. If a file is broken (bad TOML, a
failing `match` example), nothing changes: the last good rules stay in force, the error
names the file, and the exit status is 1. Check a file first with `shellward rules check`.

examples:
  shellward rules reload
"""


def cmd_rules_reload(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        outcome = client.reload_rules()
    prefix = "reloaded" if outcome.ok else "in force"
    for source in outcome.sources:
        print(f"{prefix}: {source}")
    if not outcome.ok:
        _error(
            f"the daemon could not reload its rules, so the last good rules stay in force: "
            f"{outcome.error}"
        )
        return EXIT_ERROR
    return EXIT_OK


def _user_rules_path() -> Path:
    return Path(os.environ.get("SHELLWARD_USER_RULES") or default_user_rules()).expanduser()


# --- status -----------------------------------------------------------------------------

STATUS_EPILOG = """\
Exits 1 with a hint when no daemon answers (start one with `make serve`).

examples:
  shellward status
  shellward --socket /run/user/1000/shellward/shellward.sock status --json
"""


def cmd_status(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        status = client.status()
    if args.json:
        print(_render.to_json(status))
    else:
        print(_render.status_text(status, Style.for_stream(sys.stdout)))
    return EXIT_OK


# --- tools and call ---------------------------------------------------------------------

TOOLS_EPILOG = """\
Every tool the daemon offers: the built-in file tools and the tools of the MCP servers in
its --tools-config. Columns: tool (call it by this name), server (`builtin` or the MCP
server), trust, verdict (idempotency/replay policy), source of the verdict (builtin, pin,
annotations, name, default), approval (`first run`: a human approves its first run),
CHANGED (its description is no longer the one first seen: look at it again), reason.

examples:
  shellward tools
  shellward tools --json | jq '.[] | select(.replay_policy == "never") | .name'
"""


def cmd_tools(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        tools = client.list_tools()
    if args.json:
        print(_render.to_json([_render.tool_jsonable(tool) for tool in tools]))
    else:
        print(_render.tools_table(tools, Style.for_stream(sys.stdout)))
    return EXIT_OK


CALL_EPILOG = """\
Arguments: each `--arg KEY=VALUE` sets one; VALUE is taken as JSON when it parses as JSON
(`max_bytes=100` is a number, `force=true` a boolean, `ids=[1,2]` a list), else as a string
(`path=src/a.py`); write a JSON string to keep a number a string (`--arg 'id="42"'`).
`--args JSON` gives a JSON object of arguments; --arg wins over it. --cwd (default: the
current directory) names the workspace the call is made in; file tools take paths relative
to that workspace's root (or absolute inside it), wherever in it you are.

Output: read_file's bytes, unchanged, to stdout; any other tool's structured answer as
indented JSON to stdout. Then to stderr: the summary line (as `shellward run`), the daemon's
sentence, and the idempotency key shellward sent with a business tool call, if any.
With --run-id and --step-id a second call of the same step is answered from the ledger
(replayed, checked or refused), not run twice.

exit status:
  0     it ran and succeeded, or its changes were already applied (ALREADY_APPLIED)
  124   it was sent and timed out, or its outcome is unknown (SIDE_EFFECT_UNCERTAIN)
  125   nothing ran: refused, needs approval, conflict, permission denied, unavailable
  2     the daemon refused the arguments (INVALID_ARGUMENT), or a bad command line
  1     the tool failed, no such tool or file, or shellward itself failed

examples:
  shellward call read_file --arg path=src/a.py --arg max_bytes=100
  shellward call list_files --arg pattern='*.py'
  shellward call write_file --args '{"path": "notes.txt", "content": "hi\\n"}' \\
      --run-id r1 --step-id s1
  shellward call biz.get_order_status --arg order_id=o-1 --json | jq .output
"""

_CALL_ERRORS = frozenset({Code.COMMAND_FAILED, Code.NOT_FOUND, Code.INTERNAL})


def cmd_call(args: argparse.Namespace) -> int:
    if bool(args.run_id) != bool(args.step_id):
        raise UsageError("--run-id and --step-id go together: give both, or neither")
    arguments = {**_json_object(args.args), **dict(args.arg or ())}
    with _connect(args) as client:
        earlier = _step_call_id(client, args.run_id, args.step_id)
        result = client.call_tool(
            args.tool,
            arguments,
            cwd=_absolute_cwd(args.cwd),
            run_id=args.run_id or "",
            step_id=args.step_id or "",
            timeout=args.timeout,
            user=args.user or "",
        )
    # A call answered from the ledger (replayed, refused) names the step's earlier call.
    accepted = result.call_id != earlier
    if args.json:
        print(_result_json(result, tool=True))
    else:
        if args.tool == READ_FILE:
            _write_chunk(OutputChunk(Stream.STDOUT, result.stdout.data))
        elif result.output is not None:
            print(_render.to_json(result.output), flush=True)
        _print_run_summary(result, accepted=accepted, content=True)
        if result.idempotency_key:
            _error(f"idempotency key: {result.idempotency_key}")
    return call_exit_code(result, accepted=accepted)


def call_exit_code(result: CommandResult, *, accepted: bool) -> int:
    """0 ok (also ALREADY_APPLIED); 124 a new call that timed out or whose outcome is
    unknown; 2 invalid arguments; 1 the tool failed or is unknown; else 125, nothing ran."""
    if result.ok:
        return EXIT_OK
    if result.code is Code.INVALID_ARGUMENT:
        return EXIT_USAGE
    if result.code in _CALL_ERRORS:
        return EXIT_ERROR
    if accepted and result.code in (Code.TIMEOUT, Code.SIDE_EFFECT_UNCERTAIN):
        return EXIT_TIMEOUT
    return EXIT_NOT_RUN


def _step_call_id(client: Client, run_id: str | None, step_id: str | None) -> str:
    """The id of the step's newest call so far ("" without a step, or for a new one)."""
    if not run_id or not step_id:
        return ""
    try:
        return client.get_call(run_id=run_id, step_id=step_id).call_id
    except NotFound:
        return ""


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'--args is not valid JSON ({exc}); give an object: \'{{"path": "a"}}\''
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"--args must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def _tool_argument(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value as JSON when it parses as JSON, else as a string."""
    key, value = _env_pair(text)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


# --- shared helpers ---------------------------------------------------------------------


def command_line(words: Sequence[str], verb: str) -> str:
    """One command line from CMD words: one word as is, several joined with shlex.join."""
    words = list(words[1:] if words[:1] == ["--"] else words)
    if not "".join(words).strip():
        raise UsageError(f"no command given; write it after `--`: shellward {verb} -- ls -la")
    return words[0] if len(words) == 1 else shlex.join(words)


def _absolute_cwd(cwd: str | None) -> str:
    return os.path.abspath(cwd or os.getcwd())


def _connect(args: argparse.Namespace) -> Client:
    return Client(args.socket, address=args.address, token=args.token)


def _error(message: str) -> None:
    print(f"shellward: {message}", file=sys.stderr)


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


def _version() -> str:
    try:
        return version("shellward")
    except PackageNotFoundError:
        return "0+unknown"


# --- parser -----------------------------------------------------------------------------

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
  shellward approvals
  shellward approve 3f2a9c1e && shellward wait 3f2a9c1e
  shellward classify --explain 'npm test && git push'
  shellward rules check
  shellward rules reload

Start a daemon with `make serve` (or `shellwardd`); see `shellward COMMAND --help`.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shellward",
        description="Talk to the shellward daemon: sandboxed commands that know if they may "
        "run again.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shellward {_version()}")
    _add_connection_options(parser)
    parser.set_defaults(handler=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_run(commands)
    _add_ledger(commands)
    _add_show(commands)
    _add_replay(commands)
    _add_recover(commands)
    _add_wait(commands)
    _add_approvals(commands)
    _add_classify(commands)
    _add_rules(commands)
    _add_status(commands)
    _add_tools(commands)
    _add_call(commands)
    return parser


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help=f"the daemon's Unix socket (env SHELLWARD_SOCKET; default {default_socket_path()})",
    )
    parser.add_argument(
        "--address",
        metavar="HOST:PORT",
        default=os.environ.get("SHELLWARD_ADDRESS") or None,
        help="talk to the daemon over TCP instead (env SHELLWARD_ADDRESS); needs --token",
    )
    parser.add_argument(
        "--token", help="bearer token for --address (env SHELLWARD_TOKEN; prefer the env)"
    )


def _subparser(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    handler: Handler,
    summary: str,
    epilog: str,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def _add_identity(parser: argparse.ArgumentParser) -> None:
    """--run-id/--step-id: the call's identity, as the agent runtime gives it."""
    parser.add_argument(
        "--run-id",
        metavar="R",
        help="agent run id; with --step-id names the call, so that a retry of the same "
        "pair is answered from the ledger (replayed, checked or refused), not run twice",
    )
    parser.add_argument("--step-id", metavar="S", help="step id within the run (with --run-id)")


def _add_run(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = _subparser(commands, "run", cmd_run, "Run a command in the daemon's sandbox.", RUN_EPILOG)
    run.add_argument("--cwd", metavar="DIR", help="working directory (default: the current one)")
    _add_identity(run)
    run.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive(float),
        help="kill the command after this long (default: the daemon's)",
    )
    run.add_argument(
        "--env",
        metavar="K=V",
        type=_env_pair,
        action="append",
        help="set an environment variable for the command; repeatable",
    )
    run.add_argument(
        "--network",
        action="store_true",
        help="ask for network access (the verdict and rules decide)",
    )
    run.add_argument(
        "--json", action="store_true", help="no live output: print the structured result as JSON"
    )
    run.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD…", help="the command line to run"
    )


def _add_ledger(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    ledger = _subparser(commands, "ledger", cmd_ledger, "List recent calls.", LEDGER_EPILOG)
    ledger.add_argument("--run", metavar="RUN_ID", help="only the calls of this run")
    ledger.add_argument(
        "--limit",
        metavar="N",
        type=_positive(int),
        default=50,
        help="how many calls, newest first (default 50, at most 1000)",
    )
    ledger.add_argument("--json", action="store_true", help="a JSON array of full entries")


def _add_show(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    show = _subparser(commands, "show", cmd_show, "Show everything about one call.", SHOW_EPILOG)
    show.add_argument("call_id", metavar="CALL_ID", help="a call id, or a unique prefix of one")
    show.add_argument("--json", action="store_true", help="the full entry as JSON")


def _add_replay(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    replay = _subparser(
        commands,
        "replay",
        cmd_replay,
        "Run a recorded call again as far as the replay table allows.",
        REPLAY_EPILOG,
    )
    replay.add_argument(
        "call_id", nargs="?", metavar="CALL_ID", help="a call id, or a unique prefix of one"
    )
    replay.add_argument("--run-id", metavar="R", help="the run of the step (with --step-id)")
    replay.add_argument("--step-id", metavar="S", help="replay this step's newest call")
    replay.add_argument(
        "--rerun",
        action="store_true",
        help="run a succeeded call again where its policy allows (auto: runs; ask: checks "
        "its files first; never: refused)",
    )
    replay.add_argument(
        "--json", action="store_true", help="no live output: print the structured result as JSON"
    )


def _add_recover(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    recover = _subparser(
        commands,
        "recover",
        cmd_recover,
        "List a run's steps that did not end cleanly, with what to do about each.",
        RECOVER_EPILOG,
    )
    recover.add_argument("run_id", metavar="RUN_ID", help="the agent run to recover")
    recover.add_argument(
        "--json", action="store_true", help="a JSON array of {call, action, reason}"
    )


def _add_wait(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    wait = _subparser(
        commands, "wait", cmd_wait, "Wait for a call to be final and show its result.", WAIT_EPILOG
    )
    wait.add_argument("call_id", metavar="CALL_ID", help="a call id, or a unique prefix of one")
    wait.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=60.0,
        help="give up waiting after this long (default 60; the call goes on)",
    )
    wait.add_argument("--json", action="store_true", help="print the structured result as JSON")


def _add_approvals(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    approvals = _subparser(
        commands, "approvals", cmd_approvals, "List calls waiting for approval.", APPROVALS_EPILOG
    )
    approvals.add_argument("--json", action="store_true", help="a JSON array of the entries")
    for name, approve, summary in (
        ("approve", True, "Approve a pending call: it runs now."),
        ("deny", False, "Deny a pending call: it never runs."),
    ):
        answer = _subparser(commands, name, cmd_answer, summary, ANSWER_EPILOG)
        answer.set_defaults(approve=approve)
        answer.add_argument(
            "call_id", metavar="CALL_ID", help="a pending call's id, or a unique prefix of one"
        )
        answer.add_argument("--reason", metavar="TEXT", help="why; kept in the call's history")


def _add_classify(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    classify = _subparser(
        commands,
        "classify",
        cmd_classify,
        "Say what a command may do and whether it may run again (nothing runs).",
        CLASSIFY_EPILOG,
    )
    how = classify.add_mutually_exclusive_group()
    how.add_argument("--json", action="store_true", help="the verdict and its parts as JSON")
    how.add_argument(
        "--explain", action="store_true", help="every part, the rule that decided it and why"
    )
    classify.add_argument(
        "--cwd", metavar="DIR", help="classify as if run here (default: the current directory)"
    )
    classify.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="CMD…", help="the command line to classify"
    )


def _add_rules(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    rules = _subparser(
        commands,
        "rules",
        _rules_without_action,
        "Work with rule files.",
        "examples:\n  shellward rules check\n  shellward rules check my-rules.toml\n"
        "  shellward rules reload\n",
    )
    actions = rules.add_subparsers(title="actions", metavar="ACTION")
    check = _subparser(actions, "check", cmd_rules_check, "Validate rule files.", RULES_EPILOG)
    check.add_argument("files", nargs="*", metavar="FILE", help="rule files (TOML) to check")
    _subparser(
        actions,
        "reload",
        cmd_rules_reload,
        "Make the daemon read its rule files again (as SIGHUP does).",
        RELOAD_EPILOG,
    )


def _rules_without_action(args: argparse.Namespace) -> int:
    raise UsageError(
        "say what to do with the rules: `shellward rules check [FILE…]` or `shellward rules reload`"
    )


def _add_status(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    status = _subparser(commands, "status", cmd_status, "Show the daemon's state.", STATUS_EPILOG)
    status.add_argument("--json", action="store_true", help="the status as JSON")


def _add_tools(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tools = _subparser(
        commands, "tools", cmd_tools, "List the tools the daemon offers, classified.", TOOLS_EPILOG
    )
    tools.add_argument(
        "--json", action="store_true", help="a JSON array of every field of every tool"
    )


def _add_call(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    call = _subparser(
        commands,
        "call",
        cmd_call,
        "Call a tool (a file tool, an MCP server's tool) through the ledger.",
        CALL_EPILOG,
    )
    call.add_argument("tool", metavar="TOOL", help="the tool's name, as `shellward tools` shows")
    call.add_argument(
        "--arg",
        metavar="KEY=VALUE",
        type=_tool_argument,
        action="append",
        help="one argument; VALUE is JSON if it parses as JSON, else a string; repeatable",
    )
    call.add_argument("--args", metavar="JSON", help="a JSON object of arguments (--arg wins)")
    call.add_argument(
        "--cwd",
        metavar="DIR",
        help="call from here: its workspace is the one file paths are relative to "
        "(default: the current directory)",
    )
    _add_identity(call)
    call.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive(float),
        help="the call's deadline (default: the server's, or the daemon's)",
    )
    call.add_argument(
        "--user", metavar="U", help="the user the call is made for (default: the daemon's)"
    )
    call.add_argument(
        "--json",
        action="store_true",
        help="print only the structured result, with `output` and `idempotency_key`, as JSON",
    )


# --- entry point ------------------------------------------------------------------------


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
        _error(exc.message)
        return EXIT_USAGE
    except ShellwardError as exc:
        _error(exc.message)
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Point stdout at /dev/null so that the interpreter's final flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
