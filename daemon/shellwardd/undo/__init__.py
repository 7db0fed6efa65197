"""Undo of a committed call's file changes: :mod:`.plan` checks that every file is still as
the call left it and turns its effects into steps; :mod:`.restore` carries them out beneath
the workspace's descriptor, never through a symlink."""

from .plan import UndoPlan, UndoStep, plan_undo
from .restore import restore

__all__ = ["UndoPlan", "UndoStep", "plan_undo", "restore"]
