"""`shellward rules check` (no daemon) and `shellward status` (with and without a daemon)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from shellward.cli import main
from tests.cli.conftest import Outcome
from tests.helpers import Daemon

Shellward = Callable[..., Outcome]

GOOD_RULES = """\
[[rule]]
id = "frobnicate-list"
program = "frobnicate"
subcommand = "list"
idempotency = "idempotent"
replay = "auto"
reason = "frobnicate list only prints the frobs"
match = ["frobnicate list --all"]
"""

FAILING_EXAMPLE = GOOD_RULES.replace(
    'match = ["frobnicate list --all"]', 'match = ["frobnicate list", "frobnicate delete x"]'
)


@pytest.fixture
def check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Outcome]:
    """`shellward rules check ARGS…` in an empty directory with no user rule file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHELLWARD_USER_RULES", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    def run(*args: str) -> Outcome:
        code = main(["rules", "check", *args])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_good_file_passes(check: Callable[..., Outcome], tmp_path: Path) -> None:
    good = _write(tmp_path / "good.toml", GOOD_RULES)
    outcome = check(str(good))
    assert outcome.code == 0, outcome.out
    assert outcome.out == f"ok: {good}\n"


def test_a_failing_example_is_named_with_file_and_line(
    check: Callable[..., Outcome], tmp_path: Path
) -> None:
    broken = _write(tmp_path / "broken.toml", FAILING_EXAMPLE)
    outcome = check(str(broken))
    assert outcome.code == 1
    assert outcome.out.startswith(f"{broken}:8: ") and "frobnicate delete x" in outcome.out
    assert "1 problem(s)" in outcome.err


def test_bad_toml_and_missing_files_are_problems(
    check: Callable[..., Outcome], tmp_path: Path
) -> None:
    bad = _write(tmp_path / "bad.toml", "[[rule]\nprogram = \n")
    good = _write(tmp_path / "good.toml", GOOD_RULES)
    outcome = check(str(bad), str(good), str(tmp_path / "absent.toml"))
    assert outcome.code == 1
    lines = outcome.out.splitlines()
    assert f"ok: {good}" in lines
    assert any(line.startswith(f"{bad}:") for line in lines)
    assert f"{tmp_path / 'absent.toml'}: no such file" in lines
    assert "2 problem(s)" in outcome.err


def test_without_files_checks_builtins_and_the_repo_file(
    check: Callable[..., Outcome], tmp_path: Path
) -> None:
    clean = check()
    assert clean.code == 0 and clean.out == "ok: built-in rules\n"
    _write(tmp_path / ".shellward" / "rules.toml", FAILING_EXAMPLE)
    broken = check()
    assert broken.code == 1
    assert broken.out.startswith("ok: built-in rules\n.shellward/rules.toml:8: ")


def test_without_files_checks_the_user_file(check: Callable[..., Outcome], tmp_path: Path) -> None:
    user = _write(tmp_path / "config" / "shellward" / "rules.toml", GOOD_RULES)
    outcome = check()
    assert outcome.code == 0
    assert outcome.out.splitlines() == ["ok: built-in rules", f"ok: {user}"]


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
