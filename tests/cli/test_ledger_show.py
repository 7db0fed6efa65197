"""`shellward ledger` and `shellward show`: tables, full entries, JSON, unknown ids."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from shellward import Client, CommandResult
from tests.cli.conftest import Outcome
from tests.helpers import Daemon

Shellward = Callable[..., Outcome]


@pytest.fixture
def recorded(cli_daemon: Daemon, request: pytest.FixtureRequest) -> list[CommandResult]:
    """Two calls under a run id of this test's own: one that succeeds, one binary and failing."""
    run_id = f"cli-{request.node.name}"
    with cli_daemon.client() as client:
        return [
            _run(client, "echo first", run_id, "s1", cli_daemon),
            _run(client, r"printf 'bin\377'; echo err >&2; exit 4", run_id, "s2", cli_daemon),
        ]


def _run(client: Client, command: str, run_id: str, step_id: str, daemon: Daemon) -> CommandResult:
    return client.run_command(command, run_id=run_id, step_id=step_id, cwd=daemon.workspace)


def test_ledger_lists_recent_calls_as_a_plain_table(
    shellward: Shellward, recorded: list[CommandResult]
) -> None:
    first, second = recorded
    outcome = shellward("ledger", "--run", first.run_id)
    assert outcome.code == 0
    header, *rows = outcome.out.splitlines()
    assert header.split("\t") == ["TIME", "CALL", "STATUS", "EXIT", "VERDICT", "COMMAND"]
    assert "\033[" not in outcome.out  # not a terminal: no colour
    # Newest first; short call ids; status, exit code, verdict and command per row.
    assert [row.split("\t")[1:4] for row in rows] == [
        [second.call_id[:8], "failed", "4"],
        [first.call_id[:8], "succeeded", "0"],
    ]
    assert rows[1].split("\t")[4] == f"{first.idempotency.value}/{first.replay_policy.value}"
    assert rows[1].endswith("\techo first")


def test_ledger_limit_and_empty_run(shellward: Shellward, recorded: list[CommandResult]) -> None:
    limited = shellward("ledger", "--run", recorded[0].run_id, "--limit", "1")
    assert len(limited.out.splitlines()) == 2
    empty = shellward("ledger", "--run", "no-such-run")
    assert empty.code == 0 and empty.out == ""
    assert "no calls in the ledger for run 'no-such-run'" in empty.err


def test_ledger_json_has_full_entries_with_text_output(
    shellward: Shellward, recorded: list[CommandResult]
) -> None:
    outcome = shellward("ledger", "--run", recorded[0].run_id, "--json")
    entries = json.loads(outcome.out)
    assert [e["call_id"] for e in entries] == [r.call_id for r in reversed(recorded)]
    failing = entries[0]
    assert failing["status"] == "failed" and failing["exit_code"] == 4
    assert failing["code"] == "COMMAND_FAILED"
    assert failing["stdout"]["data"] == "bin\ufffd"  # undecodable byte replaced
    assert failing["stdout"]["total_bytes"] == 4 and failing["stdout"]["truncated"] is False
    assert failing["stderr"]["data"] == "err\n"
    assert failing["verdict"]["parts"] and failing["started_at"] > 0
    assert failing["idempotency"] in {"idempotent", "conditional", "non_idempotent"}


def test_show_prints_every_part_of_an_entry(
    shellward: Shellward, recorded: list[CommandResult]
) -> None:
    call = recorded[1]
    outcome = shellward("show", call.call_id)
    assert outcome.code == 0
    text = outcome.out
    for expected in (
        f"call: {call.call_id}",
        "status: failed",
        "code: COMMAND_FAILED",
        "exit code: 4",
        f"run / step: {call.run_id} / s2",
        "input hash: sha256:",
        "started: ",
        "finished: ",
        "verdict\n",
        "decided by:",
        "file effects\n",
        "stdout\n  (4 bytes",
        "stderr\n  (4 bytes",
        "  err",
    ):
        assert expected in text, expected


def test_show_accepts_a_short_id_and_json(
    shellward: Shellward, recorded: list[CommandResult]
) -> None:
    call = recorded[0]
    short = shellward("show", call.call_id[:8])
    assert short.code == 0 and f"call: {call.call_id}" in short.out
    as_json = json.loads(shellward("show", call.call_id, "--json").out)
    assert as_json["call_id"] == call.call_id and as_json["command"] == "echo first"
    assert as_json["stdout"]["data"] == "first\n" and as_json["file_effects"] == []


def test_show_lists_the_files_a_call_changed(shellward: Shellward, cli_daemon: Daemon) -> None:
    with cli_daemon.client() as client:
        result = client.run_command("echo data > made.txt", cwd=cli_daemon.workspace)
    outcome = shellward("show", result.call_id)
    effects = outcome.out.split("file effects\n", 1)[1].split("\n\n", 1)[0].splitlines()
    kind, hashes, size, path = effects[1].strip().split("\t")
    assert (kind, size, path) == ("created", "5", "made.txt")
    assert hashes.startswith("- → ") and len(hashes) == len("- → ") + 12


def test_show_unknown_id_is_a_clear_error(shellward: Shellward) -> None:
    outcome = shellward("show", "0000dead-0000-0000-0000-000000000000")
    assert outcome.code == 1 and outcome.out == ""
    assert outcome.err.startswith("shellward: no call '0000dead-")
    assert "shellward ledger" in outcome.err and "Traceback" not in outcome.err


def test_show_prints_the_call_history(shellward: Shellward, recorded: list[CommandResult]) -> None:
    outcome = shellward("show", recorded[1].call_id)
    history = outcome.out.split("history\n", 1)[1].splitlines()
    assert [line.split()[2] for line in history] == ["planned", "started", "failed"]
    shown = json.loads(shellward("show", recorded[1].call_id, "--json").out)
    assert [step["status"] for step in shown["transitions"]] == ["planned", "started", "failed"]
