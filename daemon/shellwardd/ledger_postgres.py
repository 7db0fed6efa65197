"""The PostgreSQL store of the ledger: one database shared by a fleet of daemons.

Choices, and why
- **The queries are the SQLite store's** (``ledger.SqlLedger``); this module only connects,
  translates ``?`` marks to psycopg's ``%s``, runs each change in its own transaction and
  translates psycopg's errors into the daemon's.
- **A small pool** (psycopg-pool): the daemon's threads (calls, approvals, the main loop's
  lease) each take a connection for one transaction; no Python lock orders them, the
  database does (row locks, unique constraints).
- **Busy is bounded.** ``lock_timeout`` and ``statement_timeout`` of
  :data:`~shellwardd.ledger.BUSY_TIMEOUT_S`, and the same wait for a pooled connection:
  past it, the call is answered UNAVAILABLE and nothing runs, as with SQLite.
- **One migration at a time.** The schema version lives in ``shellward_schema``; a migration
  holds a transaction-scoped advisory lock, so daemons starting together migrate once.
- **The password never reaches a message**: errors name the ledger by its URL without it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from shellwardd.errors import LedgerBusy, LedgerError
from shellwardd.ledger import BUSY_TIMEOUT_S, POSTGRES, SqlLedger

# Any constant: the key of the advisory lock migrations hold.
_MIGRATION_LOCK = 0x5348_454C_4C57


class _Connection:
    """A psycopg connection that takes the ledger's ``?`` marks."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, query: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self._conn.execute(query.replace("?", "%s"), params)  # type: ignore[arg-type]


class PostgresLedger(SqlLedger):
    dialect = POSTGRES

    def __init__(self, url: str, daemon_id: str) -> None:
        location = _without_password(url)
        timeout_ms = int(BUSY_TIMEOUT_S * 1000)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=8,
            timeout=BUSY_TIMEOUT_S,
            open=False,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": f"-c lock_timeout={timeout_ms} -c statement_timeout={timeout_ms}",
            },
        )
        try:
            self._pool.open(wait=True, timeout=BUSY_TIMEOUT_S)
        except (PoolTimeout, psycopg.Error) as exc:
            self._pool.close()
            raise LedgerError(
                f"cannot connect to the ledger at {location} within {BUSY_TIMEOUT_S:g}s; check "
                f"that PostgreSQL runs there and the database exists ({exc})"
            ) from exc
        try:
            super().__init__(daemon_id, location)
        except LedgerError:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except (PoolTimeout, psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
            raise LedgerBusy(
                f"the ledger at {self.location} stayed busy for over {BUSY_TIMEOUT_S:g}s ({what})"
            ) from exc
        except psycopg.Error as exc:
            raise LedgerError(f"cannot {what} the ledger at {self.location}: {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[_Connection]:
        with self._guard("read"), self._pool.connection() as conn:
            yield _Connection(conn)

    @contextmanager
    def _transaction(self) -> Iterator[_Connection]:
        with self._guard("write"), self._pool.connection() as conn, conn.transaction():
            yield _Connection(conn)

    def _schema_version(self, db: _Connection) -> int:
        db.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS shellward_schema (version INTEGER NOT NULL)")
        row = db.execute("SELECT version FROM shellward_schema").fetchone()
        return int(row["version"]) if row else 0

    def _set_schema_version(self, db: _Connection, version: int) -> None:
        db.execute("DELETE FROM shellward_schema")
        db.execute("INSERT INTO shellward_schema (version) VALUES (?)", (version,))


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
