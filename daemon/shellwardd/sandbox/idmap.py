"""A root daemon's workspaces, seen through an idmapped mount as owned by the sandbox user.

Choices, and why:

- **Why not just a user namespace.** bwrap started by root maps the sandbox's uid to
  host uid 0: every check against a root-owned file (``/etc/shadow`` is ``root:shadow
  0640``) still passes as owner, capabilities or not. So a root daemon starts bwrap as an
  unprivileged host uid (``--sandbox-uid``, default 65534) and the kernel's own
  permission checks keep it out of what only root may read.
- **How it still writes the workspace.** Each workspace gets one idmapped mount (Linux
  5.12+: ``open_tree`` + ``mount_setattr(MOUNT_ATTR_IDMAP)`` + ``move_mount``) on which
  the workspace owner's uid appears as the sandbox uid and files the sandbox creates land
  on disk as the owner's: git, editors and the write detector see ordinary files. bwrap
  binds that mount over the workspace path. It is made once per workspace (not per call)
  under ``/run/shellward/<hash of the state dir>`` (mode 0711: bwrap, running as the
  sandbox uid, must reach it).
- **In the daemon's own mount namespace.** At start-up, before any thread exists, the
  daemon moves into a private mount namespace (a slave of the host's, so the host's later
  mounts still appear) and covers ``/run/shellward`` with its own tmpfs: its idmapped
  mounts and their directories are invisible to the host and vanish with the daemon, even
  after ``kill -9``. Where that fails they are made on the host, removed at shutdown, and
  a crashed daemon's are removed at the next start-up.
- **Fail closed.** A call in a workspace that cannot be idmapped (a file system without
  support) does not run, and says why; nothing falls back to running as root.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import threading
import time
from pathlib import Path

_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000
_MNT_DETACH = 2
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_SLAVE = 1 << 19

_libc = ctypes.CDLL(None, use_errno=True)
# Parent of every daemon's views (one subdirectory per state dir); mode 0711.
VIEWS = Path("/run/shellward")
_private: bool | None = None  # whether this process has entered its own mount namespace


class IdmapError(Exception):
    """The idmapped mount could not be made; the message says why."""


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def mount_root(state_dir: Path) -> Path:
    """Where a daemon with this state dir keeps its idmapped workspace mounts."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    return VIEWS / digest


class IdmappedWorkspaces:
    """One idmapped mount per workspace, made on first use, all removed by :meth:`close`."""

    def __init__(self, root: Path, sandbox_uid: int, sandbox_gid: int) -> None:
        self.root = root
        self._uid = sandbox_uid
        self._gid = sandbox_gid
        self._mounts: dict[Path, Path] = {}
        self._lock = threading.Lock()

    def view(self, workspace: Path) -> Path:
        """The idmapped mount of ``workspace`` (made now if it is the first call there)."""
        with self._lock:
            if workspace not in self._mounts:
                self._mounts[workspace] = self._mount(workspace)
            return self._mounts[workspace]

    def close(self) -> None:
        with self._lock:
            self._mounts.clear()
            remove_stale(self.root)

    def _mount(self, workspace: Path) -> Path:
        for path in (VIEWS, self.root):
            path.mkdir(mode=0o711, exist_ok=True)
            os.chmod(path, 0o711)
        target = self.root / hashlib.sha256(str(workspace).encode()).hexdigest()[:16]
        if target in _mounts_under(self.root):
            _umount(target)
        target.mkdir(mode=0o711, exist_ok=True)
        owner = workspace.stat()
        userns = _user_namespace(owner.st_uid, self._uid, owner.st_gid, self._gid)
        try:
            tree = _check(
                _libc.syscall(
                    _SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(workspace),
                    _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE,
                ),
                f"open_tree({workspace})",
            )  # fmt: skip
            try:
                attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns)
                _check(
                    _libc.syscall(
                        _SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH | _AT_RECURSIVE,
                        ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                    ),
                    f"idmapping {workspace} (its file system may not support idmapped mounts)",
                )  # fmt: skip
                _check(
                    _libc.syscall(
                        _SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target),
                        _MOVE_MOUNT_F_EMPTY_PATH,
                    ),
                    f"attaching the idmapped view of {workspace}",
                )  # fmt: skip
            finally:
                os.close(tree)
        finally:
            os.close(userns)
        return target


def private_mount_namespace() -> bool:
    """Move this process into its own mount namespace (works only while single-threaded).

    Once per process: a second tmpfs over ``VIEWS`` would hide the first one's views."""
    global _private
    if _private is None:
        _private = _enter_private_mount_namespace()
    return _private


def _enter_private_mount_namespace() -> bool:
    if _libc.unshare(_CLONE_NEWNS) != 0:
        return False
    # MS_REC | MS_SLAVE on /: the host's mounts still propagate here, ours never back.
    if _libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None) != 0:
        return False
    # Our own tmpfs over the views' directory: nothing we create there outlives us.
    VIEWS.mkdir(mode=0o711, exist_ok=True)
    os.chmod(VIEWS, 0o711)
    flags = _MS_NOSUID | _MS_NODEV
    return _libc.mount(b"tmpfs", os.fsencode(VIEWS), b"tmpfs", flags, b"mode=0711") == 0


def remove_stale(root: Path) -> int:
    """Unmount and remove every view under ``root`` (a crashed predecessor's too)."""
    if not root.is_dir():
        return 0
    mounted = _mounts_under(root)
    for path in sorted(mounted, key=lambda p: len(p.parts), reverse=True):
        _umount(path)
    for entry in root.iterdir():
        entry.rmdir()
    root.rmdir()
    return len(mounted)


def _mounts_under(root: Path) -> set[Path]:
    """Mount points below ``root`` (an idmapped mount has the same st_dev as its parent,
    so ``os.path.ismount`` cannot tell)."""
    found = set()
    with open("/proc/self/mountinfo") as table:
        for line in table:
            point = line.split()[4]
            # mountinfo escapes space, tab, newline and backslash as octal.
            for code in ("\\040", "\\011", "\\012", "\\134"):
                point = point.replace(code, chr(int(code[1:], 8)))
            path = Path(point)
            if root in path.parents:
                found.add(path)
    return found


def _user_namespace(owner_uid: int, uid: int, owner_gid: int, gid: int) -> int:
    """An fd of a user namespace mapping the owner's ids (inside) to the sandbox's (outside).

    A helper process makes the namespace: a threaded daemon cannot unshare one itself, and
    forking it without exec is unsafe (gRPC's threads)."""
    helper = subprocess.Popen(
        ["unshare", "--user", "--", "cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
    )
    proc = Path(f"/proc/{helper.pid}")
    own = os.readlink("/proc/self/ns/user")
    try:
        deadline = time.monotonic() + 10.0
        while os.readlink(proc / "ns" / "user") == own:
            if helper.poll() is not None or time.monotonic() > deadline:
                raise IdmapError("could not create a user namespace for the idmapped mount")
            time.sleep(0.001)
        (proc / "uid_map").write_text(f"{owner_uid} {uid} 1\n")
        (proc / "setgroups").write_text("deny")
        (proc / "gid_map").write_text(f"{owner_gid} {gid} 1\n")
        return os.open(proc / "ns" / "user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise IdmapError(f"could not set up the idmapping user namespace: {exc}") from None
    finally:
        assert helper.stdin is not None
        helper.stdin.close()
        helper.wait()
        if helper.stderr is not None:
            helper.stderr.close()


def _umount(path: Path) -> None:
    _check(_libc.umount2(os.fsencode(path), _MNT_DETACH), f"unmounting {path}")


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise IdmapError(f"{what} failed: {os.strerror(code)}")
    return result
