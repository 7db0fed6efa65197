"""The blob store: content-addressed, deduplicated, atomic, private, never follows links."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

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
