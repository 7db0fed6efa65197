"""Fixtures of the daemon's unit tests: a ledger URL for each store."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty ledger of each store (PostgreSQL: a fresh database on the session's server)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'ledger.sqlite3'}"
    return str(request.getfixturevalue("pg_url"))
