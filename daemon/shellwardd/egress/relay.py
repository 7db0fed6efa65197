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
- **Bytes are spliced**, kernel to kernel through a pipe, a thread per direction, as the
  proxy's :mod:`.tunnel` does (a ``recv``/``sendall`` loop made the relay the next
  bottleneck once the proxy spliced). ``os.splice`` is Python 3.10 or newer:
  :func:`python` refuses an older ``python3`` at once rather than let every connection
  fail.
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
import fcntl, os, socket, sys, threading
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
def pipe(source, sink):
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1048576)
    except OSError:
        pass
    try:
        while size := os.splice(source.fileno(), write_end, 1048576):
            while size:
                size -= os.splice(read_end, sink.fileno(), size)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):  # wakes the other direction; closed when both are done
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    os.close(read_end)
    os.close(write_end)
while True:
    client, _ = server.accept()
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle on handshakes
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        continue
    for ends in ((client, upstream), (upstream, client)):
        threading.Thread(target=pipe, args=ends, daemon=True).start()
"""


def python() -> str:
    """The host's python3 (outside any virtualenv a workspace could hold)."""
    found = shutil.which("python3", path=BASE_PATH)
    if found is None:
        raise FileNotFoundError("python3 is not installed; the network relay needs it")
    path = str(Path(found).resolve())
    probe = subprocess.run([path, "-I", "-S", "-c", "import os; os.splice"], capture_output=True)
    if probe.returncode != 0:
        raise FileNotFoundError(
            f"{path} has no os.splice (it is older than Python 3.10); the network relay "
            "needs python3 3.10 or newer"
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
