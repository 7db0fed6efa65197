"""The write detector: what files did a call create, modify, delete or rename?

A watchdog observer collects dirty paths; a persisted hash index holds the state before;
after a call, only the dirty paths are re-hashed. See :mod:`.detector` for the protocol
and the choices it makes.
"""

from .detector import (
    CallEffects,
    CallWatch,
    IndexNotReady,
    IndexProgress,
    WatchError,
    WorkspaceMonitor,
)
from .hashing import content_hash

__all__ = [
    "CallEffects",
    "CallWatch",
    "IndexNotReady",
    "IndexProgress",
    "WatchError",
    "WorkspaceMonitor",
    "content_hash",
]
