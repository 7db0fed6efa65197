"""`shellward replay`, `recover`, `approvals`, `approve`, `deny`, `wait`, `ledger --run`'s
replay verdicts and `rules reload`, against real daemons."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shellward import CallStatus, Client, Code, Idempotency, LedgerEntry, ReplayPolicy
from shellward._render import Style, approvals_table
from shellward.cli import main
from tests.cli.conftest import Outcome
from tests.helpers import Daemon, start_daemon

Shellward = Callable[..., Outcome]


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> str:
    return f"cli-replay-{request.node.name}"


@pytest.fixture
def folder(cli_daemon: Daemon, run_id: str) -> Path:
    """A directory of this test's own in the shared daemon's workspace."""
    path = cli_daemon.workspace / run_id
    path.mkdir()
    return path


@pytest.fixture
def cli_client(cli_daemon: Daemon) -> Iterator[Client]:
    with cli_daemon.client() as c:
        yield c


def _summary_call_id(err: str) -> str:
    """The call id of the summary line: `shellward: call <id> · …`."""
    summary = next(line for line in err.splitlines() if line.startswith("shellward: call "))
    return summary.split()[2]


def _pending(shellward: Shellward, call_id: str) -> list[str] | None:
    """The `shellward approvals` row of ``call_id``, split on tabs; None if not listed."""
    outcome = shellward("approvals")
    assert outcome.code == 0, outcome.err
    rows = [line.split("\t") for line in outcome.out.splitlines()[1:]]
    return next((row for row in rows if row[0] == call_id[:8]), None)


def test_a_succeeded_step_is_replayed_without_running_again(
    shellward: Shellward, cli_client: Client, folder: Path, run_id: str
) -> None:
    first = cli_client.run_command("echo x >> log.txt", cwd=folder, run_id=run_id, step_id="s1")
    assert first.ok and first.idempotency is Idempotency.CONDITIONAL

    recorded = shellward("replay", "--run-id", run_id, "--step-id", "s1")
    assert recorded.code == 0, recorded.err
    summary, content = recorded.err.strip().splitlines()
    assert summary.startswith(f"shellward: call {first.call_id} · succeeded · OK · exit 0")
    assert summary.endswith("replayed from the ledger")
    assert "nothing ran now" in content

    # --rerun of a conditional call checks its files first: all as it left them.
    rerun = shellward("replay", "--rerun", first.call_id[:8])
    assert rerun.code == 0, rerun.err
    assert "ALREADY_APPLIED" in rerun.err and "nothing ran now" in rerun.err
    as_json = json.loads(shellward("replay", "--json", "--rerun", first.call_id).out)
    assert as_json["ok"] is True and as_json["code"] == "ALREADY_APPLIED"
    assert as_json["call_id"] == first.call_id
    assert (folder / "log.txt").read_text() == "x\n"


def test_a_conflict_waits_for_approval_then_runs(
    shellward: Shellward, cli_client: Client, folder: Path, run_id: str
) -> None:
    first = cli_client.run_command("echo x >> log.txt", cwd=folder, run_id=run_id, step_id="s1")
    assert first.ok
    with (folder / "log.txt").open("a") as log:
        log.write("someone else\n")

    replay = shellward("replay", "--rerun", "--run-id", run_id, "--step-id", "s1")
    assert replay.code == 125 and replay.out == ""
    attempt = _summary_call_id(replay.err)
    assert attempt != first.call_id
    assert "pending_approval · CONFLICT" in replay.err
    assert f"changed by someone else since ({folder.name}/log.txt)" in replay.err
    assert (folder / "log.txt").read_text() == "x\nsomeone else\n"

    row = _pending(shellward, attempt)
    assert row is not None
    assert row[2:5] == ["CONFLICT", "conditional/ask", "echo x >> log.txt"]
    assert "changed by someone else" in row[5]
    listed = json.loads(shellward("approvals", "--json").out)
    assert attempt in {entry["call_id"] for entry in listed}
    # The pending attempt is the step's open end: recover and the ledger say "ask".
    recover = shellward("recover", run_id).out.splitlines()
    assert recover[1].split("\t")[:5] == [
        "s1",
        attempt[:8],
        "pending_approval",
        "conditional/ask",
        "ask",
    ]
    ledger = shellward("ledger", "--run", run_id).out.splitlines()
    assert [row.split("\t")[4] for row in ledger[1:]] == [
        "conditional/ask → ask",
        "conditional/ask",
    ]

    approved = shellward("approve", attempt[:8], "--reason", "the edit is fine")
    assert approved.code == 0, approved.err
    assert approved.out.startswith(f"call {attempt} approved: it runs now")
    waited = shellward("wait", attempt[:8])
    assert waited.code == 0, waited.err
    assert _summary_call_id(waited.err) == attempt
    assert "succeeded · OK · exit 0" in waited.err
    assert (folder / "log.txt").read_text() == "x\nsomeone else\nx\n"
    assert _pending(shellward, attempt) is None
    assert shellward("recover", run_id).err.startswith("shellward: nothing to recover")


def test_deny_a_call_that_needs_approval(
    shellward: Shellward, cli_client: Client, folder: Path, run_id: str
) -> None:
    asked = cli_client.run_command("sudo touch made.txt", cwd=folder, run_id=run_id, step_id="s1")
    assert asked.code is Code.NEEDS_APPROVAL and asked.status is CallStatus.PENDING_APPROVAL
    row = _pending(shellward, asked.call_id)
    assert row is not None and row[2] == "NEEDS_APPROVAL" and row[4] == "sudo touch made.txt"

    still = shellward("wait", "--timeout", "0.2", asked.call_id[:8])
    assert still.code == 125 and still.out == ""
    assert still.err.startswith(f"shellward: call {asked.call_id} is still pending_approval")
    assert "shellward approvals" in still.err

    denied = shellward("deny", asked.call_id[:8], "--reason", "no root")
    assert denied.code == 0, denied.err
    assert denied.out == f"call {asked.call_id} denied: nothing ran\n"
    assert _pending(shellward, asked.call_id) is None
    waited = shellward("wait", asked.call_id)
    assert waited.code == 125
    assert "denied · PERMISSION_DENIED" in waited.err and "A human denied this call" in waited.err
    again = shellward("deny", asked.call_id)
    assert again.code == 2 and "not waiting for approval" in again.err
    assert not (folder / "made.txt").exists()


def test_recover_says_refuse_for_uncertain_and_replay_for_failed_idempotent(
    shellward: Shellward, cli_client: Client, folder: Path, run_id: str
) -> None:
    uncertain = cli_client.run_command(
        "touch x; rm -f y; sleep 30", cwd=folder, run_id=run_id, step_id="s1", timeout=1
    )
    assert uncertain.code is Code.SIDE_EFFECT_UNCERTAIN
    assert uncertain.idempotency is Idempotency.NON_IDEMPOTENT
    failed = cli_client.run_command("ls missing", cwd=folder, run_id=run_id, step_id="s2")
    assert failed.status is CallStatus.FAILED and failed.idempotency is Idempotency.IDEMPOTENT
    done = cli_client.run_command("echo fine", cwd=folder, run_id=run_id, step_id="s3")
    assert done.ok

    outcome = shellward("recover", run_id)
    assert outcome.code == 0, outcome.err
    header, *rows = [line.split("\t") for line in outcome.out.splitlines()]
    assert header == ["STEP", "CALL", "STATUS", "VERDICT", "ACTION", "REASON"]
    assert [row[:5] for row in rows] == [
        ["s1", uncertain.call_id[:8], "uncertain", "non_idempotent/never", "refuse"],
        ["s2", failed.call_id[:8], "failed", "idempotent/auto", "replay"],
    ]
    assert "may have partly or fully run" in rows[0][5]
    as_json = json.loads(shellward("recover", run_id, "--json").out)
    assert [(item["call"]["call_id"], item["action"]) for item in as_json] == [
        (uncertain.call_id, "refuse"),
        (failed.call_id, "replay"),
    ]

    ledger = shellward("ledger", "--run", run_id).out.splitlines()
    assert [row.split("\t")[4] for row in ledger[1:]] == [
        "idempotent/auto",
        "idempotent/auto → replay",
        "non_idempotent/never → refuse",
    ]

    refused = shellward("replay", uncertain.call_id[:8])
    assert refused.code == 125 and refused.out == ""
    assert "nothing ran · SIDE_EFFECT_UNCERTAIN" in refused.err
    again = shellward("replay", "--run-id", run_id, "--step-id", "s2")
    assert again.code == 2
    assert "missing" in again.err and "COMMAND_FAILED · exit 2" in again.err
    assert _summary_call_id(again.err) != failed.call_id  # a new attempt ran


def test_recover_of_a_clean_run_has_nothing_to_do(shellward: Shellward) -> None:
    outcome = shellward("recover", "cli-replay-no-such-run")
    assert outcome.code == 0 and outcome.out == ""
    assert outcome.err.startswith("shellward: nothing to recover in run 'cli-replay-no-such-run'")


def test_bad_command_lines(shellward: Shellward) -> None:
    for args in (
        ("replay",),
        ("replay", "abc", "--run-id", "r", "--step-id", "s"),
        ("replay", "--run-id", "r"),
        ("wait", "abc", "--timeout", "0"),
    ):
        outcome = shellward(*args)
        assert outcome.code == 2, args
        assert "shellward" in outcome.err and "Traceback" not in outcome.err
    unknown = shellward("approve", "0000dead-0000-0000-0000-000000000000")
    assert unknown.code == 1 and unknown.err.startswith("shellward: no call '0000dead-")


RULES = """\
[[rule]]
id = "frobnicate-list"
program = "frobnicate"
subcommand = "list"
idempotency = "{idempotency}"
replay = "{replay}"
reason = "frobnicate list only prints the frobs"
match = ["frobnicate list --all"]
"""


def test_rules_reload_keeps_the_last_good_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "user-rules.toml"
    rules.write_text(RULES.format(idempotency="idempotent", replay="auto"))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    daemon = start_daemon(
        tmp_path / "run" / "sw.sock", tmp_path / "state", workspace, "--user-rules", str(rules)
    )

    def shellward(*args: str) -> Outcome:
        code = main(["--socket", str(daemon.socket), *args])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    def verdict() -> str:
        outcome = shellward("classify", "--cwd", str(workspace), "frobnicate list")
        assert outcome.code == 0, outcome.err
        return outcome.out.splitlines()[0]

    try:
        assert verdict() == "idempotent/auto"
        rules.write_text(RULES.format(idempotency="conditional", replay="ask"))
        reloaded = shellward("rules", "reload")
        assert reloaded.code == 0, reloaded.err
        assert f"reloaded: {rules}" in reloaded.out.splitlines()
        assert verdict() == "conditional/ask"

        rules.write_text(RULES.format(idempotency="sometimes", replay="ask"))
        broken = shellward("rules", "reload")
        assert broken.code == 1
        assert "the last good rules stay in force" in broken.err
        assert str(rules) in broken.err and "sometimes" in broken.err
        assert f"in force: {rules}" in broken.out.splitlines()
        assert verdict() == "conditional/ask"
    finally:
        daemon.stop(signal.SIGKILL)


def test_approvals_table_cuts_long_commands_on_a_terminal_only() -> None:
    entry = LedgerEntry(
        call_id="abcdef12-0000-0000-0000-000000000000",
        run_id="r",
        step_id="s",
        tool_name="run_command",
        input_hash="sha256:0",
        status=CallStatus.PENDING_APPROVAL,
        idempotency=Idempotency.CONDITIONAL,
        replay_policy=ReplayPolicy.ASK,
        command="sudo echo " + "a" * 80,
        code=Code.NEEDS_APPROVAL,
        content="needs a human",
        created_at=time.time() - 90,
    )
    plain = approvals_table([entry], Style()).splitlines()[1].split("\t")
    assert plain == [
        "abcdef12",
        "1m 30s",
        "NEEDS_APPROVAL",
        "conditional/ask",
        entry.command,
        "needs a human",
    ]
    row = approvals_table([entry], Style(tty=True)).splitlines()[1]
    assert entry.command not in row and "sudo echo aaa" in row and "…" in row
    assert row.endswith("needs a human")


def test_undo_puts_back_what_a_call_created_and_twice_is_already_applied(
    shellward_process: Callable[..., subprocess.CompletedProcess[bytes]], folder: Path
) -> None:
    created = shellward_process("run", "--json", "--cwd", str(folder), "--", "echo u > u.txt")
    call_id = json.loads(created.stdout)["call_id"]
    assert (folder / "u.txt").exists()
    first = shellward_process("undo", "--cwd", str(folder), call_id[:12])
    assert first.returncode == 0, first.stderr
    assert not (folder / "u.txt").exists()
    again = shellward_process("undo", "--json", "--cwd", str(folder), call_id)
    assert again.returncode == 0 and json.loads(again.stdout)[0]["code"] == "ALREADY_APPLIED"
    usage = shellward_process("undo", "--run", "r1")
    assert usage.returncode == 2 and b"--run and --from-step go together" in usage.stderr
