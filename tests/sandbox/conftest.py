"""Fixtures of the sandbox red-team tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory the sandbox sees as it is on the host: not under /tmp or /var/tmp
    (private tmpfs inside), and reachable by a root daemon's unprivileged sandbox user."""
    parent = Path("/var/lib") if os.geteuid() == 0 else Path.home()
    path = Path(tempfile.mkdtemp(prefix="shellward-test-", dir=parent))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
