"""Undo of a committed call's file changes: :mod:`.plan` checks that every file is still as
the call left it and turns its effects into steps; :mod:`.restore` carries them out beneath
the workspace's descriptor, never through a symlink; :mod:`.retention` bounds the
before-images kept for it."""

from .plan import UndoPlan, UndoStep, images_needed, plan_undo
from .restore import restore
from .retention import Collected, KeptCall, collect

__all__ = [
    "Collected",
    "KeptCall",
    "UndoPlan",
    "UndoStep",
    "collect",
    "images_needed",
    "plan_undo",
    "restore",
]
