"""The undo store's bounds: calls past the retention lose their images, the oldest calls'
go first past the size bound, a blob a kept call shares stays, a young blob is never taken."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from shellwardd.staging.blobs import BlobStore
from shellwardd.undo import KeptCall, collect

NOW = 1_000_000.0
DAY = 86_400.0


def _put(store: BlobStore, tmp_path: Path, data: bytes, *, age: float = DAY) -> str:
    source = tmp_path / "src"
    source.write_bytes(data)
    digest = store.put_file(source)
    os.utime(store.path_of(digest), (NOW - age, NOW - age))
    return digest


def test_size_bound_evicts_the_oldest_calls_first_and_keeps_shared_blobs(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    old, mid, new = (_put(store, tmp_path, bytes([i]) * 100) for i in range(3))
    calls = [
        KeptCall(NOW - 30, (old,)),
        KeptCall(NOW - 20, (mid, new)),
        KeptCall(NOW - 10, (new,)),
    ]
    result = collect(store, calls, max_bytes=250, retention=7 * DAY, now=NOW)
    assert (store.has(old), store.has(mid), store.has(new)) == (False, True, True)
    assert (result.kept_blobs, result.kept_bytes, result.removed_blobs) == (2, 200, 1)


def test_a_call_that_does_not_fit_takes_every_older_one_with_it(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    small_old = _put(store, tmp_path, b"a" * 10)
    big = _put(store, tmp_path, b"b" * 1000)
    newest = _put(store, tmp_path, b"c" * 10)
    calls = [KeptCall(NOW - 30, (small_old,)), KeptCall(NOW - 20, (big,)), KeptCall(NOW, (newest,))]
    collect(store, calls, max_bytes=100, retention=7 * DAY, now=NOW)
    # The older small call would fit on its own, but undo keeps a run's history whole.
    assert (store.has(small_old), store.has(big), store.has(newest)) == (False, False, True)


def test_retention_and_unreferenced_blobs(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    expired = _put(store, tmp_path, b"expired")
    orphan = _put(store, tmp_path, b"orphan")
    young = _put(store, tmp_path, b"young", age=5)  # a commit may be recording it right now
    kept = _put(store, tmp_path, b"kept")
    calls = [KeptCall(NOW - 8 * DAY, (expired,)), KeptCall(NOW - DAY, (kept,))]
    result = collect(store, calls, max_bytes=1 << 30, retention=7 * DAY, now=NOW)
    assert [store.has(d) for d in (expired, orphan, young, kept)] == [False, False, True, True]
    assert result.removed_bytes == len(b"expired") + len(b"orphan")
    assert hashlib.sha256(b"kept").hexdigest() == kept
