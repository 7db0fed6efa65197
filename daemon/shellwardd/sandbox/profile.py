"""The bwrap arguments of one call: mounts, namespaces, identity, environment.

Choices, and why:

- **Everything through ``--args FD``.** The profile, and the request's environment with
  it, reaches bwrap through a memfd, never its command line: ``/proc/*/cmdline`` is
  readable by every local user, and a request's variables may hold tokens.
- **Environment inside only.** prlimit and bwrap run on the host with the daemon's own
  fixed environment (``BASE_ENV``); ``--clearenv`` + ``--setenv`` give the command its
  variables once it is inside, so ``LD_PRELOAD`` or ``GCONV_PATH`` in a request can only
  ever load code into sandboxed processes.
- **No capabilities.** A new user namespace (``--unshare-user``), ``--cap-drop ALL``,
  ``--disable-userns`` (no nested user namespace can hand capabilities back) and the
  seccomp filter of :mod:`.seccomp`.
- **Hidden paths** are covered with an empty tmpfs (directories) or ``/dev/null`` (files).
  A root daemon's sandbox runs as an unprivileged uid, so a path it could not reach
  anyway (under ``/root``) needs no cover, and bwrap could not mount over it. Which of
  them exist is looked up at every call (:class:`HiddenEntries`): a secret made while the
  daemon runs is hidden from the next call.
- **``.git/hooks`` and ``.git/config``** are bound read-only over themselves unless the
  operator allows writes: what a command writes there would run later, outside. ``.git``
  itself is bound over itself (read-write): a mount point cannot be renamed, so the
  command cannot swap in a copy with a writable config.
- **Never the host's network namespace.** ``--unshare-all`` gives every call its own,
  with only ``lo``; a call with network gets its proxy socket bound in (:mod:`shellwardd.egress`).
- **/tmp and /var/tmp** are tmpfs of a bounded size (``--size``): they live in RAM,
  outside every rlimit.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shellwardd.egress import relay

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The environment of every process the daemon starts outside the sandbox.
BASE_ENV = {"PATH": BASE_PATH, "LANG": "C.UTF-8"}


def sandbox_path(toolchains: Iterable[str | Path]) -> str:
    """The command's PATH: the toolchain directories first, then the system's."""
    return ":".join([*map(str, toolchains), BASE_PATH])


# Inside the sandbox, the user id the command sees (its host uid is the daemon's own, or
# --sandbox-uid for a root daemon).
INNER_UID = 1000


@dataclass(frozen=True)
class Identity:
    """Who the sandbox runs as on the host; ``uid`` differs from the daemon's only as root."""

    uid: int
    gid: int

    def reaches(self, path: Path) -> bool:
        """Can this identity traverse every directory above ``path`` (plain DAC)?"""
        for parent in reversed(path.parents):
            try:
                info = parent.stat()
            except OSError:
                return False
            if info.st_uid == self.uid:
                bit = stat.S_IXUSR
            elif info.st_gid == self.gid:
                bit = stat.S_IXGRP
            else:
                bit = stat.S_IXOTH
            if not info.st_mode & bit:
                return False
        return True


@dataclass(frozen=True)
class HiddenEntries:
    """The configured hidden entries (relative to ``home`` or absolute; globs allowed), made
    absolute once: the home and the entries do not change while the daemon runs.

    Which of them exist is looked up again at every call, never cached: a secret created
    while the daemon runs (``aws configure``) is hidden from the next call. The look-up is
    one ``lstat`` per plain entry, on strings: with pathlib, parsing the ~70 default
    entries cost 5x the look-ups themselves (docs/performance.md, "Daemon overhead")."""

    # (absolute path or pattern, is a glob), in the configured order.
    entries: tuple[tuple[str, bool], ...]

    @classmethod
    def of(cls, home: Path, entries: Iterable[str]) -> HiddenEntries:
        made = []
        for entry in entries:
            pattern = os.path.expanduser(entry)
            if not os.path.isabs(pattern):
                pattern = os.path.join(home, pattern)
            made.append((pattern, any(ch in entry for ch in "*?[")))
        return cls(tuple(made))

    def existing(self) -> list[Path]:
        """The entries that exist now (globs expanded)."""
        found: list[Path] = []
        for pattern, is_glob in self.entries:
            if is_glob:  # as pathlib's glob: ``*`` matches a leading dot, ``**`` any depth
                matches = sorted(glob.glob(pattern, recursive=True, include_hidden=True))
            else:
                matches = [pattern] if os.path.lexists(pattern) else []
            for path in matches:
                # A symlink is covered where it points (bwrap mounts through it); a dangling
                # one hides nothing and would make bwrap fail.
                if os.path.islink(path):
                    if not os.path.exists(path):
                        continue
                    path = os.path.realpath(path)
                found.append(Path(path))
        return found


def git_protected(workspace: Path) -> tuple[list[Path], list[Path]]:
    """What to pin and what to make read-only in the workspace's repository.

    Pinned (bound read-write over themselves): ``.git`` and each submodule's git dir, so
    that they cannot be renamed away and replaced by a copy with a writable config.
    Read-only: their ``hooks`` and ``config``."""
    gitdir = workspace / ".git"
    if not gitdir.is_dir() or gitdir.is_symlink():
        return [], []
    hooks = gitdir / "hooks"
    if not hooks.exists():
        # A hooks directory created inside would be writable; make it (empty) first, owned
        # like the repository (a root daemon must not leave a root-owned one behind).
        hooks.mkdir()
        owner = gitdir.stat()
        if os.geteuid() == 0:
            os.chown(hooks, owner.st_uid, owner.st_gid)
    repos = [gitdir, *sorted(p for p in (gitdir / "modules").glob("*") if p.is_dir())]
    read_only = [repo / name for repo in repos for name in ("hooks", "config")]
    return repos, [path for path in read_only if path.exists()]


def bwrap_args(
    *,
    workspace: Path,
    workspace_source: Path,
    cwd: Path,
    env: Mapping[str, str],
    egress_socket: Path | None,
    tmp_bytes: int,
    identity: Identity,
    as_root: bool,
    hidden: Sequence[Path],
    read_only: Sequence[Path],
    pinned: Sequence[Path] = (),
) -> list[str]:
    """The profile; ``workspace_source`` is what is bound on ``workspace`` (its idmapped
    view for a root daemon) and the source of binds inside it."""
    args = [
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--size", str(tmp_bytes), "--tmpfs", "/tmp",
        "--size", str(tmp_bytes), "--tmpfs", "/var/tmp",
        "--bind", str(workspace_source), str(workspace),
        "--unshare-all",
        "--unshare-user", "--uid", str(INNER_UID), "--gid", str(INNER_UID),
        "--disable-userns",
        "--cap-drop", "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]  # fmt: skip
    if egress_socket is not None:
        # Still its own network namespace (--unshare-all): the proxy socket is the way out.
        args += relay.bwrap_args(egress_socket)
    for path in hidden:
        if _is_inside(path, workspace) or _is_inside(workspace, path):
            continue
        if as_root and not identity.reaches(path):
            continue  # the sandbox's uid cannot get there anyway
        if path.is_dir() and not path.is_symlink():
            args += ["--tmpfs", str(path)]
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    for path in pinned:
        if _is_inside(path, workspace):
            source = workspace_source / path.relative_to(workspace)
            args += ["--bind", str(source), str(path)]
    for path in read_only:
        if path.exists() and _is_inside(path, workspace):
            source = workspace_source / path.relative_to(workspace)
            args += ["--ro-bind", str(source), str(path)]
    for name, value in {**BASE_ENV, **env}.items():
        args += ["--setenv", name, value]
    args += ["--chdir", str(cwd)]
    return args


def _is_inside(path: Path, root: Path) -> bool:
    """``path == root or root in path.parents``, on the parts' tuples: building each parent
    as a Path cost ~0.1 ms of a call's CPU right before its spawn. An empty (relative)
    root is inside nothing, so that nothing is left unhidden because of it."""
    parts = root.parts
    return bool(parts) and path.parts[: len(parts)] == parts
