"""The ledger on a real SQLite file: durability settings, state changes, recovery."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from shellward.types import (
    ArgumentFact,
    ArgumentKind,
    CallStatus,
    CapturedOutput,
    Code,
    CommandPart,
    EffectKind,
    FileEffect,
    Idempotency,
    LedgerEntry,
    ReplayPolicy,
    Verdict,
)
from shellwardd.ledger import LedgerError, LedgerStore, SqliteLedger, open_ledger


def _entry(call_id: str = "c1", **changes: object) -> LedgerEntry:
    fields: dict[str, object] = {
        "call_id": call_id,
        "run_id": "run",
        "step_id": call_id,
        "tool_name": "run_command",
        "input_hash": "sha256:x",
        "status": CallStatus.PLANNED,
        "idempotency": Idempotency.NON_IDEMPOTENT,
        "replay_policy": ReplayPolicy.NEVER,
        "command": "rm -rf build",
        "created_at": time.time(),
    }
    fields.update(changes)
    return LedgerEntry(**fields)  # type: ignore[arg-type]


@pytest.fixture
def ledger(tmp_path: Path) -> SqliteLedger:
    return SqliteLedger(tmp_path / "ledger.sqlite3")


@pytest.fixture
def store(ledger_url: str) -> Iterator[LedgerStore]:
    """Each store, for what does not depend on SQLite."""
    opened = open_ledger(ledger_url, "d")
    yield opened
    opened.close()


def test_uses_wal_and_full_sync(ledger: SqliteLedger) -> None:
    db = sqlite3.connect(ledger.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # synchronous is per connection: check the ledger's own.
    assert ledger._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_round_trips_every_field(store: LedgerStore) -> None:
    verdict = Verdict(
        Idempotency.CONDITIONAL,
        ReplayPolicy.ASK,
        "tee writes a file",
        needs_network=True,
        parts=(
            CommandPart(
                "tee",
                "/usr/bin/tee",
                ("tee", "out"),
                (0, 7),
                Idempotency.CONDITIONAL,
                ReplayPolicy.ASK,
                "writes",
                rule_id="coreutils.toml:tee",
                context="$(...)",
                arguments=(ArgumentFact(1, "out", ArgumentKind.FILE_WRITE, "target"),),
            ),
        ),
        deciding_part=0,
    )
    entry = _entry(verdict=verdict, cwd="/w", workspace="/w", network_granted=True)
    store.record(entry)
    store.mark_started("c1", entry.created_at + 1)
    final = _entry(
        status=CallStatus.SUCCEEDED,
        verdict=verdict,
        cwd="/w",
        workspace="/w",
        network_granted=True,
        created_at=entry.created_at,
        started_at=entry.created_at + 1,
        finished_at=entry.created_at + 2,
        exit_code=0,
        code=Code.OK,
        content="done",
        stdout=CapturedOutput(b"\xff\x00bin", 5, False, "sha256:a"),
        stderr=CapturedOutput(b"e", 10, True, "sha256:b"),
        file_effects=(FileEffect("a.txt", EffectKind.CREATED, "", "sha256:c", 3),),
        unexpected_writes=True,
        note="n",
    )
    store.finish(final)
    # The store names the daemon that recorded the call.
    assert store.get("c1") == replace(final, daemon_id="d")
    assert [t.status for t in store.transitions("c1")] == [
        CallStatus.PLANNED,
        CallStatus.STARTED,
        CallStatus.SUCCEEDED,
    ]


def test_started_is_visible_to_another_connection_before_finish(ledger: SqliteLedger) -> None:
    ledger.record(_entry())
    ledger.mark_started("c1", time.time())
    other = sqlite3.connect(ledger.path)
    assert other.execute("SELECT status FROM calls").fetchone()[0] == "started"


def test_cannot_start_twice(store: LedgerStore) -> None:
    store.record(_entry())
    store.mark_started("c1", time.time())
    with pytest.raises(LedgerError, match="not planned or approved"):
        store.mark_started("c1", time.time())


def test_finish_needs_a_final_status(store: LedgerStore) -> None:
    store.record(_entry())
    with pytest.raises(ValueError, match="final status"):
        store.finish(_entry(status=CallStatus.STARTED))


def test_recovery_makes_started_uncertain_and_planned_failed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    first = SqliteLedger(path)
    first.record(_entry("running"))
    first.mark_started("running", time.time())
    first.record(_entry("planned"))
    first.record(_entry("done", status=CallStatus.FAILED, code=Code.INVALID_ARGUMENT))
    first.close()

    second = SqliteLedger(path)
    assert second.recover_interrupted("restart") == ["running"]
    running = second.get("running")
    assert running is not None and running.status is CallStatus.UNCERTAIN
    assert running.code is Code.SIDE_EFFECT_UNCERTAIN
    planned = second.get("planned")
    assert planned is not None and planned.status is CallStatus.FAILED
    assert planned.code is Code.INTERRUPTED and "nothing ran" in planned.content
    done = second.get("done")
    assert done is not None and done.code is Code.INVALID_ARGUMENT


def test_latest_for_step_and_list(store: LedgerStore) -> None:
    now = time.time()
    store.record(_entry("a", step_id="s", created_at=now))
    store.record(_entry("b", step_id="s", created_at=now + 1))
    store.record(_entry("c", run_id="other", step_id="s", created_at=now + 2))
    latest = store.latest_for_step("run", "s")
    assert latest is not None and latest.call_id == "b"
    assert [e.call_id for e in store.list()] == ["c", "b", "a"]
    assert [e.call_id for e in store.list(run_id="run", limit=1)] == ["b"]


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(LedgerError, match="cannot open the ledger"):
        SqliteLedger(blocker / "ledger.sqlite3")
