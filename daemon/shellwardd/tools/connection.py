"""What a connection to an MCP server reports: its tools, a call's outcome, its state.

Apart from :mod:`.mcp_client`, which imports the MCP SDK (about half of the daemon's
start-up imports): the daemon loads that only when the operator configures a server.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .classify import ToolHints


class OutcomeKind(enum.Enum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    LOST = "lost"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class ToolInfo:
    """One tool as its server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: ToolHints | None


@dataclass(frozen=True)
class ToolCallOutcome:
    kind: OutcomeKind
    # The tool's text content, blocks joined by newlines; non-text blocks as a placeholder.
    content: str = ""
    structured: Any = None
    is_error: bool = False
    # What happened, for a timeout, lost or unavailable call (a sentence for the ledger).
    detail: str = ""


@dataclass(frozen=True)
class ConnectionStatus:
    running: bool
    starts: int
    failures: int
    retry_in: float
    last_error: str
