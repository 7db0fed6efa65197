"""The daemon's sandbox profile spawned bare from Python: what a daemon call is compared with.

The profile is built the daemon's way, not copied: a ``Sandbox`` and the toolchains made
from a default ``Config`` as ``shellwardd.main`` makes them, and each call's ``SandboxSpec``
from ``CommandKind.spec``, the function a daemon call uses. So the bare side has what a
call has: the toolchain directories found for the workspace (read-only, first on PATH),
the write detector's cookie directory read-only, ``SHELLWARD_CALL_ID``, the hidden state
and socket directories, the call's cgroup and its staged overlay. What it leaves out is
what the daemon adds around the spawn: gRPC, classification, the ledger, the write
detector's barrier and the commit (a ``true`` writes nothing, so its overlay is discarded
instead of committed).

The state directory is the bare side's own, never the daemon's.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path

from shellward.types import CallStatus, Verdict
from shellwardd.calls.command import CommandKind
from shellwardd.classifier.toolchains import build_toolchains
from shellwardd.config import Config
from shellwardd.main import build_sandbox
from shellwardd.requests import CommandRequest
from shellwardd.staging.area import StagingArea


def _never_classify(*args: object) -> Verdict:
    raise AssertionError("the bare side runs the command without classifying it")


class BareSandbox:
    """``run(command)`` spawns ``command`` in ``workspace`` the way the daemon does."""

    def __init__(self, base: Path, workspace: Path) -> None:
        state = base / "bare-state"
        state.mkdir(mode=0o700)
        workspace = workspace.resolve()  # as the daemon's canonical cwd
        config = Config(socket=base / "bare.sock", state_dir=state, workspaces=(workspace,))
        self.sandbox = build_sandbox(config)
        self.sandbox.check()
        toolchains = build_toolchains(
            config.toolchains,
            config.workspaces,
            auto=not config.no_auto_toolchains,
            home=Path.home(),
            reaches=self.sandbox.reaches,
        )
        self._area = StagingArea(state / "staging", self.sandbox.mount_root)
        self._kind = CommandKind(config, _never_classify, self.sandbox, toolchains, self._area)
        self._workspace = workspace
        self._timeout = config.default_timeout
        self._ids = itertools.count()

    def run(self, command: str = "true") -> None:
        call_id = f"bare-{next(self._ids)}"
        request = CommandRequest(command, cwd=str(self._workspace))
        started = replace(
            self._kind.planned(call_id, "", request),
            status=CallStatus.STARTED,
            workspace=str(self._workspace),
            timeout_seconds=self._timeout,
        )
        dirs = self._area.create(call_id, self._workspace, self.sandbox.sandbox_owner)
        try:
            outcome = self.sandbox.run(
                self._kind.spec(started, request),
                lambda chunk: None,
                threading.Event(),
                call_id=call_id,
            )
        finally:
            self._area.discard(dirs)
        assert outcome.exit_code == 0, outcome.sandbox_error or outcome.stderr.text

    def close(self) -> None:
        self.sandbox.close()
