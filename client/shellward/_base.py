"""What ``Client`` and ``AsyncClient`` share: where the daemon is, the token, the deadlines.

The calls themselves are built once in ``_requests``; a client only opens its channel and
sends them, blocking or awaiting.
"""

from __future__ import annotations

from typing import Any

from shellward._requests import (
    CLIENT_DEADLINE,
    Deadline,
    PathLike,
    auth_metadata,
    resolve_target,
)


class BaseClient:
    def __init__(
        self,
        socket: PathLike = None,
        *,
        address: str | None = None,
        token: str | None = None,
        rpc_timeout: float | None = 30.0,
    ) -> None:
        self.target = resolve_target(socket, address)
        self._metadata = auth_metadata(token)
        self._rpc_timeout = rpc_timeout

    def _options(self, deadline: Deadline) -> dict[str, Any]:
        """The keyword arguments of one stub call."""
        timeout = self._rpc_timeout if deadline is CLIENT_DEADLINE else deadline
        return {"timeout": timeout, "metadata": self._metadata}
