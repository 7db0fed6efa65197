"""The CLI's rendering without a daemon: colour rules, aligned tables, JSON, effects, exits."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from shellward import _render
from shellward._render import Style
from shellward.cli import EXIT_NOT_RUN, EXIT_TIMEOUT, run_exit_code
from shellward.types import (
    CallStatus,
    CapturedOutput,
    Code,
    CommandResult,
    DaemonStatus,
    EffectKind,
    FileEffect,
    Idempotency,
    LedgerEntry,
    ReplayPolicy,
    WorkspaceStatus,
)

ENTRY = LedgerEntry(
    call_id="0123456789abcdef",
    run_id="r",
    step_id="s",
    tool_name="run_command",
    input_hash="sha256:ab",
    status=CallStatus.SUCCEEDED,
    idempotency=Idempotency.CONDITIONAL,
    replay_policy=ReplayPolicy.ASK,
    command="make build && echo " + "x" * 200,
    exit_code=0,
    created_at=1_700_000_000.0,
    stdout=CapturedOutput(b"ok\xff\x1b[31m", total_bytes=9000, truncated=True),
    file_effects=(
        FileEffect("out/app", EffectKind.CREATED, after_hash="sha256:" + "c" * 64, size=12),
        FileEffect("new.txt", EffectKind.RENAMED, renamed_from="old.txt"),
    ),
)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Style.for_stream(_Terminal()) == Style(tty=True, colour=True)
    assert Style.for_stream(io.StringIO()) == Style(tty=False, colour=False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert Style.for_stream(_Terminal()) == Style(tty=True, colour=False)


def test_terminal_table_is_aligned_coloured_and_cut_to_the_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    plain = _render.ledger_table([ENTRY, replace(ENTRY, command="ls")], Style(tty=True))
    header, long_row, short_row = plain.splitlines()
    assert header.index("COMMAND") == long_row.index("make build") == short_row.index("ls")
    assert len(long_row) == 100 and long_row.endswith("x…")
    coloured = _render.ledger_table([ENTRY], Style(tty=True, colour=True))
    assert "\033[33mconditional/ask" in coloured and "\033[32msucceeded" in coloured


def test_details_show_effects_and_safe_output() -> None:
    text = _render.entry_details(ENTRY, Style())
    effects = text.split("file effects\n", 1)[1].split("\n\n", 1)[0]
    assert effects.splitlines()[1].split("\t") == ["  created", "- → cccccccccccc", "12", "out/app"]
    assert effects.splitlines()[2].endswith("\told.txt → new.txt")
    stdout = text.split("stdout\n", 1)[1].split("\n\n", 1)[0]
    assert "(9000 bytes, truncated: 8 kept)" in stdout
    assert "ok\ufffd\ufffd[31m" in stdout  # the undecodable byte and the escape are defused


def test_json_turns_bytes_into_text_and_enums_into_values() -> None:
    data = json.loads(_render.to_json(ENTRY))
    assert data["stdout"]["data"] == "ok\ufffd\x1b[31m"
    assert data["status"] == "succeeded" and data["replay_policy"] == "ask"
    assert data["file_effects"][0] == {
        "path": "out/app", "kind": "created", "before_hash": "", "after_hash": "sha256:" + "c" * 64,
        "size": 12, "renamed_from": "", "from_rescan": False, "before_mode": 0,
    }  # fmt: skip


def test_status_shows_index_progress() -> None:
    status = DaemonStatus(
        version="1.2", socket="/s", state_dir="/st", ledger_path="/st/l", sandbox_enabled=False,
        sandbox_detail="--no-sandbox", workspaces=("/ws",), running_calls=2, uptime_seconds=3725,
        workspace_status=(
            WorkspaceStatus("/ws", "indexing", 41_200, 100_000),
            WorkspaceStatus("/other", "ready", 1_500, 1_500),
        ),
    )  # fmt: skip
    lines = _render.status_text(status, Style()).splitlines()
    assert "workspace: /ws (indexing 41,200 / 100,000 files)" in lines
    assert "workspace: /other (ready, 1,500 files)" in lines
    assert "sandbox: DISABLED (--no-sandbox)" in lines
    assert "uptime: 1h 02m" in lines and "running calls: 2" in lines


def test_status_shows_each_workspace_path_and_its_notes() -> None:
    status = DaemonStatus(
        version="1.2", socket="/s", state_dir="/st", ledger_path="/st/l", sandbox_enabled=True,
        sandbox_detail="bwrap", workspaces=("/ws", "/b"), running_calls=0, uptime_seconds=1,
        workspace_status=(
            WorkspaceStatus("/ws", "ready", path="/ws/.venv/bin:/usr/bin",
                            path_notes=("/root/.cargo/bin is left off PATH",)),
            WorkspaceStatus("/b", "ready", path="/usr/bin"),
        ),
    )  # fmt: skip
    lines = _render.status_text(status, Style()).splitlines()
    assert "PATH: /ws/.venv/bin:/usr/bin (in /ws)" in lines
    assert "PATH: /usr/bin (in /b)" in lines
    assert "PATH note: /root/.cargo/bin is left off PATH" in lines


class _Ledger:
    """Stands in for the client in run_exit_code: knows one call's time limit."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    def get_call(self, call_id: str) -> LedgerEntry:
        return replace(ENTRY, call_id=call_id, timeout_seconds=self.timeout)


def _result(code: Code, exit_code: int | None, seconds: float) -> CommandResult:
    return CommandResult(
        ok=code is Code.OK, code=code, content="", call_id="c", retryable=False,
        idempotency=Idempotency.NON_IDEMPOTENT, replay_policy=ReplayPolicy.NEVER,
        status=CallStatus.UNCERTAIN, exit_code=exit_code,
        started_at=100.0, finished_at=100.0 + seconds,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("result", "accepted", "expected"),
    [
        (_result(Code.COMMAND_FAILED, 3, 1), True, 3),
        (_result(Code.OK, 0, 1), True, 0),
        (_result(Code.OK, 0, 1), False, 0),  # a recorded success, replayed
        (_result(Code.TIMEOUT, None, 5), True, EXIT_TIMEOUT),
        (_result(Code.SIDE_EFFECT_UNCERTAIN, None, 5.2), True, EXIT_TIMEOUT),  # ran its 5 s
        (_result(Code.SIDE_EFFECT_UNCERTAIN, None, 2), True, EXIT_NOT_RUN),  # daemon shut down
        # Refusals answered from the ledger carry the earlier call's exit status and times.
        (_result(Code.SIDE_EFFECT_UNCERTAIN, 3, 9), False, EXIT_NOT_RUN),
        (_result(Code.SIDE_EFFECT_UNCERTAIN, None, 9), False, EXIT_NOT_RUN),
        (_result(Code.IDEMPOTENCY_KEY_MISMATCH, 0, 1), False, EXIT_NOT_RUN),
        (_result(Code.SANDBOX_ERROR, None, 0), True, EXIT_NOT_RUN),
        (_result(Code.NEEDS_APPROVAL, None, 0), True, EXIT_NOT_RUN),
    ],
)
def test_run_exit_code(result: CommandResult, accepted: bool, expected: int) -> None:
    assert run_exit_code(_Ledger(timeout=5), result, accepted=accepted) == expected  # type: ignore[arg-type]


def test_commands_stay_on_one_line_without_terminal_escapes() -> None:
    entry = replace(ENTRY, command="printf 'a\nb'\t\033[2J")
    row = _render.ledger_table([entry], Style()).splitlines()[1]
    assert row.endswith("\tprintf 'a\\nb'\\t\ufffd[2J")
