"""The operator's toolchain directories (``shellwardd --toolchain``), as the classifier sees
them: a bare program name runs the first match on the sandbox's PATH, and they come first.

Choices, and why:
- A toolchain outside every workspace is the operator's word: a program found there is
  judged by the rules for its name, as one in /usr/bin is.
- A toolchain inside a workspace is read-only to commands (the sandbox binds it so), but the
  file tools write the workspace outside the sandbox: an agent can replace `.venv/bin/cat`
  and then call `cat`. A name that resolves there is never trusted by rules (never replayed,
  with that reason); a name found nowhere in the toolchains is the system's program.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Toolchain:
    path: str
    # Inside a workspace: the agent's file tools can replace its programs.
    agent_writable: bool


def toolchains_for(paths: Iterable[Path], workspaces: Sequence[Path]) -> tuple[Toolchain, ...]:
    """The toolchains in PATH order, each marked by whether a workspace holds it."""
    roots = [w.resolve() for w in workspaces]
    return tuple(
        Toolchain(str(path), any(r == path.resolve() or r in path.resolve().parents for r in roots))
        for path in paths
    )


def first_program(toolchains: Sequence[Toolchain], name: str) -> tuple[str, Toolchain] | None:
    """Where a bare ``name`` resolves among the toolchains (the first executable file)."""
    for toolchain in toolchains:
        path = os.path.join(toolchain.path, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, toolchain
    return None
