"""Inside the sandbox: a TCP port on its own loopback that leads to the call's proxy socket.

Choices, and why:

- **The sandbox has its own network namespace** (bwrap ``--unshare-net``: only ``lo``), so
  the host's interfaces, its loopback listeners and the daemon's TCP port do not exist in
  it. The one way out is the call's proxy socket, bound in at :data:`INNER_SOCKET`.
- **The relay is the sandbox's own Python** (the host's ``python3``, read-only in the
  sandbox), started with ``-I -S``: no variable or file of the request or the workspace is
  imported into it. It binds :data:`PORT` before the command starts (no race with the
  command's first connection), forks, and the parent execs the command: the command stays
  the sandbox's main process, so its exit status is the call's, and the relay ends with
  the pid namespace when it exits.
- **A fixed port**: every sandbox has a loopback of its own, so the ``*_PROXY`` variables
  can be set by bwrap like every other variable.
- **The relay hands each connection over, it copies nothing.** It accepts the command's
  TCP connection and passes the socket itself to the proxy (``SCM_RIGHTS`` on a fresh
  connection to the call's socket, one byte beside it), then closes its own copy: the
  proxy reads and writes the command's socket directly. A relay that copied was a second
  hop for every byte (a Unix socket, and a process, between command and proxy); even
  splicing, it cost about a quarter of a download's throughput and 2 to 3 ms per HTTPS
  connection (docs/performance.md). ``socket.send_fds`` is Python 3.9 or newer:
  :func:`python` refuses an older ``python3`` at once rather than let every connection
  fail.
- **A connection it cannot hand over gets a 502 that says why** (the proxy socket gone:
  the call ended, or the daemon did), not an empty reply that tells the command nothing.
  The relay reads the client's request to its end (or for two seconds) after answering:
  closing a socket with unread bytes sends a reset, which may destroy the answer before
  the client has read it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from shellwardd.sandbox.profile import BASE_PATH

PORT = 3128
INNER_SOCKET = "/dev/shellward-egress.sock"
PROXY_URL = f"http://127.0.0.1:{PORT}"
# What the sandbox's own loopback serves is not the proxy's business.
NO_PROXY = "localhost,127.0.0.1,::1"

_RELAY = r"""
import os, socket, sys
_LINGER = 2.0
port, path, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(128)
if os.fork():
    server.close()
    os.execv(argv[0], argv)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
while True:
    client, _ = server.accept()
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle on handshakes
    with client, socket.socket(socket.AF_UNIX) as upstream:
        try:
            upstream.connect(path)
            socket.send_fds(upstream, [b"\0"], [client.fileno()])
        except OSError as exc:
            body = (
                f"shellward's network relay cannot reach the daemon's proxy ({exc}): the "
                "call's network has ended or the daemon is gone; run the command again\n"
            ).encode()
            head = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            try:
                client.settimeout(_LINGER)
                client.sendall(head.encode() + body)
                client.shutdown(socket.SHUT_WR)
                while client.recv(65536):  # its request, unread, would reset the answer
                    pass
            except OSError:
                pass
"""


def python() -> str:
    """The host's python3 (outside any virtualenv a workspace could hold)."""
    found = shutil.which("python3", path=BASE_PATH)
    if found is None:
        raise FileNotFoundError("python3 is not installed; the network relay needs it")
    path = str(Path(found).resolve())
    probe = [path, "-I", "-S", "-c", "import socket; socket.send_fds"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        raise FileNotFoundError(
            f"{path} has no socket.send_fds (it is older than Python 3.9); the network "
            "relay needs python3 3.9 or newer"
        )
    return path


def bwrap_args(socket_path: Path) -> list[str]:
    """Bind the call's proxy socket in and point every client at the relay."""
    args = ["--bind", str(socket_path), INNER_SOCKET]
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        args += ["--setenv", name, PROXY_URL, "--setenv", name.upper(), PROXY_URL]
    args += ["--setenv", "no_proxy", NO_PROXY, "--setenv", "NO_PROXY", NO_PROXY]
    return args


def command_prefix(python_path: str) -> list[str]:
    """What runs the command with the relay beside it."""
    return [python_path, "-I", "-S", "-c", _RELAY, str(PORT), INNER_SOCKET]
