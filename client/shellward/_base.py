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
from shellward.v1 import shellward_pb2_grpc as pb_grpc


class BaseClient:
    """A connection to a shellward daemon.

    ``socket``: its Unix socket (default ``$SHELLWARD_SOCKET``, else the daemon's default);
    ``address`` and ``token``: a TCP listener instead (``token`` defaults to
    ``$SHELLWARD_TOKEN``); ``rpc_timeout``: the deadline of each unary call (``None``: none).
    """

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
        self._channel = self._open_channel(self.target)
        self._stub = pb_grpc.ShellwardStub(self._channel)

    def _open_channel(self, target: str) -> Any:
        """The blocking or the asyncio channel."""
        raise NotImplementedError

    def _options(self, deadline: Deadline) -> dict[str, Any]:
        """The keyword arguments of one stub call."""
        timeout = self._rpc_timeout if deadline is CLIENT_DEADLINE else deadline
        return {"timeout": timeout, "metadata": self._metadata}
