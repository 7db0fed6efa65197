"""Which before-images the undo store keeps: bounded by size and by the ledger's retention.

Choices, and why
- **Calls, not blobs, are the unit.** An undo needs every image of its call, so images are
  kept or evicted a call at a time: the calls within the retention period, newest first,
  keep theirs while the total stays under the size bound; from the first call that would
  pass it, that call and every older one lose theirs (an undo of them answers
  RECORD_EXPIRED). A blob shared with a newer kept call stays: content is stored once.
- **Never a blob still on its way into the ledger.** A commit stores its images before it
  records the effects that name them; a blob younger than ``grace`` seconds is never
  removed, referenced or not, so a collection racing a commit cannot take its images.
- **Run at start-up and periodically** (the daemon's main loop), never on a call's path.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from shellwardd.staging.blobs import BlobStore

# Seconds a new blob is safe from collection (a commit records its effects well within it).
GRACE_SECONDS = 600.0
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class KeptCall:
    """A recorded call and the digests (hex) of the before-images its undo needs."""

    created_at: float
    digests: tuple[str, ...]


@dataclass(frozen=True)
class Collected:
    kept_blobs: int
    kept_bytes: int
    removed_blobs: int
    removed_bytes: int


def collect(
    store: BlobStore,
    calls: Iterable[KeptCall],
    *,
    max_bytes: int,
    retention: float,
    now: float | None = None,
    grace: float = GRACE_SECONDS,
) -> Collected:
    """Remove the blobs no kept call needs; return what is left and what went."""
    now = time.time() if now is None else now
    on_disk = _blobs(store)
    kept: set[str] = set()
    total = 0
    recent = sorted(
        (c for c in calls if now - c.created_at <= retention), key=lambda c: -c.created_at
    )
    for call in recent:
        new = {d for d in call.digests if d in on_disk and d not in kept}
        size = sum(on_disk[d][0] for d in new)
        if total + size > max_bytes:
            break  # this call and every older one lose their images
        kept |= new
        total += size
    removed = removed_bytes = 0
    for digest, (size, mtime) in on_disk.items():
        if digest in kept:
            continue
        if now - mtime < grace:
            total += size  # too young to judge: a commit may be recording it right now
            continue
        try:
            os.unlink(store.path_of(digest))
        except FileNotFoundError:
            continue
        removed += 1
        removed_bytes += size
    return Collected(len(on_disk) - removed, total, removed, removed_bytes)


def _blobs(store: BlobStore) -> dict[str, tuple[int, float]]:
    """Every blob in the store: digest → (size, mtime)."""
    found: dict[str, tuple[int, float]] = {}
    for fan in os.scandir(store.root):
        if not fan.is_dir(follow_symlinks=False):
            continue
        for blob in os.scandir(fan.path):
            if not _HEX.fullmatch(blob.name):
                continue  # not a blob (the store never names one so)
            st = blob.stat(follow_symlinks=False)
            found[blob.name] = (st.st_size, st.st_mtime)
    return found
