"""A repository's git configuration, read for the keys that make git run a program.

Choices, and why:
- A repository is hostile input: an agent (or a clone) can write `.git/config`, and
  `core.fsmonitor`, `diff.external`, `diff.*.textconv`, `filter.*.clean` and the like turn
  `git status`, `git diff` or `git log -p` into running any program. The daemon does not
  rewrite such keys for the call (git has no way to blank every `filter.<name>.clean`
  without knowing the names, and a silently changed configuration would surprise the
  user); instead the classifier reads the configuration and every git command in that
  repository is non_idempotent/never, with the key and its file:line in the reason.
- Only the repository's own files are read (`config`, `config.worktree`, and every file
  they include). The system and global files are the operator's.
- `include.path` and every `includeIf.*.path` are followed whatever their condition: the
  condition is git's to evaluate, and following more only errs on the strict side.
- What cannot be read as git would read it (a syntax error, a file over 1 MiB, includes
  nested too deeply) is reported as a hazard of its own: fail closed. git would refuse such
  a file too, but the classifier's reading must never be the looser one.
- Aliases are not a hazard here: git never lets an alias replace a built-in command, and a
  subcommand no rule knows (which is what an alias is) is never replayed anyway.
- An executable `post-index-change` hook also runs on reads (`git status` refreshes and
  writes the index), so the hooks directory is checked for it.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 10

# section.name, and (section, name) for keys with a subsection: section.<sub>.name
_KEYS = frozenset(
    {
        "core.fsmonitor", "core.pager", "core.editor", "core.sshcommand", "core.askpass",
        "core.gitproxy", "core.hookspath", "core.alternaterefscommand", "sequence.editor",
        "diff.external", "gpg.program", "credential.helper", "web.browser",
        "interactive.difffilter", "uploadpack.packobjectshook",
    }
)  # fmt: skip
_SUB_KEYS = frozenset(
    {
        ("diff", "command"), ("diff", "textconv"), ("filter", "clean"), ("filter", "smudge"),
        ("filter", "process"), ("merge", "driver"), ("man", "cmd"), ("man", "path"),
        ("browser", "cmd"), ("browser", "path"), ("gpg", "program"), ("credential", "helper"),
        ("difftool", "cmd"), ("difftool", "path"), ("mergetool", "cmd"), ("mergetool", "path"),
        ("remote", "uploadpack"), ("remote", "receivepack"), ("trailer", "command"),
        ("trailer", "cmd"),
    }
)  # fmt: skip
_FALSE = frozenset({"", "false", "no", "off", "0"})
_HOOKS_ON_READ = ("post-index-change",)

_SECTION = re.compile(r'\[\s*([A-Za-z0-9.-]+)\s*(?:"((?:[^"\\\n]|\\.)*)")?\s*\](.*)$')
_ESCAPE = re.compile(r"\\(.)")
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?$")


@dataclass(frozen=True, slots=True)
class Hazard:
    """A configuration entry (or a problem reading one) that can make git run a program."""

    key: str  # `core.fsmonitor`, or "" for a problem reading the configuration
    where: str  # file:line
    note: str = ""  # what went wrong, for a problem

    def describe(self) -> str:
        """What follows "the repository's git configuration" in a verdict's reason."""
        if self.key:
            return f"sets `{self.key}` ({self.where}), which makes git run a program"
        return f"cannot be read as git would read it ({self.where}: {self.note})"


class _Broken(Exception):
    def __init__(self, where: str, note: str) -> None:
        super().__init__(note)
        self.where = where
        self.note = note


def git_dir(start: str) -> Path | None:
    """The git directory of the repository containing ``start``, as git would find it."""
    path = Path(os.path.normpath(start))
    for directory in (path, *path.parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            try:
                text = _read(dot_git).decode("utf-8", errors="replace")
            except (OSError, _Broken):
                return dot_git  # unreadable: scanning it reports the problem
            target = text.strip().removeprefix("gitdir:").strip()
            return (directory / target) if target else dot_git
    return None


def hazards(gitdir: Path) -> list[Hazard]:
    """Every entry of the repository's own configuration that can run a program."""
    found: list[Hazard] = []
    common = gitdir
    try:
        common = gitdir / _read(gitdir / "commondir").decode("utf-8", "replace").strip()
    except FileNotFoundError:
        pass  # not a worktree
    except _Broken as exc:
        found.append(Hazard("", exc.where, exc.note))
    try:
        for path in (common / "config", gitdir / "config.worktree"):
            if os.path.lexists(path):
                _scan(path, found, 0)
        if not gitdir.is_dir():
            raise _Broken(str(gitdir), "the git directory is not a directory")
    except _Broken as exc:
        found.append(Hazard("", exc.where, exc.note))
    hooks = common / "hooks"
    for name in _HOOKS_ON_READ:
        hook = hooks / name
        if os.access(hook, os.X_OK) and hook.is_file():
            found.append(Hazard(f"hooks/{name}", str(hook)))
    return found


# scheme://[user@]host[:port]/… and scp-like [user@]host:path (not a Windows drive).
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://(?:[^@/]*@)?(\[[^\]]+\]|[^:/?#]+)", re.IGNORECASE)
_SCP = re.compile(r"^(?:[^@/:]+@)?([a-z0-9.-]{2,}):(?!//)", re.IGNORECASE)


def url_host(text: str) -> str:
    """The host a git URL names ("" for a local path or a remote's name)."""
    found = _URL.match(text) or _SCP.match(text)
    if found is None or text.startswith("file:"):
        return ""
    return found.group(1).strip("[]").lower()


def remote_hosts(gitdir: Path) -> list[str]:
    """The hosts git's network commands in this repository may contact: its remotes'
    ``url`` and ``pushurl``, and the bases of ``url.<base>.insteadOf`` rewrites (where git
    really goes). A configuration that cannot be read names none: fail closed."""
    hosts: list[str] = []
    try:
        text = _read(gitdir / "config").decode("utf-8", errors="replace")
        entries = _entries(text, str(gitdir / "config"))
    except (OSError, _Broken):
        return []
    for key, value, _ in entries:
        section, _, name = key.rpartition(".")
        top, _, sub = section.partition(".")
        if top == "remote" and name in ("url", "pushurl"):
            hosts.append(url_host(value))
        elif top == "url" and name in ("insteadof", "pushinsteadof"):
            hosts.append(url_host(sub))
    return [host for host in dict.fromkeys(hosts) if host]


def _scan(path: Path, found: list[Hazard], depth: int) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        raise _Broken(str(path), f"includes nested more than {MAX_INCLUDE_DEPTH} deep")
    try:
        data = _read(path)
    except FileNotFoundError:
        return  # git ignores a missing include
    text = data.decode("utf-8", errors="replace")
    for key, value, line in _entries(text, str(path)):
        where = f"{path}:{line}"
        section, _, name = key.rpartition(".")
        top, _, sub = section.partition(".")
        if name == "path" and (top == "include" or (top == "includeif" and sub)):
            target = Path(os.path.normpath(path.parent / os.path.expanduser(value)))
            _scan(target, found, depth + 1)
        elif _is_hazard(top, sub, name, value):
            found.append(Hazard(key, where))


def _read(path: Path) -> bytes:
    """A small regular file's bytes; FileNotFoundError if absent, _Broken for anything else
    that git would not read as a file of its own."""
    try:
        # O_NONBLOCK: a FIFO planted as a config file must not hang the classifier.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Broken(str(path), f"cannot read it: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Broken(str(path), "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _Broken(str(path), f"cannot read it: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise _Broken(str(path), f"larger than {MAX_BYTES} bytes")
    return b"".join(chunks)


def _is_hazard(top: str, sub: str, name: str, value: str) -> bool:
    if top == "pager":  # pager.<command>
        return True
    if not sub:
        key = f"{top}.{name}"
        if key == "core.fsmonitor":
            return value.strip().lower() not in _FALSE
        return key in _KEYS
    return (top, name) in _SUB_KEYS


def _entries(text: str, path: str) -> list[tuple[str, str, int]]:
    """(lower-cased section[.subsection].name, value, line) for every entry of a file."""
    entries: list[tuple[str, str, int]] = []
    section = ""
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        line_no = n + 1
        line = lines[n].strip()
        n += 1
        if line.startswith("[") and (header := _SECTION.match(line)):
            name, sub, rest = header.groups()
            top, dot, old_sub = name.partition(".")
            if sub is not None:
                section = top.lower() + "." + _ESCAPE.sub(r"\1", sub)
            else:
                section = f"{top.lower()}.{old_sub.lower()}" if dot else top.lower()
            line = rest.strip()
        elif line.startswith("["):
            raise _Broken(f"{path}:{line_no}", "a section header git cannot read")
        if not line or line[0] in "#;":
            continue
        entry = _KEY.match(line)
        if entry is None or not section:
            raise _Broken(f"{path}:{line_no}", "a line git cannot read as `name = value`")
        value = entry.group(2) or ""
        while value.endswith("\\") and n < len(lines):  # a continued value
            value = value[:-1] + lines[n]
            n += 1
        entries.append((f"{section}.{entry.group(1).lower()}", _unquote(value), line_no))
    return entries


def _unquote(value: str) -> str:
    out: list[str] = []
    quoted = False
    i = 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            break
        else:
            out.append(c)
        i += 1
    return "".join(out).strip()
