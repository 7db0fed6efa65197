"""The sandbox's relay on its own (no bwrap): what a command meets when its connection
cannot be handed over to the daemon's proxy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from shellwardd.egress import relay


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_connection_the_relay_cannot_hand_over_is_told_why(tmp_path: Path) -> None:
    # The call's proxy socket is gone (the call ended, or the daemon did): the command gets
    # an answer that says so, not an empty reply that leaves it guessing.
    port = _free_port()
    prefix = relay.command_prefix(relay.python())
    prefix[-2:] = [str(port), str(tmp_path / "no-proxy.sock")]
    command = f"curl -sS -m 10 -x http://127.0.0.1:{port} http://svc.test/x"
    process = subprocess.Popen(
        [*prefix, "/bin/sh", "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the relay's own process outlives the command: end both
    )
    try:
        stdout, stderr = process.communicate(timeout=30)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr
    assert b"cannot reach the daemon's proxy" in stdout
    assert b"run the command again" in stdout
