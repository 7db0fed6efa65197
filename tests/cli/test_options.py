"""Options shared by every command: connection options before or after the command,
``--json`` and the identity pair defined once."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from shellward.cli import build_parser, main
from tests.cli.conftest import Outcome
from tests.helpers import Daemon

COMMANDS = ("run", "ledger", "show", "replay", "recover", "wait", "approvals", "approve",
            "deny", "classify", "rules", "status", "tools", "call")  # fmt: skip


def test_connection_options_work_after_the_command(
    cli_daemon: Daemon, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["status", "--socket", str(cli_daemon.socket), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["socket"] == str(cli_daemon.socket)
    # After the command wins over before it; an absent one leaves the earlier value alone.
    nowhere = tmp_path / "nowhere.sock"
    assert main(["--socket", str(nowhere), "status", "--socket", str(cli_daemon.socket)]) == 0
    assert main(["--socket", str(cli_daemon.socket), "status"]) == 0
    assert main(["--socket", str(cli_daemon.socket), "status", "--socket", str(nowhere)]) == 1
    assert f"no shellward daemon answers at unix:{nowhere}" in capsys.readouterr().err


def test_every_command_takes_the_connection_options() -> None:
    parser = build_parser()
    for command in COMMANDS:
        extra = {"show": ["x"], "recover": ["r"], "wait": ["x"], "approve": ["x"],
                 "deny": ["x"], "call": ["t"], "rules": []}.get(command, [])  # fmt: skip
        args = parser.parse_args([command, *extra, "--socket", "/s", "--tcp", "h:1",
                                  "--token", "t"])  # fmt: skip
        assert (args.socket, args.address, args.token) == ("/s", "h:1", "t"), command
        default = parser.parse_args(["--address", "h:2", command, *extra])
        assert default.address == "h:2" and default.socket is None, command


def test_words_after_the_double_dash_stay_the_command(
    shellward_process: Callable[..., subprocess.CompletedProcess[bytes]],
) -> None:
    done = shellward_process("run", "--", "echo", "--socket", "elsewhere")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"--socket elsewhere\n"


def test_identity_goes_in_pairs_for_every_command_that_takes_it(
    shellward: Callable[..., Outcome],
) -> None:
    for argv in (["run", "--run-id", "r", "--", "true"], ["call", "read_file", "--step-id", "s"],
                 ["replay", "--run-id", "r"]):  # fmt: skip
        outcome = shellward(*argv)
        assert outcome.code == 2, argv
        assert "--run-id and --step-id go together" in outcome.err
