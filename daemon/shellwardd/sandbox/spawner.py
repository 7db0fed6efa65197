"""A quiet process that spawns the sandbox for the daemon: the spawn server.

Choices, and why
- **bwrap is forked from a small, single-threaded process.** Spawning from the daemon
  itself (gRPC, watchdog and SQLite threads, a large heap) measured about 3 ms slower per
  call than the same spawn from a quiet process. The server is this file run as a script by
  a fresh interpreter (``python -I -S``: no site, no daemon imports), started by the sandbox
  check before the daemon starts any thread, after the daemon entered its private mount
  namespace (the server, and what it spawns, must see the same workspace mounts).
- **The daemon says exactly what to run.** A request is an argv, an environment, a
  working directory, whether to start a new session, and file descriptors passed with
  ``SCM_RIGHTS``: the i-th becomes fd i in the child (0-2 are stdin, stdout, stderr). The
  server adds nothing of its own: whatever set-up a caller needs is part of its argv/fds.
  It spawns with ``posix_spawn`` (a vfork in glibc), chdir'ing itself around the call (it
  is single-threaded), with SIGPIPE and SIGXFSZ at their defaults and no signal blocked.
- **One socket per call, no dispatcher.** The daemon sends each request with a fresh
  ``SOCK_SEQPACKET`` socket; on it the server answers the pid and a pidfd of the child (opened
  before the child can be reaped, so a kill through it never hits a reused pid), and later
  its exit status (``os.waitstatus_to_exitcode``: negative for a signal), then closes it.
  The calling thread waits on its own socket; no thread of the daemon wakes for another's call.
- **Failing closed.** If the server dies, every pending and later request fails with
  :class:`SpawnerGone` (the runner answers SANDBOX_ERROR: nothing ran), its children die
  with it (the runner's ``setpriv --pdeathsig KILL``), and the next spawn starts a new
  server. The server exits when the daemon's end of the control socket closes.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Largest request: an argv with a command of up to the daemon's request limits, and an env.
_MAX_MESSAGE = 4 * 1024 * 1024
_MAX_FDS = 16
# How long to wait for the server's answer to a spawn (it only forks).
_ANSWER_SECONDS = 30.0


class SpawnerGone(OSError):
    """The spawn server stopped: the request was not (or no longer) served."""


class Spawned:
    """A child of the spawn server, seen from the daemon: ``poll``/``wait`` for its exit
    status, ``kill`` through its pidfd."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket) -> None:
        self.pid = pid
        self._pidfd: int | None = pidfd
        self._channel = channel
        channel.setblocking(False)  # poll() must never wait
        self.returncode: int | None = None
        self.lost = False  # True: the server died before it reported the exit status

    def _take(self, message: bytes) -> int:
        if message:
            self.returncode = int(json.loads(message)["exit"])
        else:  # the server is gone: its children were killed with it (pdeathsig)
            self.lost = True
            self.returncode = -signal.SIGKILL
        self._close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            message = self._channel.recv(_MAX_MESSAGE)
        except BlockingIOError:
            return None
        return self._take(message)

    def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        self._channel.setblocking(True)
        return self._take(self._channel.recv(_MAX_MESSAGE))

    def kill(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _close(self) -> None:
        self._channel.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def close(self) -> None:
        """Forget the child without waiting (it is killed or reported elsewhere)."""
        if self.returncode is None:
            self._close()


class Spawner:
    """The daemon's side: starts the server, sends it requests, restarts it if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._server: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server is not None else None

    def start(self) -> None:
        """Start the server unless one runs (call before the daemon starts threads)."""
        with self._lock:
            if self._control is not None:
                return
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                # /proc/self/exe: this very interpreter, even where the path it was started
                # by is not searchable by the daemon's user (an interpreter under /root).
                self._server = subprocess.Popen(
                    ["/proc/self/exe", "-I", "-S", str(Path(__file__)), str(theirs.fileno())],
                    stdin=subprocess.DEVNULL,
                    pass_fds=[theirs.fileno()],
                    start_new_session=True,  # a Ctrl-C for the daemon is not for its calls
                )
            except OSError:
                ours.close()
                raise
            finally:
                theirs.close()
            self._control = ours

    def stop(self) -> None:
        """Close the control socket: the server exits (its children are the calls')."""
        with self._lock:
            control, self._control = self._control, None
            server, self._server = self._server, None
        if control is not None:
            control.close()
        if server is not None:
            try:
                server.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

    def _lost(self, control: socket.socket) -> None:
        """The server is gone: forget it (the next spawn starts a new one)."""
        with self._lock:
            if self._control is not control:
                return  # already restarted
            self._control = None
            server, self._server = self._server, None
        control.close()
        if server is not None:
            with contextlib.suppress(OSError):
                server.kill()
            server.wait()

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        fds: Sequence[int],
        new_session: bool = False,
    ) -> Spawned:
        """Run ``argv`` (argv[0] an absolute path) with ``fds[i]`` as fd i; OSError (for a
        stopped server :class:`SpawnerGone`) if it could not be started."""
        self.start()
        control = self._control
        if control is None:
            raise SpawnerGone("the spawn server was stopped (the daemon is shutting down)")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {"argv": list(argv), "env": dict(env), "cwd": cwd, "setsid": new_session}
        try:
            try:
                socket.send_fds(control, [json.dumps(request).encode()], [theirs.fileno(), *fds])
            except OSError as exc:
                self._lost(control)
                raise SpawnerGone(
                    f"the spawn server (pid {self.pid}) stopped ({exc.strerror}); "
                    "a new one starts with the next call"
                ) from None
            finally:
                theirs.close()
            ours.settimeout(_ANSWER_SECONDS)
            message, pidfds = _receive(ours, 1)
        except BaseException:
            ours.close()
            raise
        if not message:
            ours.close()
            self._lost(control)
            raise SpawnerGone(
                "the spawn server stopped before it answered; a new one starts with the next call"
            )
        answer = json.loads(message)
        if "error" in answer:
            ours.close()
            raise OSError(answer["errno"], answer["error"])
        return Spawned(int(answer["pid"]), pidfds[0], ours)


def _receive(sock: socket.socket, max_fds: int) -> tuple[bytes, list[int]]:
    """A message and its fds, close-on-exec from the start (``socket.recv_fds`` drops its
    flags: the fds would be inherited by the next spawn)."""
    fds = array.array("i")
    message, ancillary, _, _ = sock.recvmsg(
        _MAX_MESSAGE, socket.CMSG_LEN(max_fds * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return message, list(fds)


# --- the server --------------------------------------------------------------------


def _spawn(request: dict[str, Any], fds: list[int]) -> int:
    """posix_spawn the request with ``fds[i]`` as fd i; returns the pid."""
    # Move the received fds above every target, so that no dup2 overwrites a later source.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, len(fds)) for fd in fds]
    for fd in fds:
        os.close(fd)
    try:
        os.chdir(request["cwd"])
        return os.posix_spawn(
            request["argv"][0],
            request["argv"],
            request["env"],
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(high)],
            setsid=bool(request["setsid"]),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            setsigmask=(),
        )
    finally:
        os.chdir("/")
        for fd in high:
            os.close(fd)


def serve(control: socket.socket) -> None:
    """Serve spawn requests until the daemon closes ``control``."""
    # Inherited through pass_fds: no child may hold it (it could ask for an unsandboxed spawn).
    control.set_inheritable(False)
    os.chdir("/")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
                _reap(children)
                continue
            message, fds = _receive(control, _MAX_FDS)
            if not message:
                return  # the daemon is gone (or stopped us)
            if not fds:
                continue
            channel = socket.socket(fileno=fds[0])
            try:
                pid = _spawn(json.loads(message), fds[1:])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                number = exc.errno if isinstance(exc, OSError) and exc.errno else 0
                answer = {"error": f"cannot run the sandbox: {exc}", "errno": number}
                with contextlib.suppress(OSError):
                    channel.send(json.dumps(answer).encode())
                channel.close()
                continue
            pidfd = os.pidfd_open(pid)  # before any reaping: it names this child only
            try:
                socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [pidfd])
            except OSError:
                pass  # the daemon gave up on this call: the exit status goes nowhere
            finally:
                os.close(pidfd)
            children[pid] = channel
        # A SIGCHLD between two selects is on the wakeup pipe: nothing is missed.


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = children.pop(pid, None)
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            channel.close()


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
