"""Before-images of the files a commit changes, kept by content (undo restores from them).

Choices, and why
- **Content-addressed.** A blob's name is the SHA-256 of its content, the very hex digest an
  effect's ``sha256:<hex>`` before hash carries: the effect alone finds its before-image,
  and a file committed over a thousand times with the same content is stored once.
- **Atomic.** A blob is written to a temporary file in the store, fsync'd, then renamed to
  its name: a crash leaves either no blob or a whole one, never a short one under a valid
  name. The digest is computed over the bytes actually copied, never trusted from a caller.
- **Private, and near the workspace.** The store is 0700 in the daemon's state dir (it
  holds copies of the user's files); on the workspace's file system when the state dir is,
  so storing a before-image is a copy within one device.
- **Never follows a link.** The source is opened with ``O_NOFOLLOW``: a symlink's
  before-image is its target, recorded in the effect itself, never a blob. A caller that
  must not resolve a path by name at all (the file tools) opens the file itself and hands
  over its descriptor (:meth:`BlobStore.put_fd`).
- **One place.** The store lives at :func:`store_path` of the state dir; the stager, the
  file tools and undo all open it there.

Retention, size bounds and garbage collection belong to undo, which reads these blobs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path

_CHUNK = 1 << 20
_HEX = re.compile(r"[0-9a-f]{64}")


def store_path(state_dir: Path) -> Path:
    """Where the daemon whose state directory is ``state_dir`` keeps its before-images."""
    return state_dir / "blobs"


class BlobError(Exception):
    """A before-image could not be stored; the message says which file and why."""


class BlobStore:
    """Blobs under ``root`` (made 0700), two-level fan-out by digest prefix."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.root, 0o700)

    def path_of(self, digest: str) -> Path:
        """Where the blob of ``digest`` (64 hex characters, or ``sha256:<hex>``) lives."""
        hexdigest = digest.removeprefix("sha256:")
        if not _HEX.fullmatch(hexdigest):
            raise ValueError(f"not a SHA-256 hex digest: {digest!r}")
        return self.root / hexdigest[:2] / hexdigest

    def has(self, digest: str) -> bool:
        return self.path_of(digest).is_file()

    def put_file(self, path: Path) -> str:
        """Store a copy of the regular file ``path``; return its SHA-256 hex digest."""
        try:
            source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise BlobError(f"cannot read {path} to keep its before-image: {exc.strerror}") from exc
        try:
            return self.put_fd(source, str(path))
        finally:
            os.close(source)

    def put_fd(self, source: int, name: str) -> str:
        """Store a copy of the regular file open for reading at ``source`` (from where its
        offset is; ``name`` for messages); return its SHA-256 hex digest.

        For a caller that opened the file itself (the file tools, beneath the workspace's
        descriptor): the store never resolves a workspace path by name."""
        if not stat.S_ISREG(os.fstat(source).st_mode):
            raise BlobError(f"{name} is not a regular file; only files have before-images")
        return self._copy(source, name)

    def _copy(self, source: int, name: str) -> str:
        temp = self.root / f".tmp-{secrets.token_hex(8)}"
        digest = hashlib.sha256()
        try:
            target = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                while chunk := os.read(source, _CHUNK):
                    digest.update(chunk)
                    os.write(target, chunk)
                os.fsync(target)
            finally:
                os.close(target)
            hexdigest = digest.hexdigest()
            final = self.path_of(hexdigest)
            if final.is_file():
                return hexdigest  # deduplicated: the same content is already kept
            final.parent.mkdir(mode=0o700, exist_ok=True)
            os.rename(temp, final)
            _fsync_dir(final.parent)
            return hexdigest
        except OSError as exc:
            raise BlobError(
                f"cannot keep the before-image of {name} in {self.root}: {exc.strerror}; "
                "free space there or check the state directory's permissions"
            ) from exc
        finally:
            # Gone already (renamed, or never made: a store that is not a directory any
            # more raises ENOTDIR here too); the error that matters is the one above.
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(temp)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
