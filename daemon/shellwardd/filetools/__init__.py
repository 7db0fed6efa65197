"""The built-in file tools: read, list, write and patch files inside one workspace.

Pure domain code over the filesystem: no gRPC, no ledger. A write happens in two steps so
the runtime can record it like a command: :func:`plan_write` or :func:`plan_patch` computes
a :class:`FileWritePlan` (the file's hash before and after, and the new content) without
touching the workspace, and :func:`apply_write` carries it out atomically. A replay is
checked like a command's, against the file effects the write detector recorded.

Every path is resolved from a descriptor of the workspace root, never by name from ``/``,
and no symlink is followed, so however the workspace changes under a tool (a sandboxed process
swapping a directory with a symlink), it never reads or writes outside. Also refused:
``..`` out of the root, anything in a ``.git`` directory (git's config and hooks make it
run code) or in the write detector's cookie directory, a file with more than one hard
link, anything but a regular file. :func:`check_path` gives those refusals before a call
starts; every tool meets them again when it opens the path.

A ``base_hash`` makes an edit conditional on what the model last read: ``None`` means
"whatever is there now", ``""`` means "the file must not exist yet", and a hash must equal
the file's hash now, or the plan is refused with :class:`~shellwardd.errors.Conflict`.

Modules: ``_beneath`` opens paths beneath a directory descriptor, ``_paths`` turns a
path into names and refusals into sentences, ``_patch`` applies unified diffs to bytes,
``_tools`` holds the tools.
"""

from ._paths import check_path
from ._tools import (
    MAX_LIST_ENTRIES,
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
    "MAX_LIST_ENTRIES",
    "MAX_PATCH_BYTES",
    "TEMP_SUFFIX",
    "EntryKind",
    "FileEntry",
    "FileListing",
    "FileRead",
    "FileWritePlan",
    "apply_write",
    "check_path",
    "list_files",
    "plan_patch",
    "plan_write",
    "read_file",
]
