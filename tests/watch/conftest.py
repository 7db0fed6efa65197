"""Fixtures for the write detector: a workspace, a state dir, a started monitor."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellwardd.watch import CallEffects, WorkspaceMonitor


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def run(monitor: WorkspaceMonitor, command: str, *, exclusive: bool = True) -> CallEffects:
    """One call: open the window, run ``command`` in the workspace, close the window."""
    watch = monitor.begin_call(exclusive=exclusive, timeout=30)
    try:
        subprocess.run(command, shell=True, cwd=monitor.root, check=True)
    finally:
        effects = monitor.finish_call(watch)
    return effects


def summary(effects: CallEffects) -> list[tuple[str, str]]:
    return [(e.kind.value, e.path) for e in effects.effects]


def fill(directory: Path, count: int, per_dir: int = 20) -> list[Path]:
    """``count`` small distinct files, ``per_dir`` per subdirectory."""
    files = []
    for i in range(count):
        sub = directory / f"d{i // per_dir:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        path = sub / f"f{i:05d}.txt"
        path.write_bytes(f"content of file {i}\n".encode())
        files.append(path)
    return files


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def monitor(ws: Path, state_dir: Path) -> Iterator[WorkspaceMonitor]:
    mon = WorkspaceMonitor(ws, state_dir)
    mon.start()
    assert mon.wait_ready(30)
    yield mon
    mon.stop()
