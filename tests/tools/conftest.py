"""Shared pieces for the tool-registry tests: the mock business server as a configured server."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from shellwardd.tools.config import ServerConfig, Trust

MOCK = Path(__file__).resolve().parents[1] / "mocks" / "business_mcp.py"


def mock_server(
    name: str = "biz",
    *,
    trust: Trust = Trust.UNTRUSTED,
    timeout: float = 10.0,
    **env: str,
) -> ServerConfig:
    """The mock business service as a stdio server; ``env`` holds its MOCK_* switches."""
    return ServerConfig(
        name=name,
        command=(sys.executable, str(MOCK)),
        trust=trust,
        env=types.MappingProxyType(env),
        timeout_seconds=timeout,
    )


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``check`` until it holds or ``timeout`` passes; the last answer."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
