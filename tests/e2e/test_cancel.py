"""CancelCall, `shellward cancel`, and a stream its client abandons: the running command
is killed (no process left), and the call ends as the replay table says of a killed call."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from shellward import Client, InvalidRequest
from shellward.cli import main
from shellward.types import CallStatus, Code, CommandResult
from shellward.v1 import shellward_pb2 as pb
from shellward.v1 import shellward_pb2_grpc as pb_grpc
from tests.helpers import Daemon, host_processes, unique_sleep, wait_for

SLEEP_341, SLEEP_342, SLEEP_343 = unique_sleep(341), unique_sleep(342), unique_sleep(343)


@pytest.fixture(scope="module")
def daemon(module_daemon: Daemon) -> Daemon:
    """One daemon for the module: each test cancels its own call, of its own run id."""
    return module_daemon


@pytest.fixture
def workspace(daemon: Daemon) -> Path:
    return daemon.workspace


def _started(client: Client, run_id: str) -> str:
    wait_for(lambda: _status(client, run_id) is CallStatus.STARTED)
    return client.get_call(run_id=run_id, step_id="1").call_id


def _status(client: Client, run_id: str) -> CallStatus | None:
    try:
        return client.get_call(run_id=run_id, step_id="1").status
    except Exception:
        return None


def test_cancel_call_kills_a_running_command_and_records_who(
    client: Client, workspace: Path
) -> None:
    answers: list[CommandResult] = []
    command = f"touch made.txt; {SLEEP_341}"
    runner = threading.Thread(
        target=lambda: answers.append(
            client.run_command(command, cwd=workspace, run_id="c1", step_id="1")
        )
    )
    runner.start()
    call_id = _started(client, "c1")
    wait_for(lambda: host_processes(SLEEP_341))

    entry = client.cancel(call_id, reason="wrong branch")
    runner.join(timeout=60)

    assert entry.status is CallStatus.UNCERTAIN and entry.code is Code.SIDE_EFFECT_UNCERTAIN
    assert "cancelled by" in entry.note and "wrong branch" in entry.note
    assert answers and answers[0].code is Code.SIDE_EFFECT_UNCERTAIN
    assert not host_processes(SLEEP_341)
    with pytest.raises(InvalidRequest, match="nothing to cancel"):
        client.cancel(call_id)


def test_an_abandoned_stream_cancels_its_call(daemon: Daemon, client: Client) -> None:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stream = pb_grpc.ShellwardStub(channel).RunCommand(
            pb.RunCommandRequest(command=SLEEP_342, run_id="c2", step_id="1")
        )
        assert next(stream).HasField("accepted")
        _started(client, "c2")
        # The command itself runs (a cancel during the sandbox's set-up ends the call
        # failed/INTERRUPTED instead: nothing ran).
        wait_for(lambda: host_processes(SLEEP_342))
        stream.cancel()  # what Ctrl-C in `shellward run` does to its stream
    wait_for(lambda: (_status(client, "c2") or CallStatus.STARTED).is_final)
    entry = client.get_call(run_id="c2", step_id="1")
    assert entry.status is CallStatus.UNCERTAIN and "went away" in entry.note
    assert not host_processes(SLEEP_342)


def test_shellward_cancel_on_the_command_line(
    daemon: Daemon, client: Client, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = threading.Thread(
        target=lambda: client.run_command(SLEEP_343, cwd=workspace, run_id="c3", step_id="1")
    )
    runner.start()
    call_id = _started(client, "c3")
    wait_for(lambda: host_processes(SLEEP_343))
    code = main(["--socket", str(daemon.socket), "cancel", call_id[:8], "--json"])
    runner.join(timeout=60)
    assert code == 0
    assert '"status": "uncertain"' in capsys.readouterr().out
    assert not host_processes(SLEEP_343)
