"""The ledger's contract, run on both stores (SQLite and PostgreSQL), with two daemons'
stores on one database wherever the fleet matters: what the database must enforce, since
no Python lock spans two daemons."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from shellward.types import (
    CallStatus,
    Code,
    Idempotency,
    LedgerEntry,
    NetworkEffect,
    ReplayPolicy,
)
from shellwardd.errors import LedgerError
from shellwardd.ledger import (
    POSTGRES,
    SCHEMA_VERSION,
    SQLITE,
    Committed,
    KeyTaken,
    LedgerStore,
    migrations,
    open_ledger,
)

Opener = Callable[[str], LedgerStore]


@pytest.fixture
def url(ledger_url: str) -> str:
    return ledger_url


@pytest.fixture
def store(url: str) -> Iterator[Opener]:
    """Opens the store of daemon ``name`` on the test's database."""
    opened: list[LedgerStore] = []

    def open_as(name: str) -> LedgerStore:
        opened.append(open_ledger(url, name))
        return opened[-1]

    yield open_as
    for ledger in opened:
        ledger.close()


def _entry(call_id: str, step_id: str = "s", run_id: str = "r", **changes: object) -> LedgerEntry:
    fields: dict[str, object] = {
        "call_id": call_id, "run_id": run_id, "step_id": step_id, "tool_name": "run_command",
        "input_hash": "sha256:x", "status": CallStatus.PLANNED,
        "idempotency": Idempotency.NON_IDEMPOTENT, "replay_policy": ReplayPolicy.NEVER,
        "command": "touch x", "created_at": time.time(),
    }  # fmt: skip
    fields.update(changes)
    return LedgerEntry(**fields)  # type: ignore[arg-type]


def test_a_call_round_trips_and_names_its_daemon(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.record(_entry("c1"))
    a.mark_started("c1", time.time())
    seen = b.get("c1")
    assert seen is not None and seen.status is CallStatus.STARTED and seen.daemon_id == "a"
    a.finish(_entry("c1", status=CallStatus.SUCCEEDED, finished_at=time.time()))
    assert b.latest_for_step("r", "s").status is CallStatus.SUCCEEDED  # type: ignore[union-attr]
    assert [t.status for t in b.transitions("c1")] == [
        CallStatus.PLANNED, CallStatus.STARTED, CallStatus.SUCCEEDED,
    ]  # fmt: skip


def test_network_effects_are_stored_with_the_call(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.record(_entry("n1", network_granted=True))
    a.mark_started("n1", time.time())
    effects = (
        NetworkEffect("api.test", 443, "203.0.113.7", "CONNECT", "", 517, 4096),
        NetworkEffect("pay.test", 80, "203.0.113.8", "POST", "/charge?x=1", 120, 80),
        NetworkEffect("169.254.169.254", 80, "", "GET", "/", refused="an address"),
    )
    a.finish(
        _entry(
            "n1", network_granted=True, status=CallStatus.SUCCEEDED, finished_at=time.time(),
            network_effects=effects, unexpected_network=True,
        )
    )  # fmt: skip
    seen = b.get("n1")
    assert seen is not None and seen.network_effects == effects and seen.unexpected_network
    assert a.get("n1").network_effects == effects  # type: ignore[union-attr]


def test_planned_and_started_in_one_commit_keep_the_same_history(store: Opener) -> None:
    a, b = store("a"), store("b")
    entry = _entry("c1", step_id="s1", idempotency_key="order:7")
    started_at = time.time()
    a.record_started(entry, started_at)
    seen = b.get("c1")
    assert seen is not None and seen.status is CallStatus.STARTED
    assert seen.started_at == pytest.approx(started_at) and seen.daemon_id == "a"
    assert [t.status for t in b.transitions("c1")] == [CallStatus.PLANNED, CallStatus.STARTED]
    # The business key is taken in the same transaction: another step meets it, and a
    # refused attempt leaves neither row nor history.
    with pytest.raises(KeyTaken) as taken:
        b.record_started(_entry("c2", run_id="r2", step_id="s2", idempotency_key="order:7"),
                         time.time())  # fmt: skip
    assert taken.value.holder.call_id == "c1"
    assert a.get("c2") is None and a.transitions("c2") == []
    # A call id that exists already is refused whole: no second history.
    with pytest.raises(LedgerError):
        b.record_started(_entry("c1", step_id="s3"), time.time())
    assert len(a.transitions("c1")) == 2


def test_a_commit_ends_with_its_final_state_in_one_write_and_only_once(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.record_started(_entry("c1"), time.time())
    done = _entry("c1", status=CallStatus.SUCCEEDED, finished_at=time.time() + 1)
    # Not committing (no journal): ending a commit is refused, nothing written.
    with pytest.raises(LedgerError, match="not committing"):
        a.finish(done, committed=Committed(time.time(), "applied 2 path(s)"))
    assert b.get("c1").status is CallStatus.STARTED  # type: ignore[union-attr]
    a.begin_commit(done, '{"staged": "/x"}', "2 effect(s) staged")
    a.finish(done, committed=Committed(time.time(), "applied 2 path(s)"))
    assert b.get("c1").status is CallStatus.SUCCEEDED  # type: ignore[union-attr]
    assert b.commits() == [] and a.commits() == []  # nothing left for a start-up to finish
    assert [(t.status, t.detail) for t in b.transitions("c1")][2:] == [
        (CallStatus.COMMITTING, "2 effect(s) staged"),
        (CallStatus.COMMITTED, "applied 2 path(s)"),
        (CallStatus.SUCCEEDED, ""),
    ]
    with pytest.raises(LedgerError, match="not committing"):  # the commit ended once
        b.finish(done, committed=Committed(time.time(), "applied 2 path(s)"))


def test_a_step_claimed_by_one_daemon_is_held_for_every_other(store: Opener) -> None:
    a, b = store("a"), store("b")
    assert a.claim("r", "s", "c1", "h1") is None
    assert b.claim("r", "s", "c2", "h1") == ("c1", "h1")
    assert b.claim("r", "s", "c3", "h2") == ("c1", "h1")  # a different input: the holder's hash
    b.release("r", "s", "c2")  # not the holder: nothing changes
    assert b.claim("r", "s", "c4", "h1") == ("c1", "h1")
    a.release("r", "s", "c1")
    assert b.claim("r", "s", "c5", "h1") is None


def test_racing_claims_have_one_winner(store: Opener) -> None:
    daemons = [store(f"d{i}") for i in range(3)]
    winners: list[str] = []
    start = threading.Barrier(6)

    def race(ledger: LedgerStore, call_id: str) -> None:
        start.wait()
        if ledger.claim("r", "s", call_id, "h") is None:
            winners.append(call_id)

    threads = [threading.Thread(target=race, args=(daemons[i % 3], f"c{i}")) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1


def test_a_business_key_belongs_to_one_step_fleet_wide(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.record(_entry("c1", step_id="s1", idempotency_key="order:42"))
    with pytest.raises(KeyTaken) as taken:
        b.record(_entry("c2", run_id="other-run", step_id="s2", idempotency_key="order:42"))
    assert taken.value.holder.call_id == "c1"
    assert b.get("c2") is None  # nothing recorded
    # The same step's next attempt keeps the key (a retry sends the same key).
    b.record(_entry("c3", step_id="s1", idempotency_key="order:42"))


def test_a_key_whose_call_never_started_is_free_again(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.record(_entry("c1", step_id="s1", idempotency_key="k"))
    a.finish(_entry("c1", step_id="s1", status=CallStatus.FAILED, code=Code.INVALID_ARGUMENT,
                    finished_at=time.time()))  # fmt: skip
    b.record(_entry("c2", run_id="r2", step_id="s2", idempotency_key="k"))
    with pytest.raises(KeyTaken) as taken:
        a.record(_entry("c3", run_id="r3", step_id="s3", idempotency_key="k"))
    assert taken.value.holder.call_id == "c2"


def test_an_approval_is_seen_and_answered_once_from_any_daemon(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.record(_entry("c1", status=CallStatus.PENDING_APPROVAL))
    assert [e.call_id for e in b.list(status=CallStatus.PENDING_APPROVAL)] == ["c1"]
    assert b.transition("c1", CallStatus.PENDING_APPROVAL, CallStatus.APPROVED, "approved")
    assert not a.deny_pending("c1", "denied", "denied")
    mine = a.list(status=CallStatus.APPROVED, daemon_id="a")
    assert [e.call_id for e in mine] == ["c1"]
    assert b.list(status=CallStatus.APPROVED, daemon_id="b") == []


def test_a_restart_makes_only_its_own_running_calls_uncertain(store: Opener) -> None:
    a, b = store("a"), store("b")
    for ledger, call_id in ((a, "ca"), (b, "cb")):
        ledger.record(_entry(call_id, step_id=call_id))
        ledger.mark_started(call_id, time.time())
    a.claim("r", "held", "ca", "h")
    assert store("a").recover_interrupted("restarted") == ["ca"]
    assert b.get("cb").status is CallStatus.STARTED  # type: ignore[union-attr]
    assert b.claim("r", "held", "cx", "h") is None  # its claims went with it


def test_a_lapsed_lease_makes_the_daemons_running_calls_uncertain(store: Opener) -> None:
    a, b = store("a"), store("b")
    a.renew_lease(0.2)
    b.renew_lease(60)
    a.record(_entry("ca", step_id="sa"))
    a.mark_started("ca", time.time())
    a.claim("r", "sa", "ca", "h")
    b.record(_entry("cb", step_id="sb"))
    b.mark_started("cb", time.time())
    assert b.expire_leases("lapsed") == []  # a's lease still runs
    time.sleep(0.4)
    assert b.expire_leases("lapsed") == ["ca"]
    assert b.expire_leases("lapsed") == []  # swept once
    swept = b.get("ca")
    assert swept is not None and swept.status is CallStatus.UNCERTAIN
    assert swept.code is Code.SIDE_EFFECT_UNCERTAIN
    assert b.get("cb").status is CallStatus.STARTED  # type: ignore[union-attr]
    assert b.claim("r", "sa", "cx", "h") is None
    a.renew_lease(60)  # back: swept again only after another lapse
    assert b.expire_leases("lapsed") == []


def _create_v1(url: str) -> None:
    """A ledger as the daemon before fleets left it (schema version 1), with one call."""
    insert = (
        "INSERT INTO calls (call_id, run_id, step_id, tool_name, input_hash, status,"
        " idempotency, replay_policy, created_at) VALUES ('old', 'r', 's', 'run_command',"
        " 'sha256:x', 'succeeded', 'idempotent', 'auto', 1.0)"
    )
    if url.startswith("sqlite"):
        db = sqlite3.connect(url.removeprefix("sqlite://"), isolation_level=None)
        for statement in migrations(SQLITE)[0]:
            db.execute(statement)
        db.execute(insert)
        db.execute("PRAGMA user_version=1")
        db.close()
        return
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in migrations(POSTGRES)[0]:
            conn.execute(statement)  # type: ignore[arg-type]
        conn.execute(insert)  # type: ignore[arg-type]
        conn.execute("CREATE TABLE shellward_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO shellward_schema VALUES (1)")


def _set_version(url: str, version: int) -> None:
    if url.startswith("sqlite"):
        db = sqlite3.connect(url.removeprefix("sqlite://"))
        db.execute(f"PRAGMA user_version={version}")
        db.close()
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE shellward_schema SET version = %s", (version,))


def test_an_older_schema_is_migrated_and_keeps_its_calls(url: str, store: Opener) -> None:
    _create_v1(url)
    ledger = store("a")
    old = ledger.get("old")
    assert old is not None and old.status is CallStatus.SUCCEEDED and old.daemon_id == ""
    assert ledger.claim("r", "s", "c1", "h") is None  # the fleet's tables exist
    store("b").close()  # opening a current schema again changes nothing


def test_a_newer_schema_refuses_to_open(url: str, store: Opener) -> None:
    store("a").close()
    _set_version(url, SCHEMA_VERSION + 1)
    with pytest.raises(LedgerError, match=rf"schema version {SCHEMA_VERSION + 1}, newer"):
        open_ledger(url, "a")
