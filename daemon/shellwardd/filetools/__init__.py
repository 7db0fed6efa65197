"""The built-in file tools: read, list, write and patch files inside one workspace.

Pure domain code over the filesystem: no gRPC, no ledger. A write happens in two steps so
the runtime can record it like a command: :func:`plan_write` or :func:`plan_patch` computes
a :class:`FileWritePlan` (the file's hash before and after, and the new content) without
touching the workspace, and :func:`apply_write` carries it out atomically. A replay is
checked like a command's, against the file effects the write detector recorded.

Every path goes through :func:`resolve_path`, which keeps the tools inside the workspace:
no ``..`` or symlink escapes, nothing in a ``.git`` directory (git's config and hooks make
it run code), nothing in the write detector's cookie directory.

A ``base_hash`` makes an edit conditional on what the model last read: ``None`` means
"whatever is there now", ``""`` means "the file must not exist yet", and a hash must equal
the file's hash now, or the plan is refused with :class:`~shellwardd.errors.Conflict`.

Modules: ``_paths`` decides where a path leads, ``_patch`` applies unified diffs to bytes,
``_tools`` holds the tools.
"""

from ._paths import resolve_path
from ._tools import (
    MAX_PATCH_BYTES,
    TEMP_SUFFIX,
    EntryKind,
    FileEntry,
    FileListing,
    FileRead,
    FileWritePlan,
    apply_write,
    list_files,
    plan_patch,
    plan_write,
    read_file,
)

__all__ = [
    "MAX_PATCH_BYTES",
    "TEMP_SUFFIX",
    "EntryKind",
    "FileEntry",
    "FileListing",
    "FileRead",
    "FileWritePlan",
    "apply_write",
    "list_files",
    "plan_patch",
    "plan_write",
    "read_file",
    "resolve_path",
]
