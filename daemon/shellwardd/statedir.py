"""Where the daemon keeps things, made private and made its own: the state directory and
the socket's directory.

Choices, and why
- **One daemon per state directory.** Two daemons on one ledger would each take the other's
  running calls for a crash at start-up (``started`` → ``uncertain``), and an approved retry
  of such a call runs it twice. The first daemon holds an exclusive ``flock`` on
  ``daemon.lock`` for its whole life; the kernel drops it when the process dies, however it
  dies, so a stale lock cannot exist. The holder's pid is written in the file so the second
  daemon can say who holds it.
- **Private whatever the umask.** The ledger holds every command, its environment and its
  output. The state directory is made 0700 and the files the daemon creates in it 0600
  explicitly (a umask of 0 must not matter); the process umask is left alone, because
  commands and file tools create the user's files with it.
- **A socket directory another user controls is refused, not repaired.** Whoever can write
  in it can swap the socket and receive the requests (an approval, a token, a password in
  an env). The daemon creates the directory 0700 when it is missing; when it exists and is
  someone else's, or writable by others without the sticky bit, it refuses to start and
  says why.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from shellwardd.errors import ConfigError, StateError

LOCK_NAME = "daemon.lock"


def prepare_state_dir(path: Path) -> None:
    """Create the state directory 0700 (or make an existing one of ours 0700)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = path.stat()
        if info.st_uid != os.geteuid():
            raise StateError(
                f"the state directory {path} belongs to uid {info.st_uid}, not to the daemon's "
                f"user (uid {os.geteuid()}); give the daemon a --state-dir of its own"
            )
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(path, 0o700)
    except OSError as exc:
        raise StateError(_unusable(path, exc)) from exc


def private_file(path: Path) -> Path:
    """Create ``path`` 0600 if missing, and make it 0600 if it is not (an older daemon's)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    os.chmod(path, 0o600)
    return path


class StateDirLock:
    """The exclusive lock on a state directory; released by :meth:`close` or by death."""

    def __init__(self, state_dir: Path) -> None:
        path = state_dir / LOCK_NAME
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StateError(_unusable(state_dir, exc)) from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StateError(_unusable(state_dir, exc)) from exc
            raise StateError(
                f"another shellwardd (pid {holder}) is using the state directory {state_dir}; "
                "stop it first, or give this daemon its own --state-dir"
            ) from exc
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # drops the lock


def check_socket_dir(socket: Path) -> None:
    """Create the socket's directory 0700, or refuse one that others control."""
    directory = socket.parent
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = directory.stat()
    except OSError as exc:
        raise ConfigError(f"cannot use the socket directory {directory}: {exc.strerror}") from exc
    if info.st_uid != os.geteuid():
        raise ConfigError(
            f"refusing the socket directory {directory}: it belongs to uid {info.st_uid}, not "
            f"to the daemon's user (uid {os.geteuid()}), who could replace the socket and "
            "receive every request. Remove it, or pass --socket in a directory of your own"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise ConfigError(
            f"refusing the socket directory {directory}: it is writable by others (mode "
            f"{mode:04o}), who could replace the socket and receive every request. Make it "
            f"private (chmod 700 {directory}), or pass --socket in a directory of your own"
        )


def _unusable(path: Path, exc: OSError) -> str:
    return (
        f"cannot use the state directory {path}: {exc.strerror or exc}; give the daemon a "
        "writable --state-dir (SHELLWARD_STATE_DIR)"
    )
