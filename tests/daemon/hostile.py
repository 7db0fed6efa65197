"""What the file tools' hostile tests need: a process that swaps a directory of the
workspace with a symlink to a directory outside (``renameat2(RENAME_EXCHANGE)`` in a loop,
a separate process for real parallelism), and a witness of every open of one file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_SWAP = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
pause = float(sys.argv[3])
RENAME_EXCHANGE = 2
if libc.renameat2(-100, a, -100, b, RENAME_EXCHANGE) != 0:
    sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
print("swapping", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, RENAME_EXCHANGE)
    if pause:
        time.sleep(pause)
"""


@dataclass(frozen=True)
class Layout:
    """``workspace/d`` (a real directory holding ``f``) and ``workspace/swap`` (a symlink to
    ``outside``, which holds a secret ``f``): the two names the swapper exchanges."""

    INSIDE = b"inside\n"
    SECRET = b"SECRET from outside the workspace\n"

    workspace: Path
    outside: Path

    @classmethod
    def make(cls, tmp_path: Path, workspace: Path) -> Layout:
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "f").write_bytes(cls.SECRET)
        (outside / "only-outside.txt").write_bytes(b"")
        (workspace / "d").mkdir()
        (workspace / "d" / "f").write_bytes(cls.INSIDE)
        (workspace / "swap").symlink_to(outside)
        return cls(workspace, outside)

    def outside_names(self) -> list[str]:
        return sorted(p.name for p in self.outside.iterdir())


@contextlib.contextmanager
def swapping(layout: Layout, pause: float = 0.0) -> Iterator[None]:
    """Swap ``d`` and ``swap`` in the background while the block runs, every ``pause``
    seconds (0: as fast as it can)."""
    workspace = layout.workspace
    process = subprocess.Popen(
        [sys.executable, "-c", _SWAP, str(workspace / "d"), str(workspace / "swap"), str(pause)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "swapping", f"the swapper did not start (exit {process.poll()})"
        yield
    finally:
        process.kill()
        process.wait()


_IN_OPEN = 0x20


@contextlib.contextmanager
def watching_opens(path: Path) -> Iterator[Callable[[], int]]:
    """Count the opens of ``path`` for I/O (inotify IN_OPEN; an O_PATH open is not one),
    by any process, while the block runs; the block gets a function that counts so far."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    seen = 0

    def opens() -> int:
        nonlocal seen
        with contextlib.suppress(BlockingIOError):
            while data := os.read(fd, 4096):
                seen += len(data) // 16  # one event without a name: 16 bytes
        return seen

    try:
        assert libc.inotify_add_watch(fd, os.fsencode(path), _IN_OPEN) >= 0
        yield opens
    finally:
        os.close(fd)
