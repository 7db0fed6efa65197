"""The blob store: content-addressed, deduplicated, atomic, private, never follows links."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from shellwardd.staging import blobs
from shellwardd.staging.blobs import BlobError, BlobStore
from shellwardd.watch.hashing import probe


def test_put_returns_the_effects_hash_and_keeps_the_content(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    source = tmp_path / "f"
    source.write_bytes(b"before\n")
    digest = store.put_file(source)
    entry = probe(source)
    assert entry is not None and f"sha256:{digest}" == entry.hash
    assert store.has(digest) and store.has(f"sha256:{digest}")
    assert store.path_of(digest).read_bytes() == b"before\n"
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700


def test_same_content_is_stored_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(b"same")
    assert store.put_file(tmp_path / "a") == store.put_file(tmp_path / "b")
    blobs = [p for p in store.root.rglob("*") if p.is_file()]
    assert len(blobs) == 1  # and no temporary file left behind
    assert blobs[0].name == hashlib.sha256(b"same").hexdigest()


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside")
    (tmp_path / "link").symlink_to(secret)
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(BlobError, match="link"):
        store.put_file(tmp_path / "link")
    assert not any(p.is_file() for p in store.root.rglob("*"))


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(BlobError, match="not a regular file"):
        BlobStore(tmp_path / "blobs").put_file(tmp_path / "pipe")


def test_unknown_digest_forms_are_refused(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    assert not store.has("0" * 64)
    with pytest.raises(ValueError, match="SHA-256"):
        store.path_of("../../etc/passwd")


def test_a_batch_is_stored_in_order_and_deduplicated(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    contents = [b"one", b"two", b"one", b""]
    for i, content in enumerate(contents):
        (tmp_path / f"f{i}").write_bytes(content)
    digests = store.put_files([tmp_path / f"f{i}" for i in range(len(contents))])
    assert digests == [hashlib.sha256(c).hexdigest() for c in contents]
    assert all(store.path_of(d).read_bytes() == c for d, c in zip(digests, contents, strict=True))
    kept = [p for p in store.root.rglob("*") if p.is_file() and p.name not in _spares(store)]
    assert len(kept) == 3  # no temporary file (spares for the next batch aside)
    assert store.put_files([]) == []


def test_a_batch_with_one_bad_file_names_no_blob(tmp_path: Path) -> None:
    """A before-image that cannot be kept fails the whole commit: no blob of the batch may
    be left (named or temporary), so nothing suggests it was kept."""
    (tmp_path / "good").write_bytes(b"good")
    os.mkfifo(tmp_path / "pipe")
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(BlobError, match="pipe is not a regular file"):
        store.put_files([tmp_path / "good", tmp_path / "pipe"])
    assert not any(store.root.rglob("*"))


def test_content_is_synced_before_its_name_and_the_name_before_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash at any point must never leave a blob's name pointing at content that is not
    on disk, and a returned digest must survive a crash (the commit then replaces the
    workspace file): every copy is fsync'd before it is named, every name's directory
    after it is named, all before put_files returns."""
    events: list[tuple[str, Path]] = []
    real_fsync, real_rename = blobs._fsync, os.rename

    def fsync(path: Path) -> None:
        events.append(("fsync", Path(path)))
        real_fsync(path)

    def rename(src: str | Path, dst: str | Path, **kwargs: object) -> None:
        events.append(("rename", Path(src)))
        events.append(("named", Path(dst)))
        real_rename(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(blobs, "_fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    for i in range(20):
        (tmp_path / f"f{i}").write_bytes(f"content {i}".encode())
    store = BlobStore(tmp_path / "blobs")
    digests = store.put_files([tmp_path / f"f{i}" for i in range(20)])
    events.append(("returned", tmp_path))
    position = {event: i for i, event in enumerate(events)}
    for digest in digests:
        final = store.path_of(digest)
        temp = next(src for kind, src in events if kind == "rename" and
                    position[("named", final)] == position[("rename", src)] + 1)  # fmt: skip
        assert position[("fsync", temp)] < position[("rename", temp)]
        assert position[("named", final)] < position[("fsync", final.parent)]
        assert position[("fsync", final.parent)] < position[("returned", tmp_path)]


def test_put_fd_keeps_what_the_descriptor_reads_and_refuses_a_directory(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    (tmp_path / "f").write_bytes(b"by descriptor\n")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        digest = store.put_fd(fd, "f")
    finally:
        os.close(fd)
    assert store.path_of(digest).read_bytes() == b"by descriptor\n"
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(BlobError, match="not a regular file"):
            store.put_fd(fd, "a directory")
    finally:
        os.close(fd)


def test_a_store_that_is_no_longer_a_directory_is_a_blob_error(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    store.root.rmdir()
    store.root.write_bytes(b"")
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(BlobError, match=r"cannot keep the before-image of .*f in"):
        store.put_file(tmp_path / "f")


def _spares(store: BlobStore) -> set[str]:
    return {name for name in os.listdir(store.root) if name.startswith(".spare-")}


def _wait_for_spares(store: BlobStore, count: int) -> set[str]:
    deadline = time.monotonic() + 10
    while len(_spares(store)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return _spares(store)


def test_a_batch_writes_into_files_made_after_the_last_one(tmp_path: Path) -> None:
    """No inode is made on the commit's path once a batch has run: the next batch's copies
    go into the spares made meanwhile, and hold exactly what was copied."""
    store = BlobStore(tmp_path / "blobs")
    sources = [tmp_path / f"f{i}" for i in range(5)]
    for i, source in enumerate(sources):
        source.write_bytes(f"first {i}".encode())
    store.put_files(sources)
    spares = _wait_for_spares(store, 5)
    assert len(spares) == 5
    inodes = {os.lstat(store.root / name).st_ino for name in spares}
    (store.root / sorted(spares)[0]).write_bytes(b"left over in a spare, longer than any")
    for i, source in enumerate(sources):
        source.write_bytes(f"second {i}".encode())
    digests = store.put_files(sources)
    for i, digest in enumerate(digests):
        kept = store.path_of(digest)
        assert kept.read_bytes() == f"second {i}".encode()
        assert os.lstat(kept).st_ino in inodes
        assert stat.S_IMODE(os.lstat(kept).st_mode) == 0o600


def test_spares_gone_or_left_by_a_stopped_daemon_cost_nothing_but_a_new_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "blobs"
    root.mkdir()
    (root / ".spare-stale").write_bytes(b"a stopped daemon's")
    store = BlobStore(root)
    sources = [tmp_path / f"f{i}" for i in range(3)]
    for i, source in enumerate(sources):
        source.write_bytes(f"content {i}".encode())
    store.put_files(sources)
    spares = _wait_for_spares(store, 3)
    assert ".spare-stale" not in spares and len(spares) == 3
    for name in spares:
        os.unlink(store.root / name)  # as another store's refill may
    digests = store.put_files(sources)
    assert [store.path_of(d).read_bytes() for d in digests] == [
        f"content {i}".encode() for i in range(3)
    ]
