"""The durable ledger: one SQLite database, WAL, ``synchronous=FULL``.

Every state change is its own committed transaction, so ``planned`` and ``started`` are on
disk before the process is spawned (docs/architecture.md, The ledger). Each change is also
appended to ``transitions``, the call's history. One connection, guarded by a lock: the
daemon's writes are few and small, and a single writer keeps ordering simple.

Every SQLite failure leaves here as a :class:`LedgerError` naming the file; a write that
waited :data:`BUSY_TIMEOUT_S` for another process's lock is a :class:`LedgerBusy` (the
caller answers UNAVAILABLE: nothing ran). The database is created 0600 (SQLite gives its
WAL and shared-memory files the same mode), whatever the umask.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    Transition,
    Verdict,
)
from shellwardd.errors import LedgerBusy, LedgerError
from shellwardd.statedir import private_file

SCHEMA_VERSION = 1
# How long a write waits for another process's lock before the call is answered UNAVAILABLE.
BUSY_TIMEOUT_S = 5.0
_SQLITE_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    idempotency TEXT NOT NULL,
    replay_policy TEXT NOT NULL,
    idempotency_key TEXT NOT NULL DEFAULT '',
    command TEXT NOT NULL DEFAULT '',
    cwd TEXT NOT NULL DEFAULT '',
    workspace TEXT NOT NULL DEFAULT '',
    verdict TEXT,
    file_effects TEXT NOT NULL DEFAULT '[]',
    network_granted INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    code TEXT NOT NULL DEFAULT 'OK',
    content TEXT NOT NULL DEFAULT '',
    stdout BLOB NOT NULL DEFAULT x'',
    stdout_total INTEGER NOT NULL DEFAULT 0,
    stdout_truncated INTEGER NOT NULL DEFAULT 0,
    stdout_sha256 TEXT NOT NULL DEFAULT '',
    stderr BLOB NOT NULL DEFAULT x'',
    stderr_total INTEGER NOT NULL DEFAULT 0,
    stderr_truncated INTEGER NOT NULL DEFAULT 0,
    stderr_sha256 TEXT NOT NULL DEFAULT '',
    timeout_seconds REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    unexpected_writes INTEGER NOT NULL DEFAULT 0,
    effects_from_rescan INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT '',
    input_json TEXT NOT NULL DEFAULT '',
    effects_recorded INTEGER NOT NULL DEFAULT 0,
    output_json TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS calls_identity ON calls (run_id, step_id, created_at);
CREATE INDEX IF NOT EXISTS calls_created ON calls (created_at);
CREATE TABLE IF NOT EXISTS transitions (
    call_id TEXT NOT NULL REFERENCES calls (call_id),
    at REAL NOT NULL,
    status TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS transitions_call ON transitions (call_id, at);
"""

# Columns written when a call reaches a final state.
_FINAL_COLUMNS = (
    "status", "exit_code", "code", "content", "file_effects", "finished_at",
    "stdout", "stdout_total", "stdout_truncated", "stdout_sha256",
    "stderr", "stderr_total", "stderr_truncated", "stderr_sha256",
    "unexpected_writes", "effects_from_rescan", "effects_recorded", "note", "idempotency",
    "replay_policy", "output_json",
)  # fmt: skip


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            private_file(path)
            self._db = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
            )
        except (sqlite3.Error, OSError) as exc:
            raise LedgerError(f"cannot open the ledger at {path}: {exc}") from exc
        try:
            with self._guard("open"):
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(_SCHEMA)
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except LedgerError:
            self._db.close()
            raise
        self._db.row_factory = sqlite3.Row

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Translate SQLite's errors into the daemon's (the caller holds no lock here)."""
        try:
            yield
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _SQLITE_BUSY_CODES:
                raise LedgerBusy(
                    f"the ledger at {self.path} was locked by another process for over "
                    f"{BUSY_TIMEOUT_S:g}s ({what})"
                ) from exc
            raise LedgerError(f"cannot {what} the ledger at {self.path}: {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guard("read"):
            yield self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guard("write"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    # --- writes ------------------------------------------------------------------

    def record(self, entry: LedgerEntry, detail: str = "") -> None:
        """Insert a new call in whatever state it starts in (planned, or failed before start)."""
        row = _entry_to_row(entry)
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._transaction() as db:
            db.execute(f"INSERT INTO calls ({columns}) VALUES ({marks})", tuple(row.values()))
            db.execute(
                "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                (entry.call_id, entry.created_at, entry.status.value, detail),
            )

    def mark_started(self, call_id: str, started_at: float) -> None:
        """Durably record that the side effect may begin. Call before spawning."""
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE calls SET status = ?, started_at = ?"
                " WHERE call_id = ? AND status IN (?, ?)",
                (
                    CallStatus.STARTED.value,
                    started_at,
                    call_id,
                    CallStatus.PLANNED.value,
                    CallStatus.APPROVED.value,
                ),
            ).rowcount
            if updated != 1:
                raise LedgerError(f"call {call_id} cannot start: it is not planned or approved")
            db.execute(
                "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, '')",
                (call_id, started_at, CallStatus.STARTED.value),
            )

    def finish(self, entry: LedgerEntry, detail: str = "") -> None:
        """Write a call's final state and outcome (status must be final)."""
        if not entry.status.is_final:
            raise ValueError(f"finish() needs a final status, got {entry.status.value}")
        row = _entry_to_row(entry)
        assignments = ", ".join(f"{column} = ?" for column in _FINAL_COLUMNS)
        with self._transaction() as db:
            db.execute(
                f"UPDATE calls SET {assignments} WHERE call_id = ?",
                (*(row[column] for column in _FINAL_COLUMNS), entry.call_id),
            )
            db.execute(
                "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                (entry.call_id, entry.finished_at or time.time(), entry.status.value, detail),
            )

    def transition(self, call_id: str, old: CallStatus, new: CallStatus, detail: str) -> bool:
        """Move a call from ``old`` to ``new`` (a non-final step, e.g. approval); False when
        it is no longer ``old`` (another answer came first) and nothing changed."""
        now = time.time()
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE calls SET status = ? WHERE call_id = ? AND status = ?",
                (new.value, call_id, old.value),
            ).rowcount
            if updated == 1:
                db.execute(
                    "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                    (call_id, now, new.value, detail),
                )
        return updated == 1

    def deny_pending(self, call_id: str, content: str, detail: str) -> bool:
        """Deny a call still waiting for approval; False when it no longer waits (an
        approval came first: a running call is never overwritten)."""
        with self._transaction() as db:
            denied = _close_all(
                db, "call_id = ? AND status = ?", (call_id, CallStatus.PENDING_APPROVAL.value),
                CallStatus.DENIED, Code.PERMISSION_DENIED, content, detail,
            )  # fmt: skip
        return bool(denied)

    def expire_pending(self, created_before: float, content: str) -> builtins.list[str]:
        """Deny every call still waiting for approval that was created before the cutoff."""
        with self._transaction() as db:
            return _close_all(
                db, "status = ? AND created_at < ?",
                (CallStatus.PENDING_APPROVAL.value, created_before),
                CallStatus.DENIED, Code.PERMISSION_DENIED, content, "approval timed out",
            )  # fmt: skip

    def recover_interrupted(self, note: str) -> builtins.list[str]:
        """At start-up: calls a previous daemon left running become ``uncertain``.

        Planned or approved calls never started, so nothing ran: they become ``failed``.
        Returns the call ids made uncertain.
        """
        with self._transaction() as db:
            started = _close_all(
                db, "status = ?", (CallStatus.STARTED.value,),
                CallStatus.UNCERTAIN, Code.SIDE_EFFECT_UNCERTAIN,
                "The daemon stopped while this command was running; it may have partly or "
                "fully run. Check its effects before running it again.",
                note, note=note,
            )  # fmt: skip
            _close_all(
                db, "status IN (?, ?)", (CallStatus.PLANNED.value, CallStatus.APPROVED.value),
                CallStatus.FAILED, Code.INTERRUPTED,
                "The daemon stopped before this command started; nothing ran. It is safe to "
                "run it again.",
                note, note=note,
            )  # fmt: skip
        return started

    # --- reads -------------------------------------------------------------------

    def get(self, call_id: str) -> LedgerEntry | None:
        with self._read() as db:
            row = db.execute("SELECT * FROM calls WHERE call_id = ?", (call_id,)).fetchone()
        return _entry_from_row(row) if row else None

    def latest_for_step(self, run_id: str, step_id: str) -> LedgerEntry | None:
        """The newest attempt of a (run_id, step_id) identity."""
        with self._read() as db:
            row = db.execute(
                "SELECT * FROM calls WHERE run_id = ? AND step_id = ?"
                " ORDER BY created_at DESC, rowid DESC LIMIT 1",
                (run_id, step_id),
            ).fetchone()
        return _entry_from_row(row) if row else None

    def list(
        self,
        *,
        run_id: str = "",
        status: CallStatus | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
    ) -> builtins.list[LedgerEntry]:
        """Newest first, optionally only one run's calls or one status; ``before``: only
        the calls after (created_at, call_id) in that order (the next page of a listing)."""
        conditions: builtins.list[str] = []
        params: builtins.list[object] = []
        if before is not None:
            conditions.append("(created_at < ? OR (created_at = ? AND call_id < ?))")
            params.extend((before[0], before[0], before[1]))
        if run_id:
            conditions.append("run_id = ?")
            params.append(run_id)
        if status is not None:
            conditions.append("status = ?")
            params.append(status.value)
        query = "SELECT * FROM calls"
        if conditions:
            query += " WHERE " + " AND ".join(conditions)
        query += " ORDER BY created_at DESC, call_id DESC LIMIT ?"
        with self._read() as db:
            rows = db.execute(query, (*params, limit)).fetchall()
        return [_entry_from_row(row) for row in rows]

    def transitions(self, call_id: str) -> builtins.list[Transition]:
        with self._read() as db:
            rows = db.execute(
                "SELECT at, status, detail FROM transitions WHERE call_id = ? ORDER BY at, rowid",
                (call_id,),
            ).fetchall()
        return [Transition(row[0], CallStatus(row[1]), row[2]) for row in rows]


def _close_all(
    db: sqlite3.Connection,
    where: str,
    params: tuple[Any, ...],
    status: CallStatus,
    code: Code,
    content: str,
    detail: str,
    *,
    note: str | None = None,
) -> builtins.list[str]:
    """Give every call matching ``where`` a final state, in the caller's transaction."""
    now = time.time()
    call_ids = [row[0] for row in db.execute(f"SELECT call_id FROM calls WHERE {where}", params)]
    for call_id in call_ids:
        db.execute(
            "UPDATE calls SET status = ?, code = ?, content = ?, finished_at = ?,"
            " note = COALESCE(?, note) WHERE call_id = ?",
            (status.value, code.value, content, now, note, call_id),
        )
        db.execute(
            "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
            (call_id, now, status.value, detail),
        )
    return call_ids


# --- row codec -----------------------------------------------------------------


def _entry_to_row(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "call_id": entry.call_id,
        "run_id": entry.run_id,
        "step_id": entry.step_id,
        "tool_name": entry.tool_name,
        "input_hash": entry.input_hash,
        "status": entry.status.value,
        "idempotency": entry.idempotency.value,
        "replay_policy": entry.replay_policy.value,
        "idempotency_key": entry.idempotency_key,
        "command": entry.command,
        "cwd": entry.cwd,
        "workspace": entry.workspace,
        "verdict": json.dumps(_verdict_to_json(entry.verdict)) if entry.verdict else None,
        "file_effects": json.dumps([_effect_to_json(e) for e in entry.file_effects]),
        "network_granted": int(entry.network_granted),
        "exit_code": entry.exit_code,
        "code": entry.code.value,
        "content": entry.content,
        "stdout": entry.stdout.data,
        "stdout_total": entry.stdout.total_bytes,
        "stdout_truncated": int(entry.stdout.truncated),
        "stdout_sha256": entry.stdout.sha256,
        "stderr": entry.stderr.data,
        "stderr_total": entry.stderr.total_bytes,
        "stderr_truncated": int(entry.stderr.truncated),
        "stderr_sha256": entry.stderr.sha256,
        "timeout_seconds": entry.timeout_seconds,
        "created_at": entry.created_at,
        "started_at": entry.started_at,
        "finished_at": entry.finished_at,
        "unexpected_writes": int(entry.unexpected_writes),
        "effects_from_rescan": int(entry.effects_from_rescan),
        "note": entry.note,
        "input_json": entry.input_json,
        "effects_recorded": int(entry.effects_recorded),
        "output_json": entry.output_json,
    }


def _entry_from_row(row: sqlite3.Row) -> LedgerEntry:
    return LedgerEntry(
        call_id=row["call_id"],
        run_id=row["run_id"],
        step_id=row["step_id"],
        tool_name=row["tool_name"],
        input_hash=row["input_hash"],
        status=CallStatus(row["status"]),
        idempotency=Idempotency(row["idempotency"]),
        replay_policy=ReplayPolicy(row["replay_policy"]),
        command=row["command"],
        cwd=row["cwd"],
        workspace=row["workspace"],
        idempotency_key=row["idempotency_key"],
        verdict=_verdict_from_json(json.loads(row["verdict"])) if row["verdict"] else None,
        file_effects=tuple(_effect_from_json(e) for e in json.loads(row["file_effects"])),
        network_granted=bool(row["network_granted"]),
        exit_code=row["exit_code"],
        code=Code(row["code"]),
        content=row["content"],
        stdout=CapturedOutput(
            bytes(row["stdout"]),
            row["stdout_total"],
            bool(row["stdout_truncated"]),
            row["stdout_sha256"],
        ),
        stderr=CapturedOutput(
            bytes(row["stderr"]),
            row["stderr_total"],
            bool(row["stderr_truncated"]),
            row["stderr_sha256"],
        ),
        timeout_seconds=row["timeout_seconds"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        unexpected_writes=bool(row["unexpected_writes"]),
        effects_from_rescan=bool(row["effects_from_rescan"]),
        note=row["note"],
        input_json=row["input_json"],
        effects_recorded=bool(row["effects_recorded"]),
        output_json=row["output_json"],
    )


def _effect_to_json(effect: FileEffect) -> dict[str, Any]:
    return {**dataclasses.asdict(effect), "kind": effect.kind.value}


def _effect_from_json(data: dict[str, Any]) -> FileEffect:
    return FileEffect(**{**data, "kind": EffectKind(data["kind"])})


def _verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "idempotency": verdict.idempotency.value,
        "replay_policy": verdict.replay_policy.value,
        "reason": verdict.reason,
        "needs_network": verdict.needs_network,
        "needs_approval": verdict.needs_approval,
        "deciding_part": verdict.deciding_part,
        "parts": [
            {
                **dataclasses.asdict(part),
                "idempotency": part.idempotency.value,
                "replay_policy": part.replay_policy.value,
                "arguments": [
                    {**dataclasses.asdict(fact), "kind": fact.kind.value} for fact in part.arguments
                ],
            }
            for part in verdict.parts
        ],
    }


def _verdict_from_json(data: dict[str, Any]) -> Verdict:
    return Verdict(
        idempotency=Idempotency(data["idempotency"]),
        replay_policy=ReplayPolicy(data["replay_policy"]),
        reason=data["reason"],
        needs_network=data["needs_network"],
        needs_approval=data["needs_approval"],
        deciding_part=data["deciding_part"],
        parts=tuple(
            CommandPart(
                **{
                    **part,
                    "argv": tuple(part["argv"]),
                    "span": tuple(part["span"]),
                    "idempotency": Idempotency(part["idempotency"]),
                    "replay_policy": ReplayPolicy(part["replay_policy"]),
                    "arguments": tuple(
                        ArgumentFact(**{**fact, "kind": ArgumentKind(fact["kind"])})
                        for fact in part["arguments"]
                    ),
                }
            )
            for part in data["parts"]
        ),
    )
