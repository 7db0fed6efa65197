"""The file tools against a hostile process that swaps a directory with a symlink to the
outside (``renameat2(RENAME_EXCHANGE)`` in a tight loop) while they run.

Each tool runs many times during the swapping: it may be refused (a symlink was in its
way), but it never reads outside content, never creates a file outside, never leaves a
temporary file outside. Both resolvers are tested: openat2 and the O_NOFOLLOW walk.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import pytest

from shellwardd.errors import PermissionDenied
from shellwardd.filetools import (
    TEMP_SUFFIX,
    FileWritePlan,
    _beneath,
    apply_write,
    list_files,
    plan_write,
    read_file,
)
from shellwardd.staging.blobs import BlobStore
from tests.daemon.hostile import Layout, swapping

TRIES = 3000


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2" and not _beneath.use_openat2:
        pytest.skip("this kernel has no openat2: only the walk can be tested")
    if request.param == "walk":
        monkeypatch.setattr(_beneath, "use_openat2", False)
    return str(request.param)


@pytest.fixture
def layout(tmp_path: Path, workspace: Path) -> Layout:
    return Layout.make(tmp_path, workspace)


def test_read_file_never_returns_outside_content(resolver: str, layout: Layout) -> None:
    seen: dict[bytes, int] = {}
    refused = 0
    with swapping(layout):
        for _ in range(TRIES):
            try:
                content = read_file(layout.workspace, "d/f").content
            except PermissionDenied:
                refused += 1
                continue
            seen[content] = seen.get(content, 0) + 1
    assert Layout.SECRET not in seen
    assert set(seen) <= {Layout.INSIDE}
    assert refused > 0  # the swap really happened under the reads


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "state" / "blobs")


def test_write_never_creates_a_file_outside(
    resolver: str, layout: Layout, blobs: BlobStore
) -> None:
    plan = FileWritePlan("d/new.txt", "", "sha256:" + hashlib.sha256(b"x").hexdigest(), b"x")
    written = 0
    with swapping(layout):
        for _ in range(TRIES // 3):
            try:
                apply_write(layout.workspace, plan, blobs)
                written += 1
            except PermissionDenied:
                continue
            # Planning reads the file: the same refusals, never the outside file.
            with contextlib.suppress(PermissionDenied):
                plan_write(layout.workspace, "d/f", b"y", None)
    assert layout.outside_names() == ["f", "only-outside.txt"]
    assert not [p for p in layout.workspace.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    assert (layout.outside / "f").read_bytes() == Layout.SECRET
    assert written > 0


def test_a_write_never_keeps_an_outside_file_as_its_before_image(
    resolver: str, layout: Layout, blobs: BlobStore
) -> None:
    # Each write replaces d/f, so it keeps what d/f holds first: while d is swapped with a
    # link to outside, what it keeps must never be the secret behind the link.
    written = 0
    with swapping(layout):
        for n in range(TRIES // 3):
            content = f"{n}\n".encode()
            plan = FileWritePlan(
                "d/f", "", "sha256:" + hashlib.sha256(content).hexdigest(), content
            )
            try:
                apply_write(layout.workspace, plan, blobs)
                written += 1
            except PermissionDenied:
                continue
    kept = {p.read_bytes() for p in blobs.root.glob("*/*")}
    assert Layout.SECRET not in kept
    assert Layout.INSIDE in kept and written > 0
    assert (layout.outside / "f").read_bytes() == Layout.SECRET


def test_list_files_never_lists_outside(resolver: str, layout: Layout) -> None:
    with swapping(layout):
        for _ in range(TRIES // 3):
            try:
                listing = list_files(layout.workspace, "d", recursive=True)
            except PermissionDenied:
                continue
            assert "d/only-outside.txt" not in [e.path for e in listing.entries]
