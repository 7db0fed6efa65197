"""Calls by kind: one life cycle (:mod:`.lifecycle`), and what differs per kind of call.

=============  ======================  ================================================
kind           tools                   what it does
=============  ======================  ================================================
command        run_command             a shell command line, classified, in the sandbox
file_tool      read_file, list_files,  a file of the workspace, read or written by the
               write_file, apply_patch daemon itself
mcp_tool       any other name          a business tool of a configured MCP server
undo           undo                    the files a recorded call changed, put back
=============  ======================  ================================================
"""

from .command import CommandKind
from .file_tool import FileToolKind
from .lifecycle import CallListener, Kind, Lifecycle, Silent, Tracker
from .mcp_tool import McpToolKind
from .undo import UndoKind

__all__ = [
    "CallListener",
    "CommandKind",
    "FileToolKind",
    "Kind",
    "Lifecycle",
    "McpToolKind",
    "Silent",
    "Tracker",
    "UndoKind",
]
