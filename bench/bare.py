"""The daemon's sandbox profile spawned bare from Python: what a daemon call is compared with.

A daemon call runs in ``Sandbox.run`` with a state directory, so every command is staged:
its overlay's directories are made before the spawn (``StagingArea.create``), mounted in
the call's own mount namespace, and removed after. The bare side does the same, with a
state directory of its own (never the daemon's), and discards the overlay after each call
instead of committing it (a ``true`` writes nothing).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path

from shellwardd.config import Limits
from shellwardd.sandbox import Sandbox, SandboxSpec
from shellwardd.staging.area import StagingArea


class BareSandbox:
    """``run(command)`` spawns ``command`` in ``workspace`` the way the daemon does."""

    def __init__(self, base: Path, workspace: Path) -> None:
        state = base / "bare-state"
        state.mkdir(mode=0o700)
        self.sandbox = Sandbox(state_dir=state)
        self.sandbox.check()
        self._area = StagingArea(state / "staging", self.sandbox.mount_root)
        self._workspace = workspace
        self._spec = SandboxSpec(
            "true", workspace, workspace, {}, None, 60.0, Limits(), 1 << 20,
            hidden=(state, base),
        )  # fmt: skip
        self._ids = itertools.count()

    def run(self, command: str = "true") -> None:
        call_id = f"bare-{next(self._ids)}"
        dirs = self._area.create(call_id, self._workspace, self.sandbox.sandbox_owner)
        try:
            outcome = self.sandbox.run(
                replace(self._spec, command=command, staged=dirs),
                lambda chunk: None,
                threading.Event(),
                call_id=call_id,
            )
        finally:
            self._area.discard(dirs)
        assert outcome.exit_code == 0, outcome.sandbox_error or outcome.stderr.text

    def close(self) -> None:
        self.sandbox.close()
