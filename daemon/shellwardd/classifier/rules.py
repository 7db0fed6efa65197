"""Rule files: the dataclasses, and reading them with ``file:line`` errors.

The file is read by ``shellwardd.tomlfile`` (lines of tables and keys, the deprecated
``replay_policy`` spelling of ``replay``); this module checks each rule's fields. See
rules/README.md for the format.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from shellward.types import ArgumentKind, Idempotency, ReplayPolicy
from shellwardd.egress.policy import as_network, check_entry
from shellwardd.errors import RuleFileError
from shellwardd.tomlfile import Block, TomlFile

from .scripts import READERS


class Role(enum.Enum):
    """What a positional argument (or a flag's value) is to the program."""

    READ = "read"
    WRITE = "write"
    OPAQUE = "opaque"
    NETWORK = "network"
    EXEC = "exec"
    SCRIPT = "script"  # code in the program's own language, read by the rule's `script`

    @property
    def kind(self) -> ArgumentKind:
        return _ROLE_KINDS[self]


_ROLE_KINDS = {
    Role.READ: ArgumentKind.FILE_READ,
    Role.WRITE: ArgumentKind.FILE_WRITE,
    Role.OPAQUE: ArgumentKind.OPAQUE,
    Role.NETWORK: ArgumentKind.NETWORK,
    Role.EXEC: ArgumentKind.EXEC_HOOK,
    Role.SCRIPT: ArgumentKind.OPAQUE,
}


@dataclass(frozen=True, slots=True)
class Condition:
    """An argument condition that makes its rule's verdict stricter when it holds."""

    flags: tuple[str, ...]
    unless_flags: tuple[str, ...]
    values: tuple[str, ...]
    unless_values: tuple[str, ...]
    min_args: int
    arg_regex: re.Pattern[str] | None
    idempotency: Idempotency
    replay: ReplayPolicy
    network: bool
    approval: bool
    reason: str
    args: Role | None
    match: tuple[str, ...]
    not_match: tuple[str, ...]
    line: int
    approval_off: bool = False  # `approval = false` written out: a widening in a repo file


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``[[rule]]``: a program, optional subcommands, a verdict and how to read argv."""

    id: str
    source: str  # the label in rule ids: a built-in file name, "user" or "repo"
    path: str  # the file, for error messages
    line: int
    programs: tuple[str, ...]
    subcommands: tuple[tuple[str, ...], ...]  # () means "the program itself"
    idempotency: Idempotency
    replay: ReplayPolicy
    network: bool
    approval: bool
    reason: str
    args: Role
    first_args: tuple[Role, ...]
    first_args_unless: tuple[str, ...]
    last_arg: Role | None
    value_flags: frozenset[str]
    value_roles: Mapping[str, Role]
    wraps: bool
    wrap_skip: int
    wrap_unless: tuple[str, ...]
    wrap_appends: bool
    code_flag: str
    code_args: bool
    exec_segments: tuple[str, ...]
    script: str  # the language of `script` arguments ("sed"), or ""
    subcommand_flag: str  # subcommands are this flag's value (`python -m MODULE`), or ""
    repo_config: str  # the repository configuration the program obeys ("git"), or ""
    when: tuple[Condition, ...]
    match: tuple[str, ...]
    not_match: tuple[str, ...]
    approval_off: bool = False  # `approval = false` written out: a widening in a repo file
    # The destinations the program needs when it has network (its allow-list).
    hosts: tuple[str, ...] = ()
    # Derived at load for the tokenizer: every flag that takes a value, and the single-dash
    # flags longer than one letter (`-exec`, `-delete`) that must not be read as clusters.
    takes_value: frozenset[str] = frozenset()
    long_single: frozenset[str] = frozenset()
    # Every declared `--flag`: GNU getopt_long accepts any unique prefix of one (`--outp`).
    long_flags: frozenset[str] = frozenset()

    @property
    def qualified_id(self) -> str:
        return f"{self.source}:{self.id}"

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"


_VERDICT_FIELDS = {"idempotency", "replay", "network", "approval", "reason"}
_RULE_FIELDS = _VERDICT_FIELDS | {
    "id", "program", "subcommand", "args", "first_args", "first_args_unless", "last_arg",
    "value_flags", "value_roles", "wraps", "wrap_skip", "wrap_unless", "wrap_appends", "code_flag",
    "code_args", "exec_segments", "script", "subcommand_flag",
    "repo_config", "when", "match", "not_match", "hosts",
}  # fmt: skip
_CONDITION_FIELDS = _VERDICT_FIELDS | {
    "flags", "unless_flags", "values", "unless_values", "min_args", "arg_regex", "args",
    "match", "not_match",
}  # fmt: skip


class _Reader:
    """Reads one rule table with type checks; every problem is a RuleFileError."""

    def __init__(self, file: TomlFile, block: Block, table: Any) -> None:
        self.file = file
        self.block = block
        if not isinstance(table, dict):
            self.fail(block.start, "a rule must be a table")
        self.table: dict[str, Any] = file.take_renamed(block, table)

    @property
    def path(self) -> str:
        return self.file.path

    def fail(self, line: int, message: str) -> NoReturn:
        self.file.fail(line, message)

    def line_of(self, key: str) -> int:
        return self.file.key_line(self.block, key)

    def check_fields(self, allowed: set[str], what: str, line: int) -> None:
        for key in self.table:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                self.fail(
                    self.line_of(key) if line == 0 else line,
                    f"unknown field `{key}` in {what}; known fields: {known}",
                )

    def get(self, key: str, kind: type | tuple[type, ...], default: Any, line: int = 0) -> Any:
        value = self.table.get(key, default)
        if value is default:
            return value
        # bool is an int subclass, but `wrap_skip = true` is a mistake worth reporting.
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            names = (
                kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            )
            self.fail(
                line or self.line_of(key),
                f"invalid `{key}`: expected {names} (got {type(value).__name__})",
            )
        return value

    def strings(self, key: str, line: int = 0) -> tuple[str, ...]:
        value = self.get(key, (str, list), [], line)
        items = [value] if isinstance(value, str) else value
        for item in items:
            if not isinstance(item, str):
                self.fail(line or self.line_of(key), f"invalid `{key}`: expected strings")
        return tuple(items)

    def enum(self, key: str, cls: type[enum.Enum], default: Any, line: int = 0) -> Any:
        value = self.get(key, str, None, line)
        if value is None:
            if default is None:
                self.fail(line or self.block[0], f"missing `{key}`")
            return default
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            self.fail(line or self.line_of(key), f"invalid `{key}` {value!r}: use one of {choices}")

    def regex(self, key: str, line: int) -> re.Pattern[str] | None:
        value = self.get(key, str, None, line)
        if value is None:
            return None
        try:
            return re.compile(value)
        except re.error as exc:
            self.fail(line or self.line_of(key), f"invalid `{key}`: {exc}")


def parse_rule_file(text: str, path: str, source: str) -> list[Rule]:
    """Parse one rule file; raise RuleFileError on anything wrong with it (not examples)."""
    file = TomlFile(path, text, RuleFileError)
    file.check_top_level(("rule",), "write rules as [[rule]]")
    rules = [
        _read_rule(_Reader(file, block, table), source) for block, table in file.tables("rule")
    ]
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleFileError(
                path,
                rule.line,
                f"duplicate rule id `{rule.id}` (first at line "
                f"{seen[rule.id].line}); give each rule its own `id`",
            )
        seen[rule.id] = rule
    return rules


def _read_rule(r: _Reader, source: str) -> Rule:
    r.check_fields(_RULE_FIELDS, "a rule", 0)
    line = r.block[0]
    programs = r.strings("program")
    if not programs or any(not p or " " in p for p in programs):
        r.fail(line, "`program` must be a program name or absolute path (or a list of them)")
    subs = tuple(tuple(s.split()) for s in r.strings("subcommand"))
    if any(not s for s in subs):
        r.fail(r.line_of("subcommand"), "a `subcommand` must not be empty")
    value_roles = r.get("value_roles", dict, {})
    roles: dict[str, Role] = {}
    for flag, role in value_roles.items():
        if not isinstance(role, str) or role not in Role._value2member_map_:
            r.fail(
                r.line_of("value_roles"),
                f"invalid role for `{flag}`: use one of " + ", ".join(m.value for m in Role),
            )
        roles[flag] = Role(role)
    first_args = tuple(_role(r, name) for name in r.strings("first_args"))
    idempotency = r.enum("idempotency", Idempotency, None)
    replay = r.enum("replay", ReplayPolicy, None)
    default_id = " ".join((programs[0], *subs[0])) if subs else programs[0]
    rule_id = r.get("id", str, default_id)
    when_tables = r.get("when", list, [])
    rule = Rule(
        id=rule_id,
        source=source,
        path=r.path,
        line=line,
        programs=programs,
        subcommands=subs or ((),),
        idempotency=idempotency,
        replay=replay,
        network=r.get("network", bool, False),
        approval=r.get("approval", bool, False),
        approval_off=r.table.get("approval") is False,
        reason=_reason(r, line),
        args=r.enum("args", Role, Role.OPAQUE),
        first_args=first_args,
        first_args_unless=r.strings("first_args_unless"),
        last_arg=r.enum("last_arg", Role, None) if "last_arg" in r.table else None,
        value_flags=frozenset(r.strings("value_flags")),
        value_roles=roles,
        wraps=r.get("wraps", bool, False),
        wrap_skip=r.get("wrap_skip", int, 0),
        wrap_unless=r.strings("wrap_unless"),
        wrap_appends=r.get("wrap_appends", bool, False),
        code_flag=r.get("code_flag", str, ""),
        code_args=r.get("code_args", bool, False),
        exec_segments=r.strings("exec_segments"),
        script=_script(r, roles.values(), first_args),
        subcommand_flag=r.get("subcommand_flag", str, ""),
        repo_config=_repo_config(r),
        hosts=_hosts(r),
        when=(),
        match=r.strings("match"),
        not_match=r.strings("not_match"),
    )
    # Conditions are read after the rule because their defaults are the rule's verdict.
    conditions = tuple(_read_condition(r, rule, n, t) for n, t in enumerate(when_tables))
    takes_value = rule.value_flags | frozenset(rule.value_roles)
    takes_value |= {rule.subcommand_flag} - {""}
    takes_value |= {f for c in conditions if c.values or c.unless_values for f in c.flags}
    declared = set(takes_value) | set(rule.exec_segments) | set(rule.wrap_unless)
    declared |= set(rule.first_args_unless) | {rule.code_flag}
    declared |= {f for c in conditions for f in (*c.flags, *c.unless_flags)}
    long_single = frozenset(f for f in declared if len(f) > 2 and f[0] == "-" and f[1] != "-")
    long_flags = frozenset(f for f in declared if len(f) > 2 and f[:2] == "--")
    return replace(
        rule,
        when=conditions,
        takes_value=takes_value,
        long_single=long_single,
        long_flags=long_flags,
    )


def _role(r: _Reader, name: str) -> Role:
    try:
        return Role(name)
    except ValueError:
        r.fail(
            r.line_of("first_args"),
            f"invalid role {name!r}: use one of " + ", ".join(m.value for m in Role),
        )


def _script(r: _Reader, roles: Iterable[Role], first_args: tuple[Role, ...]) -> str:
    language = r.get("script", str, "")
    if language and language not in READERS:
        r.fail(r.line_of("script"), f"unknown `script` {language!r}: use one of {sorted(READERS)}")
    uses = {*roles, *first_args, r.table.get("args"), r.table.get("last_arg")}
    if not language and (Role.SCRIPT in uses or "script" in uses):
        r.fail(r.block[0], "a `script` role needs `script` to name the language (`sed`)")
    return str(language)


def _hosts(r: _Reader) -> tuple[str, ...]:
    """A rule's destinations: domain names only (addresses are the operator's to name)."""
    hosts = []
    for entry in r.strings("hosts"):
        try:
            host = check_entry(entry)
        except ValueError as exc:
            r.fail(r.line_of("hosts"), f"invalid `hosts` entry: {exc}")
        if as_network(host) is not None:
            r.fail(
                r.line_of("hosts"),
                f"`hosts` names domains only, not {entry!r}: an address is the operator's to "
                "allow (--allow-domain)",
            )
        hosts.append(host)
    return tuple(hosts)


def _repo_config(r: _Reader) -> str:
    kind = r.get("repo_config", str, "")
    if kind not in ("", "git"):
        r.fail(r.line_of("repo_config"), f'unknown `repo_config` {kind!r}: use "git"')
    return str(kind)


def _reason(r: _Reader, line: int) -> str:
    reason = r.get("reason", str, "", line)
    if not reason.strip():
        r.fail(line, "missing `reason`: say in a few words what the command does")
    return str(reason)


def _read_condition(r: _Reader, rule: Rule, index: int, table: Any) -> Condition:
    # A condition's line: the n-th line in the rule's block that opens a `when` entry.
    starts = [
        n
        for n in range(*r.block)
        if re.match(r"\s*(\{|\[\[rule\.when\]\]|when\s*=)", r.file.lines[n - 1])
    ]
    line = starts[index] if index < len(starts) else r.line_of("when")
    sub = _Reader(r.file, r.block, table)
    sub.check_fields(_CONDITION_FIELDS, "a `when` condition", line)
    flags = sub.strings("flags", line)
    unless_flags = sub.strings("unless_flags", line)
    min_args = sub.get("min_args", int, 0, line)
    arg_regex = sub.regex("arg_regex", line)
    if not (flags or unless_flags or min_args or arg_regex):
        sub.fail(
            line, "a `when` condition needs `flags`, `unless_flags`, `min_args` or `arg_regex`"
        )
    cond = Condition(
        flags=flags,
        unless_flags=unless_flags,
        values=sub.strings("values", line),
        unless_values=sub.strings("unless_values", line),
        min_args=min_args,
        arg_regex=arg_regex,
        idempotency=sub.enum("idempotency", Idempotency, rule.idempotency, line),
        replay=sub.enum("replay", ReplayPolicy, rule.replay, line),
        network=sub.get("network", bool, False, line),
        approval=sub.get("approval", bool, False, line),
        approval_off=sub.table.get("approval") is False,
        reason=_reason(sub, line),
        args=sub.enum("args", Role, None, line) if "args" in table else None,
        match=sub.strings("match", line),
        not_match=sub.strings("not_match", line),
        line=line,
    )
    if cond.idempotency < rule.idempotency or cond.replay < rule.replay:
        sub.fail(
            line,
            "a `when` condition may only make the verdict stricter than its rule's "
            f"({rule.idempotency.value}/{rule.replay.value})",
        )
    return cond
