"""Toolchain directories: where a bare program name resolves in the sandbox, in PATH order
(the operator's ``--toolchain`` directories, then the workspace's own, then the daemon
user's, then the system's), and whether the classifier may trust what it finds there.

Choices, and why:
- **Found as in the user's terminal.** Unless the operator turns it off
  (``--no-auto-toolchains``), a workspace's ``.venv/bin``, ``venv/bin`` and
  ``node_modules/.bin`` join PATH when they exist at the time of the call (a command may
  create a venv; the next call finds it), and so do the daemon user's pyenv shims, nvm's
  default node, ``~/.cargo/bin``, ``~/go/bin``, ``/usr/local/go/bin`` and ``~/.local/bin``
  (found at start). A workspace directory reached through a symlink is skipped: it would
  put a program from elsewhere under the workspace's name.
- **Reachable or absent.** A root daemon's sandbox runs as an unprivileged uid; a user
  directory it cannot traverse (under a 0700 ``/root``) is left off PATH and said so in
  ``shellward status``, rather than binding part of the home into the sandbox.
- **Read-only inside.** Every toolchain inside a workspace is bound read-only in the sandbox,
  so no command replaces the program a later call runs. The file tools write the workspace
  from outside the sandbox, though, and an agent can write both a program and the RECORD
  that lists it: a hash that matches a RECORD the agent may have written proves nothing.
- **Trust is the operator's word, kept by RECORD.** A program found in a toolchain inside a
  workspace is judged by the rules for its name only when the operator named that virtualenv
  (``--toolchain DIR/.venv/bin``) and the program is what its package installed: the
  RECORD files are read once, when the daemon starts (the operator vouches for the venv as it
  is then); at every classification the program and every file its distribution's RECORD
  lists must still have the recorded sha256. A link the venv made (``bin/python``) is trusted
  while it resolves where it did at start, outside every workspace. Anything else there, any
  automatically found workspace directory and every ``node_modules/.bin`` (nothing records
  what npm installed) is never trusted: the verdict is never, with that reason. A program
  found outside every workspace is judged by its name, as one in /usr/bin is.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

# A workspace's own program directories, relative to its root, in PATH order.
WORKSPACE_DIRS = (".venv/bin", "venv/bin", "node_modules/.bin")
# The daemon user's toolchains, relative to its home, in PATH order (nvm's goes after pyenv).
HOME_DIRS = (".pyenv/shims", ".cargo/bin", "go/bin", ".local/bin")
SYSTEM_TOOLCHAINS = ("/usr/local/go/bin",)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Pin:
    """What a program in an operator-named venv must be to be trusted: the files of its
    distribution (absolute path, ``sha256=…`` from RECORD), or the target of a venv's link."""

    source: str
    files: tuple[tuple[str, str], ...] = ()
    target: str = ""


@dataclass(frozen=True)
class Toolchain:
    path: str
    # Inside a workspace: the agent's file tools can replace its programs.
    agent_writable: bool
    # For a toolchain inside a workspace the operator named: its programs' pins, by name.
    # None: nobody vouched for it (found automatically), so nothing in it is trusted.
    pins: Mapping[str, Pin] | None = None


@dataclass(frozen=True)
class Toolchains:
    """Every toolchain the daemon knows; ``for_workspace`` gives one call's, in PATH order."""

    operator: tuple[Toolchain, ...] = ()
    user: tuple[Toolchain, ...] = ()
    auto: bool = False
    # User toolchains left off PATH, each with why.
    skipped: tuple[str, ...] = ()

    def for_workspace(self, workspace: str | None) -> tuple[Toolchain, ...]:
        found: list[Toolchain] = []
        named = {t.path for t in self.operator}
        if self.auto and workspace:
            for relative in WORKSPACE_DIRS:
                path = os.path.join(workspace, relative)
                # isdir first: most workspaces have none of these, and realpath costs an
                # lstat per component, twice a call. No symlinked venv: its programs would
                # come from outside, under our name.
                if path in named or not os.path.isdir(path):
                    continue
                if os.path.realpath(path) == os.path.join(os.path.realpath(workspace), relative):
                    found.append(Toolchain(path, agent_writable=True))
        return (*self.operator, *found, *self.user)

    def notes(self, workspace: str, reaches: Callable[[Path], bool]) -> tuple[str, ...]:
        """What ``shellward status`` says about this workspace's toolchains."""
        notes = list(self.skipped)
        for toolchain in self.for_workspace(workspace):
            python = os.path.join(toolchain.path, "python")
            if toolchain.agent_writable and os.path.islink(python):
                target = Path(os.path.realpath(python))
                if not reaches(target):
                    notes.append(
                        f"{python} links to {target}, which the sandbox user cannot reach: "
                        "`python` fails inside; make the venv from an interpreter outside "
                        "that directory (or make its parents searchable, chmod o+x)"
                    )
        return tuple(notes)


# Commands and the classifier without toolchains (tests, tools that build their own).
NO_TOOLCHAINS = Toolchains()


def build_toolchains(
    operator: Sequence[Path],
    workspaces: Sequence[Path],
    *,
    auto: bool,
    home: Path,
    reaches: Callable[[Path], bool],
) -> Toolchains:
    """The operator's toolchains (inside a workspace: pinned now) and, with ``auto``, the
    user's that exist and that the sandbox user can reach."""
    roots = [w.resolve() for w in workspaces]
    marked = []
    for path in operator:
        inside = _inside(path, roots)
        pins = _pins(path, roots) if inside else None
        marked.append(Toolchain(str(path), inside, pins))
    user: list[Toolchain] = []
    skipped: list[str] = []
    if auto:
        for path in _user_dirs(home):
            if not path.is_dir() or str(path) in {t.path for t in marked}:
                continue
            if _inside(path, roots):
                continue  # a workspace's own directories are found per call
            if reaches(path / "program"):  # the directories above a program in it
                user.append(Toolchain(str(path), agent_writable=False))
            else:
                skipped.append(f"{path} is left off PATH: the sandbox user cannot reach it")
    return Toolchains(tuple(marked), tuple(user), auto, tuple(skipped))


def first_program(toolchains: Sequence[Toolchain], name: str) -> tuple[str, Toolchain] | None:
    """Where a bare ``name`` resolves among the toolchains (the first executable file)."""
    for toolchain in toolchains:
        path = os.path.join(toolchain.path, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, toolchain
    return None


def distrust(toolchain: Toolchain, name: str, path: str) -> str:
    """Why the rules must not trust ``path`` (``name`` in ``toolchain``, inside a workspace),
    or "" if they may."""
    if toolchain.pins is None:
        return (
            "the agent can write it, so rules never trust it (an operator who vouches for a "
            "virtualenv names it with `shellwardd --toolchain DIR`)"
        )
    pin = toolchain.pins.get(name)
    if pin is None:
        return (
            "no virtualenv RECORD file there lists it (as read when the daemon started; "
            "node_modules/.bin has none), so rules never trust it"
        )
    if pin.target:
        if not os.path.islink(path) or os.path.realpath(path) != pin.target:
            return f"it no longer links to {pin.target} as at start, so rules never trust it"
        return ""
    if os.path.islink(path):
        return "it was replaced by a symbolic link, so rules never trust it"
    for file, expected in pin.files:
        if _record_hash(file) != expected:
            return (
                f"{file} no longer has the sha256 its package's RECORD ({pin.source}) gave, so "
                "rules never trust it"
            )
    return ""


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    real = path.resolve()
    return any(r == real or r in real.parents for r in roots)


def _user_dirs(home: Path) -> list[Path]:
    dirs = [home / HOME_DIRS[0]]
    node = _nvm_default(home / ".nvm")
    if node is not None:
        dirs.append(node)
    dirs += [home / d for d in HOME_DIRS[1:]]
    return [*dirs, *map(Path, SYSTEM_TOOLCHAINS)]


def _nvm_default(nvm: Path) -> Path | None:
    """The bin of nvm's default node: ``alias/default`` names a version prefix, another
    alias (``lts/iron``, itself a file under ``alias/``), or ``node`` (the newest)."""
    alias = "default"
    for _ in range(4):  # default -> lts/* -> lts/iron -> v20.11.0
        try:
            alias = (nvm / "alias" / alias).read_text().strip()
        except (OSError, ValueError):
            return None
        if not alias.startswith("lts/"):
            break
    alias = alias.lstrip("v")
    versions = []
    for entry in (nvm / "versions" / "node").glob("v*"):
        numbers = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", entry.name)
        if numbers is None:
            continue
        name = entry.name[1:]
        if not alias[:1].isdigit() or name == alias or name.startswith(alias + "."):
            versions.append((tuple(map(int, numbers.groups())), entry))
    return max(versions)[1] / "bin" if versions else None


def _pins(bin_dir: Path, roots: Sequence[Path]) -> Mapping[str, Pin]:
    """The trusted programs of a venv's ``bin`` as it is now: those its RECORD files list
    (with their distribution's files) and its links to an interpreter outside the workspaces."""
    venv = bin_dir.parent
    pins: dict[str, Pin] = {}
    if not (venv / "pyvenv.cfg").is_file():
        return MappingProxyType(pins)
    for entry in sorted(bin_dir.iterdir()):
        if entry.is_symlink() and not _inside(entry, roots):
            pins[entry.name] = Pin(str(entry), target=os.path.realpath(entry))
    for record in sorted(venv.glob("lib/python*/site-packages/*.dist-info/RECORD")):
        files = _record(record, venv)
        for file, _ in files:
            if os.path.dirname(file) == str(bin_dir):
                pins[os.path.basename(file)] = Pin(str(record), files)
    return MappingProxyType(pins)


def _record(record: Path, venv: Path) -> tuple[tuple[str, str], ...]:
    """RECORD's hashed files inside ``venv`` (RECORD itself and .pyc files carry no hash)."""
    site = record.parent.parent
    files = []
    try:
        with record.open(newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                if len(row) < 2 or not row[1].startswith("sha256="):
                    continue
                path = os.path.normpath(os.path.join(site, row[0]))
                if path.startswith(str(venv) + "/"):
                    files.append((path, row[1]))
    except (OSError, UnicodeDecodeError, csv.Error):
        return ()  # an unreadable RECORD pins nothing: its programs stay untrusted
    return tuple(files)


def _record_hash(path: str) -> str:
    """``sha256=<urlsafe base64, no padding>`` of a regular file; "" if it is not one."""
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
