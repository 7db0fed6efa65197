"""`shellward run`: live output, exit status, binary output, --json, timeouts, refusals."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from shellward import CallStatus
from tests.helpers import Daemon, host_processes, start_daemon, unique_sleep, wait_for

Shellward = Callable[..., subprocess.CompletedProcess[bytes]]


def _call_id(stderr: bytes) -> str:
    """The call id from the summary line: `shellward: call <id> · …`."""
    summary = stderr.decode().strip().splitlines()[-1]
    assert summary.startswith("shellward: call "), stderr
    return summary.split()[2]


def test_success_streams_output_and_exits_zero(
    shellward_process: Shellward, cli_daemon: Daemon
) -> None:
    done = shellward_process("run", "--", "echo", "hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello\n"
    summary = done.stderr.decode()
    assert "succeeded" in summary and "exit 0" in summary
    with cli_daemon.client() as client:
        entry = client.get_call(_call_id(done.stderr))
    assert entry.status is CallStatus.SUCCEEDED and entry.command == "echo hello"


def test_nonzero_exit_is_propagated_with_stderr(shellward_process: Shellward) -> None:
    done = shellward_process("run", "--", "echo oops >&2; exit 7")
    assert done.returncode == 7
    assert done.stdout == b""
    assert done.stderr.startswith(b"oops\n")
    assert b"COMMAND_FAILED" in done.stderr and b"exit 7" in done.stderr


def test_binary_output_survives_byte_for_byte(shellward_process: Shellward) -> None:
    done = shellward_process("run", "--", r"printf '\377\000\001\n\200'")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"\xff\x00\x01\n\x80"


def test_several_words_are_joined_with_shell_quoting(
    shellward_process: Shellward, cli_daemon: Daemon
) -> None:
    done = shellward_process("run", "--", "printf", "%s|", "a  b", "$HOME")
    assert done.stdout == b"a  b|$HOME|"
    with cli_daemon.client() as client:
        assert client.get_call(_call_id(done.stderr)).command == "printf '%s|' 'a  b' '$HOME'"


def test_cwd_defaults_to_the_current_directory(
    shellward_process: Shellward, cli_daemon: Daemon
) -> None:
    sub = cli_daemon.workspace / "sub"
    sub.mkdir(exist_ok=True)
    done = shellward_process(
        "run", "--env", "GREETING=hi there", "--", "pwd; echo $GREETING", cwd=sub
    )
    assert done.stdout.decode().splitlines() == [os.path.realpath(sub), "hi there"]


def test_json_prints_the_structured_result_only(shellward_process: Shellward) -> None:
    done = shellward_process("run", "--json", "--", "echo hi; echo warn >&2")
    assert done.returncode == 0
    result = json.loads(done.stdout)
    assert done.stderr == b""
    assert result["ok"] is True and result["code"] == "OK" and result["exit_code"] == 0
    assert result["stdout"] == "hi\n" and result["stderr"] == "warn\n"
    assert result["call_id"] == result["metadata"]["call_id"] != ""
    assert result["metadata"]["status"] == "succeeded"
    assert result["metadata"]["idempotency"] in {"idempotent", "conditional", "non_idempotent"}


def test_json_keeps_the_exit_status(shellward_process: Shellward) -> None:
    done = shellward_process("run", "--json", "--", "exit 3")
    assert done.returncode == 3
    assert json.loads(done.stdout)["code"] == "COMMAND_FAILED"


def test_timeout_exits_124_and_says_what_happened(shellward_process: Shellward) -> None:
    done = shellward_process("run", "--timeout", "1", "--", "sleep 30")
    assert done.returncode == 124
    lines = done.stderr.decode().strip().splitlines()
    assert "exit none" in lines[-2]
    assert "did not finish within 1s" in lines[-1]


def test_refused_call_has_no_exit_status_and_exits_125(
    shellward_process: Shellward, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = shellward_process("run", "--", "echo never", cwd=outside)
    assert done.returncode == 125
    assert done.stdout == b""
    assert b"PERMISSION_DENIED" in done.stderr
    assert b"outside the daemon's workspaces" in done.stderr


def test_same_step_again_replays_the_recorded_output(shellward_process: Shellward) -> None:
    ids = ("--run-id", "cli-replay", "--step-id", "s1")
    first = shellward_process("run", *ids, "--", "echo once; echo warn >&2")
    again = shellward_process("run", *ids, "--", "echo once; echo warn >&2")
    assert first.returncode == again.returncode == 0
    assert again.stdout == first.stdout == b"once\n"
    assert again.stderr.startswith(b"warn\n")
    assert b"replayed from the ledger" in again.stderr
    assert _call_id(again.stderr) == _call_id(first.stderr)


def test_same_step_with_another_command_runs_nothing(shellward_process: Shellward) -> None:
    ids = ("--run-id", "cli-mismatch", "--step-id", "s1")
    first = shellward_process("run", *ids, "--", "echo one")
    assert first.returncode == 0
    done = shellward_process("run", *ids, "--", "echo two")
    assert done.returncode == 125
    assert done.stdout == b""
    summary, content = done.stderr.decode().strip().splitlines()
    assert summary.startswith("shellward: nothing ran · IDEMPOTENCY_KEY_MISMATCH · earlier call ")
    assert _call_id(first.stderr) in summary
    assert "already used for a different input" in content


def test_usage_errors_exit_2(shellward_process: Shellward) -> None:
    for args in (("run",), ("run", "--"), ("run", "--run-id", "r", "--", "ls")):
        done = shellward_process(*args)
        assert done.returncode == 2, args
        assert done.stderr.startswith(b"shellward: ") and b"Traceback" not in done.stderr
    bad_env = shellward_process("run", "--env", "NOEQUALS", "--", "ls")
    assert bad_env.returncode == 2 and b"KEY=VALUE" in bad_env.stderr


def test_the_summary_names_the_files_a_run_created(shellward_process: Shellward) -> None:
    """As the README's tour says: the result lists hello.txt, created."""
    done = shellward_process("run", "--", "echo hello > tour-hello.txt")
    assert done.returncode == 0, done.stderr
    summary = done.stderr.decode().strip().splitlines()[-1]
    assert summary.endswith("· created tour-hello.txt"), summary


def test_a_fresh_refusal_is_not_called_an_earlier_call(shellward_process: Shellward) -> None:
    """A new request refused before it ran (cwd outside every workspace) has no earlier call:
    the summary must not say `earlier call … failed`."""
    ids = ("--run-id", "cli-fresh-refusal", "--step-id", "s1")
    done = shellward_process("run", *ids, "--cwd", "/etc", "--", "ls")
    assert done.returncode == 125
    summary = done.stderr.decode().strip().splitlines()[0]
    assert summary.startswith("shellward: nothing ran · PERMISSION_DENIED · refused, recorded as")
    assert "earlier call" not in summary


def test_an_address_without_a_port_or_token_says_what_to_pass(
    shellward_process: Shellward,
) -> None:
    no_token = shellward_process("--address", "127.0.0.1:7433", "status")
    assert no_token.returncode == 2
    assert b"pass --token" in no_token.stderr
    for address in ("localhost", "::1", "127.0.0.1:"):
        no_port = shellward_process("--address", address, "--token", "t", "status")
        assert no_port.returncode == 2, (address, no_port.stderr)
        assert b"has no port; give HOST:PORT" in no_port.stderr


def test_a_daemon_that_dies_during_a_call_is_not_called_absent(
    tmp_path: Path, workspace: Path
) -> None:
    """The command may have run: the message says so and how to find out, instead of
    `no shellward daemon answers … Start one`."""
    daemon = start_daemon(tmp_path / "run" / "s.sock", tmp_path / "state", workspace)
    sleep = unique_sleep(377)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}
    run = subprocess.Popen(
        [sys.executable, "-m", "shellward.cli", "--socket", str(daemon.socket),
         "run", "--", sleep],
        cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(lambda: bool(host_processes(sleep)), timeout=60)
        daemon.stop(signal.SIGKILL)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
        for process in host_processes(sleep):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(process.name), signal.SIGKILL)
    assert run.returncode == 1
    message = err.decode()
    assert "went away during call" in message and "may have run" in message
    assert "shellward show" in message
    assert "Start one" not in message


def test_piped_stdin_is_forwarded_and_part_of_the_identity(cli_daemon: Daemon) -> None:
    def run(*args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLWARD_")}
        return subprocess.run(
            [sys.executable, "-m", "shellward.cli", "--socket", str(cli_daemon.socket), *args],
            cwd=cli_daemon.workspace, env=env, input=stdin, capture_output=True, timeout=60,
            check=False,
        )  # fmt: skip

    done = run("run", "--", "cat", stdin=b"piped\n\x00\xff")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"piped\n\x00\xff"
    ignored = run("run", "--no-stdin", "--", "wc -c", stdin=b"piped\n")
    assert ignored.stdout.strip() == b"0"
    # The same step with other input is another call, not a replay of the first answer.
    ids = ("--run-id", "cli-stdin", "--step-id", "s1")
    assert run("run", *ids, "--", "cat", stdin=b"one\n").stdout == b"one\n"
    again = run("run", *ids, "--", "cat", stdin=b"one\n")
    assert again.stdout == b"one\n" and b"replayed from the ledger" in again.stderr
    other = run("run", *ids, "--", "cat", stdin=b"two\n")
    assert other.returncode == 125 and b"IDEMPOTENCY_KEY_MISMATCH" in other.stderr


def test_stdin_over_the_limit_is_refused_by_the_daemon(cli_daemon: Daemon) -> None:
    with cli_daemon.client() as client:
        result = client.run_command("wc -c", stdin=b"x" * (1024 * 1024 + 1))
    assert result.code.value == "INVALID_ARGUMENT"
    assert "stdin is 1048577 bytes, over the limit" in result.content
