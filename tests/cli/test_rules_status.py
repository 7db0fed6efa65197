"""`shellward rules` without an action, and `shellward status` (with and without a daemon)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from shellward.cli import main
from tests.cli.conftest import Outcome
from tests.helpers import Daemon

Shellward = Callable[..., Outcome]


def test_rules_without_an_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 2
    assert "shellward rules check" in capsys.readouterr().err


def test_status_describes_the_daemon(shellward: Shellward, cli_daemon: Daemon) -> None:
    outcome = shellward("status")
    assert outcome.code == 0, outcome.err
    fields = dict(line.split(": ", 1) for line in outcome.out.splitlines())
    assert fields["daemon"].startswith("reachable, version ")
    assert fields["socket"] == str(cli_daemon.socket)
    assert fields["state dir"] == str(cli_daemon.state_dir)
    assert fields["ledger"].startswith(str(cli_daemon.state_dir))
    assert fields["sandbox"].startswith("enabled")
    assert fields["workspace"].startswith(str(cli_daemon.workspace))
    assert fields["running calls"] == "0"
    assert fields["rules"]
    as_json = json.loads(shellward("status", "--json").out)
    assert as_json["socket"] == str(cli_daemon.socket) and as_json["sandbox_enabled"] is True


def test_no_daemon_is_exit_1_with_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    socket = tmp_path / "nobody-here.sock"
    for command in ("status", "ledger"):
        assert main(["--socket", str(socket), command]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith(f"shellward: no shellward daemon answers at unix:{socket}")
        assert "make serve" in captured.err and "Traceback" not in captured.err
