"""A command's stdin in the ledger: kept for a replay, and in the identity only when given."""

from __future__ import annotations

import json
from dataclasses import replace

from shellwardd import requests
from shellwardd.requests import CommandRequest
from shellwardd.watch.hashing import bytes_hash


def test_stdin_survives_the_ledger_for_a_replay() -> None:
    request = CommandRequest(command="cat", cwd="/ws", stdin=b"\x00binary\xff\n")
    assert requests.from_json(requests.to_json(request)).stdin == b"\x00binary\xff\n"


def test_a_call_recorded_before_stdin_existed_reads_back_without_it() -> None:
    recorded = requests.to_json(CommandRequest(command="cat", cwd="/ws")).replace(',"stdin":""', "")
    assert "stdin" not in recorded
    assert requests.from_json(recorded).stdin == b""


def test_stdin_is_part_of_the_identity_only_when_given() -> None:
    plain = CommandRequest(command="cat", cwd="/ws")
    with_input = replace(plain, stdin=b"one")
    assert requests.input_hash(with_input) != requests.input_hash(plain)
    assert requests.input_hash(with_input) != requests.input_hash(replace(plain, stdin=b"two"))
    # No stdin: the hash calls recorded before stdin existed were keyed by (their canonical
    # form has no stdin key), so that their retries still match.
    before = {"tool": "run_command", "command": "cat", "cwd": "/ws", "env": [], "network": False}
    canonical = json.dumps(before, ensure_ascii=False, separators=(",", ":")).encode()
    assert requests.input_hash(plain) == bytes_hash(canonical)
