"""The durable ledger, behind one interface (:class:`LedgerStore`), in two stores: SQLite
(:class:`SqliteLedger`, the embedded default) and PostgreSQL (``ledger_postgres``, for a
fleet of daemons on one database). ``open_ledger`` picks one by URL.

Choices, and why
- **The statements are written once.** :class:`SqlLedger` holds every query, with ``?``
  marks; a store supplies the connection, the transaction, the translation of its errors, the
  column types (:class:`Dialect`) and where the schema version lives. Both stores therefore
  answer the same contract (tests/daemon/test_ledger_contract.py runs it on both).
- **Every state change is committed** (SQLite: WAL, ``synchronous=FULL``: each commit
  fsyncs the WAL), so ``planned`` and ``started`` are durable before the effect begins, and
  each is appended to ``transitions``, the call's history. A call with nothing to wait for
  writes both in one transaction (:meth:`~LedgerStore.record_started`): the same rows and
  history, one durable commit instead of two. So does a staged call's end: ``committed``
  and its final state (:class:`Committed`; the journal stays the recovery point until then).
- **The schema has a version, and start-up migrates it.** ``MIGRATIONS[i]`` takes version
  ``i`` to ``i + 1`` inside one transaction (on PostgreSQL under an advisory lock, so two
  daemons starting at once migrate once). A ledger newer than this daemon refuses the start:
  an older daemon must not write rows it does not understand.
- **The fleet's rules are the database's, never a Python lock.** A ``(run_id, step_id)`` being
  decided or run is a row of ``claims`` (its primary key: one holder fleet-wide); a business
  idempotency key is a row of ``business_keys`` (one step owns a key); approvals, leases and
  recovery are conditional updates in transactions, with ``SELECT … FOR UPDATE`` where a
  decision reads before it writes (SQLite's ``BEGIN IMMEDIATE`` already serializes writers).
- **Each daemon has an identity and a lease.** Every call records the daemon that holds its
  workspace. At start-up a daemon's own ``started`` calls become ``uncertain``; a daemon whose
  lease lapsed is swept by any other: its ``started`` calls become ``uncertain``, its claims
  are dropped (docs/fleet.md).

Every database failure leaves here as a :class:`LedgerError` naming the ledger; a write that
waited :data:`BUSY_TIMEOUT_S` for a lock is a :class:`LedgerBusy` (the caller answers
UNAVAILABLE: nothing ran). The SQLite file is created 0600 (SQLite gives its WAL and
shared-memory files the same mode), whatever the umask.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
    NetworkEffect,
    ReplayPolicy,
    Transition,
    Verdict,
)
from shellwardd.errors import ConfigError, LedgerBusy, LedgerError
from shellwardd.statedir import private_file

SCHEMA_VERSION = 4
# How long a write waits for another process's lock before the call is answered UNAVAILABLE.
BUSY_TIMEOUT_S = 5.0
_SQLITE_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)


@dataclass(frozen=True)
class Dialect:
    """What differs in the schema between the stores."""

    real: str  # a timestamp (PostgreSQL's REAL is 4 bytes: too coarse)
    blob: str
    empty_blob: str
    order: str  # the column that orders rows inserted in the same instant
    order_column: str  # its definition, "" when the database has one (SQLite's rowid)
    for_update: str  # locks the rows a decision reads ("" where writers are serialized)


SQLITE = Dialect("REAL", "BLOB", "x''", "rowid", "", "")
POSTGRES = Dialect(
    "DOUBLE PRECISION", "BYTEA", "''::bytea", "seq", ",\n    seq BIGSERIAL", " FOR UPDATE"
)


def migrations(d: Dialect) -> tuple[tuple[str, ...], ...]:
    """``migrations(d)[i]``: the statements that take the schema from version ``i`` to
    ``i + 1`` (index 0 creates version 1, the schema before fleets)."""
    v1 = (
        f"""CREATE TABLE calls (
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
    stdout {d.blob} NOT NULL DEFAULT {d.empty_blob},
    stdout_total BIGINT NOT NULL DEFAULT 0,
    stdout_truncated INTEGER NOT NULL DEFAULT 0,
    stdout_sha256 TEXT NOT NULL DEFAULT '',
    stderr {d.blob} NOT NULL DEFAULT {d.empty_blob},
    stderr_total BIGINT NOT NULL DEFAULT 0,
    stderr_truncated INTEGER NOT NULL DEFAULT 0,
    stderr_sha256 TEXT NOT NULL DEFAULT '',
    timeout_seconds {d.real} NOT NULL DEFAULT 0,
    created_at {d.real} NOT NULL,
    started_at {d.real},
    finished_at {d.real},
    unexpected_writes INTEGER NOT NULL DEFAULT 0,
    effects_from_rescan INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT '',
    input_json TEXT NOT NULL DEFAULT '',
    effects_recorded INTEGER NOT NULL DEFAULT 0,
    output_json TEXT NOT NULL DEFAULT ''{d.order_column}
)""",
        "CREATE INDEX calls_identity ON calls (run_id, step_id, created_at)",
        "CREATE INDEX calls_created ON calls (created_at)",
        f"""CREATE TABLE transitions (
    call_id TEXT NOT NULL REFERENCES calls (call_id),
    at {d.real} NOT NULL,
    status TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''{d.order_column}
)""",
        "CREATE INDEX transitions_call ON transitions (call_id, at)",
    )
    v2 = (
        # The daemon that recorded a call holds its workspace and runs it once approved.
        "ALTER TABLE calls ADD COLUMN daemon_id TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX calls_daemon ON calls (daemon_id, status)",
        # One row per (run_id, step_id) being decided or run, fleet-wide.
        f"""CREATE TABLE claims (
    run_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    daemon_id TEXT NOT NULL,
    claimed_at {d.real} NOT NULL,
    PRIMARY KEY (run_id, step_id)
)""",
        # The step that owns a business idempotency key, fleet-wide.
        """CREATE TABLE business_keys (
    idempotency_key TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    step_id TEXT NOT NULL
)""",
        f"""CREATE TABLE daemons (
    daemon_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    lease_until {d.real} NOT NULL,
    expired INTEGER NOT NULL DEFAULT 0
)""",
    )
    v3 = (
        # What a call asked the network proxy for, and whether that surprised its verdict.
        "ALTER TABLE calls ADD COLUMN network_effects TEXT NOT NULL DEFAULT '[]'",
        "ALTER TABLE calls ADD COLUMN unexpected_network INTEGER NOT NULL DEFAULT 0",
    )
    v4 = (
        # A staged call's commit journal: where its staged writes are and the final status
        # it reaches once they are applied (JSON), while it is committing or committed.
        "ALTER TABLE calls ADD COLUMN commit_journal TEXT NOT NULL DEFAULT ''",
    )
    return (v1, v2, v3, v4)


# Columns written when a call reaches a final state.
_FINAL_COLUMNS = (
    "status", "exit_code", "code", "content", "file_effects", "finished_at",
    "stdout", "stdout_total", "stdout_truncated", "stdout_sha256",
    "stderr", "stderr_total", "stderr_truncated", "stderr_sha256",
    "unexpected_writes", "effects_from_rescan", "effects_recorded", "note", "idempotency",
    "replay_policy", "output_json", "network_effects", "unexpected_network",
)  # fmt: skip

_INTERRUPTED_RUNNING = (
    "The daemon stopped while this command was running; it may have partly or fully run. "
    "Check its effects before running it again."
)
_INTERRUPTED_BEFORE = (
    "The daemon stopped before this command started; nothing ran. It is safe to run it again."
)


@dataclass(frozen=True)
class Committed:
    """A staged call's writes were applied (at ``at``; ``detail``: "applied 3 path(s)"):
    :meth:`LedgerStore.finish` records it with the final state, in one transaction."""

    at: float
    detail: str


class KeyTaken(Exception):
    """A business idempotency key another step owns: ``holder`` is that step's call."""

    def __init__(self, key: str, holder: LedgerEntry) -> None:
        super().__init__(key)
        self.key = key
        self.holder = holder


class LedgerStore(Protocol):
    """The ledger as the daemon uses it (both stores; see the module docstring)."""

    daemon_id: str
    location: str

    def close(self) -> None: ...

    def record(self, entry: LedgerEntry, detail: str = "") -> None: ...

    def mark_started(self, call_id: str, started_at: float) -> None: ...

    def record_started(self, entry: LedgerEntry, started_at: float) -> None: ...

    def finish(
        self, entry: LedgerEntry, detail: str = "", committed: Committed | None = None
    ) -> None: ...

    def transition(self, call_id: str, old: CallStatus, new: CallStatus, detail: str) -> bool: ...

    def begin_commit(self, entry: LedgerEntry, journal: str, detail: str = "") -> None: ...

    def annotate_pending(self, call_id: str, content: str, detail: str) -> bool: ...

    def commits(self) -> builtins.list[tuple[LedgerEntry, str]]: ...

    def deny_pending(self, call_id: str, content: str, detail: str) -> bool: ...

    def expire_pending(self, created_before: float, content: str) -> builtins.list[str]: ...

    def recover_interrupted(self, note: str) -> builtins.list[str]: ...

    def claim(
        self, run_id: str, step_id: str, call_id: str, input_hash: str
    ) -> tuple[str, str] | None: ...

    def release(self, run_id: str, step_id: str, call_id: str) -> None: ...

    def renew_lease(self, lease_seconds: float) -> None: ...

    def expire_leases(self, note: str) -> builtins.list[str]: ...

    def get(self, call_id: str) -> LedgerEntry | None: ...

    def latest_for_step(self, run_id: str, step_id: str) -> LedgerEntry | None: ...

    def list(
        self,
        *,
        run_id: str = "",
        status: CallStatus | None = None,
        limit: int = 50,
        daemon_id: str = "",
        before: tuple[float, str] | None = None,
    ) -> builtins.list[LedgerEntry]: ...

    def transitions(self, call_id: str) -> builtins.list[Transition]: ...


def open_ledger(url: str, daemon_id: str) -> LedgerStore:
    """The store a ``--ledger`` URL names: ``sqlite:///path`` or ``postgresql://…``."""
    if url.startswith("sqlite:///"):
        return SqliteLedger(Path(url.removeprefix("sqlite://")), daemon_id)
    if url.startswith(("postgresql://", "postgres://")):
        # Imported here: a single machine's daemon does not need psycopg.
        from shellwardd.ledger_postgres import PostgresLedger

        return PostgresLedger(url, daemon_id)
    raise ConfigError(
        f"--ledger {url!r}: use sqlite:///absolute/path or postgresql://user@host/database"
    )


class SqlLedger:
    """Every query of the ledger, over a store's connection (a subclass)."""

    dialect: Dialect = SQLITE

    def __init__(self, daemon_id: str, location: str) -> None:
        self.daemon_id = daemon_id
        self.location = location
        self._migrate()

    # --- what a store supplies ---------------------------------------------------

    def close(self) -> None:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _schema_version(self, db: Any) -> int:
        raise NotImplementedError

    def _set_schema_version(self, db: Any, version: int) -> None:
        raise NotImplementedError

    # --- schema ------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._transaction() as db:
            current = self._schema_version(db)
            if current > SCHEMA_VERSION:
                raise LedgerError(
                    f"the ledger at {self.location} has schema version {current}, newer than "
                    f"this shellwardd understands ({SCHEMA_VERSION}); nothing was changed. "
                    "Upgrade shellwardd, or point --ledger at another ledger"
                )
            for statements in migrations(self.dialect)[current:]:
                for statement in statements:
                    db.execute(statement)
            if current < SCHEMA_VERSION:
                self._set_schema_version(db, SCHEMA_VERSION)

    # --- writes ------------------------------------------------------------------

    def record(self, entry: LedgerEntry, detail: str = "") -> None:
        """Insert a new call in whatever state it starts in (planned, or failed before start)."""
        with self._transaction() as db:
            self._insert(db, entry, detail)

    def mark_started(self, call_id: str, started_at: float) -> None:
        """Durably record that the side effect may begin. Call before spawning."""
        with self._transaction() as db:
            self._start(db, call_id, started_at)

    def record_started(self, entry: LedgerEntry, started_at: float) -> None:
        """``record`` a planned call and ``mark_started`` it in one transaction (one durable
        commit): for a call that waits for nothing between the two. Call before spawning."""
        with self._transaction() as db:
            self._insert(db, entry, "")
            self._start(db, entry.call_id, started_at)

    def _insert(self, db: Any, entry: LedgerEntry, detail: str) -> None:
        row = {**_entry_to_row(entry), "daemon_id": self.daemon_id}
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        if entry.idempotency_key:
            self._take_key(db, entry)
        db.execute(f"INSERT INTO calls ({columns}) VALUES ({marks})", tuple(row.values()))
        db.execute(
            "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
            (entry.call_id, entry.created_at, entry.status.value, detail),
        )

    def _start(self, db: Any, call_id: str, started_at: float) -> None:
        updated = db.execute(
            "UPDATE calls SET status = ?, started_at = ? WHERE call_id = ? AND status IN (?, ?)",
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

    def finish(
        self, entry: LedgerEntry, detail: str = "", committed: Committed | None = None
    ) -> None:
        """Write a call's final state and outcome (status must be final). ``committed``: its
        staged writes were applied; the row must still be ``committing`` (else nothing is
        written: :class:`LedgerError`), and ``committed`` enters its history first."""
        if not entry.status.is_final:
            raise ValueError(f"finish() needs a final status, got {entry.status.value}")
        row = _entry_to_row(entry)
        assignments = ", ".join(f"{column} = ?" for column in _FINAL_COLUMNS)
        values = (*(row[column] for column in _FINAL_COLUMNS), entry.call_id)
        with self._transaction() as db:
            if committed is None:
                db.execute(f"UPDATE calls SET {assignments} WHERE call_id = ?", values)
            else:
                updated = db.execute(
                    f"UPDATE calls SET {assignments} WHERE call_id = ? AND status = ?",
                    (*values, CallStatus.COMMITTING.value),
                ).rowcount
                if updated != 1:
                    raise LedgerError(f"call {entry.call_id} cannot end its commit: not committing")
                db.execute(
                    "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                    (entry.call_id, committed.at, CallStatus.COMMITTED.value, committed.detail),
                )
            db.execute(
                "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                (entry.call_id, entry.finished_at or time.time(), entry.status.value, detail),
            )

    def begin_commit(self, entry: LedgerEntry, journal: str, detail: str = "") -> None:
        """Journal a started call's commit: its outcome (``entry``, final status and all)
        is written with status ``committing`` and the journal (where the staged writes
        are), before any of them is applied; :meth:`finish` ends it."""
        row = {**_entry_to_row(entry), "status": CallStatus.COMMITTING.value}
        assignments = ", ".join(f"{column} = ?" for column in _FINAL_COLUMNS)
        with self._transaction() as db:
            updated = db.execute(
                f"UPDATE calls SET {assignments}, commit_journal = ?"
                " WHERE call_id = ? AND status = ?",
                (*(row[column] for column in _FINAL_COLUMNS), journal, entry.call_id,
                 CallStatus.STARTED.value),
            ).rowcount  # fmt: skip
            if updated != 1:
                raise LedgerError(f"call {entry.call_id} cannot commit: it is not started")
            db.execute(
                "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                (entry.call_id, time.time(), CallStatus.COMMITTING.value, detail),
            )

    def annotate_pending(self, call_id: str, content: str, detail: str) -> bool:
        """Replace the sentence of a call still waiting for approval (its preview); False
        when it no longer waits."""
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE calls SET content = ? WHERE call_id = ? AND status = ?",
                (content, call_id, CallStatus.PENDING_APPROVAL.value),
            ).rowcount
            if updated == 1:
                db.execute(
                    "INSERT INTO transitions (call_id, at, status, detail) VALUES (?, ?, ?, ?)",
                    (call_id, time.time(), CallStatus.PENDING_APPROVAL.value, detail),
                )
        return updated == 1

    def commits(self) -> builtins.list[tuple[LedgerEntry, str]]:
        """This daemon's calls left committing or committed (by a crash), with journals."""
        with self._read() as db:
            rows = db.execute(
                "SELECT * FROM calls WHERE daemon_id IN (?, '') AND status IN (?, ?)"
                f" ORDER BY started_at, {self.dialect.order}",
                (self.daemon_id, CallStatus.COMMITTING.value, CallStatus.COMMITTED.value),
            ).fetchall()
        return [(_entry_from_row(row), row["commit_journal"]) for row in rows]

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
        """At start-up: calls this daemon (or a daemon before fleets) left running become
        ``uncertain``; planned or approved ones never started, so nothing ran: they become
        ``failed``; its claims are dropped. Returns the call ids made uncertain."""
        with self._transaction() as db:
            return _interrupt(db, "daemon_id IN (?, '')", (self.daemon_id,), note)

    # --- the fleet ---------------------------------------------------------------

    def claim(
        self, run_id: str, step_id: str, call_id: str, input_hash: str
    ) -> tuple[str, str] | None:
        """Take ``(run_id, step_id)`` for ``call_id`` (None), or the holder's (call_id,
        input_hash): another request for that step is being decided or run, on any daemon."""
        with self._transaction() as db:
            while True:
                taken = db.execute(
                    "INSERT INTO claims (run_id, step_id, call_id, input_hash, daemon_id,"
                    " claimed_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (run_id, step_id, call_id, input_hash, self.daemon_id, time.time()),
                ).rowcount
                if taken == 1:
                    return None
                row = db.execute(
                    "SELECT call_id, input_hash FROM claims WHERE run_id = ? AND step_id = ?",
                    (run_id, step_id),
                ).fetchone()
                if row is not None:  # else released in between: try again
                    return (row["call_id"], row["input_hash"])

    def release(self, run_id: str, step_id: str, call_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "DELETE FROM claims WHERE run_id = ? AND step_id = ? AND call_id = ?",
                (run_id, step_id, call_id),
            )

    def _take_key(self, db: Any, entry: LedgerEntry) -> None:
        """Make ``entry``'s step the owner of its business key, in the caller's
        transaction; :class:`KeyTaken` when another step owns it and its call did not end
        before starting."""
        key = entry.idempotency_key
        taken = db.execute(
            "INSERT INTO business_keys (idempotency_key, call_id, run_id, step_id)"
            " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (key, entry.call_id, entry.run_id, entry.step_id),
        ).rowcount
        if taken == 1:
            return
        owner = db.execute(
            "SELECT call_id, run_id, step_id FROM business_keys WHERE idempotency_key = ?"
            + self.dialect.for_update,
            (key,),
        ).fetchone()
        same_step = (owner["run_id"], owner["step_id"]) == (entry.run_id, entry.step_id)
        row = db.execute("SELECT * FROM calls WHERE call_id = ?", (owner["call_id"],)).fetchone()
        holder = _entry_from_row(row) if row else None
        never_ran = holder is None or (holder.status.is_final and holder.started_at is None)
        if not (same_step and entry.run_id) and not never_ran:
            assert holder is not None
            raise KeyTaken(key, holder)
        db.execute(
            "UPDATE business_keys SET call_id = ?, run_id = ?, step_id = ?"
            " WHERE idempotency_key = ?",
            (entry.call_id, entry.run_id, entry.step_id, key),
        )

    def renew_lease(self, lease_seconds: float) -> None:
        """This daemon is alive for ``lease_seconds`` more (and no longer swept)."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO daemons (daemon_id, host, lease_until, expired) VALUES (?, ?, ?, 0)"
                " ON CONFLICT (daemon_id) DO UPDATE SET host = excluded.host,"
                " lease_until = excluded.lease_until, expired = 0",
                (self.daemon_id, socket.gethostname(), time.time() + lease_seconds),
            )

    def expire_leases(self, note: str) -> builtins.list[str]:
        """Sweep every other daemon whose lease lapsed: its running calls become
        ``uncertain`` for the fleet (returned), the ones it had not started ``failed``, its
        claims are dropped. Each lapsed daemon is swept once, by one sweeper."""
        made_uncertain: builtins.list[str] = []
        with self._transaction() as db:
            lapsed = db.execute(
                "SELECT daemon_id FROM daemons WHERE lease_until < ? AND expired = 0"
                " AND daemon_id <> ?" + self.dialect.for_update,
                (time.time(), self.daemon_id),
            ).fetchall()
            for row in lapsed:
                made_uncertain += _interrupt(db, "daemon_id = ?", (row["daemon_id"],), note)
                db.execute(
                    "UPDATE daemons SET expired = 1 WHERE daemon_id = ?", (row["daemon_id"],)
                )
        return made_uncertain

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
                f" ORDER BY created_at DESC, {self.dialect.order} DESC LIMIT 1",
                (run_id, step_id),
            ).fetchone()
        return _entry_from_row(row) if row else None

    def list(
        self,
        *,
        run_id: str = "",
        status: CallStatus | None = None,
        limit: int = 50,
        daemon_id: str = "",
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
        if daemon_id:
            conditions.append("daemon_id = ?")
            params.append(daemon_id)
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
                "SELECT at, status, detail FROM transitions WHERE call_id = ?"
                f" ORDER BY at, {self.dialect.order}",
                (call_id,),
            ).fetchall()
        return [Transition(row["at"], CallStatus(row["status"]), row["detail"]) for row in rows]


class SqliteLedger(SqlLedger):
    """The embedded store: one SQLite file, one connection behind a lock (the daemon's
    writes are few and small, and a single writer keeps ordering simple)."""

    dialect = SQLITE

    def __init__(self, path: Path, daemon_id: str = "") -> None:
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
        self._db.row_factory = sqlite3.Row
        try:
            with self._guard("open"):
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            super().__init__(daemon_id, str(path))
        except LedgerError:
            self._db.close()
            raise

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

    def _schema_version(self, db: sqlite3.Connection) -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    def _set_schema_version(self, db: sqlite3.Connection, version: int) -> None:
        db.execute(f"PRAGMA user_version={int(version)}")


def _interrupt(db: Any, where: str, params: tuple[Any, ...], note: str) -> builtins.list[str]:
    """The calls matching ``where`` that a stopped daemon left: ``started`` → uncertain
    (returned), ``planned`` / ``approved`` → failed; and that daemon's claims dropped."""
    started = _close_all(
        db, f"{where} AND status = ?", (*params, CallStatus.STARTED.value),
        CallStatus.UNCERTAIN, Code.SIDE_EFFECT_UNCERTAIN, _INTERRUPTED_RUNNING, note, note=note,
    )  # fmt: skip
    _close_all(
        db, f"{where} AND status IN (?, ?)",
        (*params, CallStatus.PLANNED.value, CallStatus.APPROVED.value),
        CallStatus.FAILED, Code.INTERRUPTED, _INTERRUPTED_BEFORE, note, note=note,
    )  # fmt: skip
    db.execute(f"DELETE FROM claims WHERE {where}", params)
    return started


def _close_all(
    db: Any,
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
    rows = db.execute(f"SELECT call_id FROM calls WHERE {where}", params).fetchall()
    call_ids = [row["call_id"] for row in rows]
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
        "file_effects": _effects_json(entry.file_effects),
        "network_granted": int(entry.network_granted),
        "network_effects": json.dumps([dataclasses.asdict(e) for e in entry.network_effects]),
        "unexpected_network": int(entry.unexpected_network),
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


def _entry_from_row(row: Any) -> LedgerEntry:
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
        network_effects=tuple(NetworkEffect(**e) for e in json.loads(row["network_effects"])),
        unexpected_network=bool(row["unexpected_network"]),
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
        daemon_id=row["daemon_id"],
    )


# A file effect's fields are all plain values: read them directly. `dataclasses.asdict`
# deep-copies each one, and took 2.5 ms for a commit's 100 effects (0.6 ms this way).
_EFFECT_FIELDS = tuple(field.name for field in dataclasses.fields(FileEffect))


# The last effects serialised, with their text: a commit writes the same tuple twice (its
# journal, then its final state), 0.6 ms each for 100 effects. The tuple and its frozen
# effects cannot change, and holding it keeps its identity from being reused.
_last_effects: tuple[tuple[FileEffect, ...], str] = ((), "[]")


def _effects_json(effects: tuple[FileEffect, ...]) -> str:
    global _last_effects
    last = _last_effects  # one read: another thread may replace it
    if last[0] is effects:
        return last[1]
    text = json.dumps([_effect_to_json(e) for e in effects])
    if type(effects) is tuple:  # never a list, which could change
        _last_effects = (effects, text)
    return text


def _effect_to_json(effect: FileEffect) -> dict[str, Any]:
    return {**{name: getattr(effect, name) for name in _EFFECT_FIELDS}, "kind": effect.kind.value}


def _effect_from_json(data: dict[str, Any]) -> FileEffect:
    return FileEffect(**{**data, "kind": EffectKind(data["kind"])})


# The same for a verdict's parts and their argument facts (every call stores one).
_PART_FIELDS = tuple(field.name for field in dataclasses.fields(CommandPart))
_FACT_FIELDS = tuple(field.name for field in dataclasses.fields(ArgumentFact))


def _fact_to_json(fact: ArgumentFact) -> dict[str, Any]:
    return {**{name: getattr(fact, name) for name in _FACT_FIELDS}, "kind": fact.kind.value}


def _verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "idempotency": verdict.idempotency.value,
        "replay_policy": verdict.replay_policy.value,
        "reason": verdict.reason,
        "needs_network": verdict.needs_network,
        "needs_approval": verdict.needs_approval,
        "deciding_part": verdict.deciding_part,
        "destinations": list(verdict.destinations),
        "parts": [
            {
                **{name: getattr(part, name) for name in _PART_FIELDS},
                "idempotency": part.idempotency.value,
                "replay_policy": part.replay_policy.value,
                "arguments": [_fact_to_json(fact) for fact in part.arguments],
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
        destinations=tuple(data.get("destinations", ())),
        parts=tuple(
            CommandPart(
                **{
                    **part,
                    "argv": tuple(part["argv"]),
                    "span": tuple(part["span"]),
                    "destinations": tuple(part.get("destinations", ())),
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
