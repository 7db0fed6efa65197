"""Pure evaluation: command text and rule indexes in, one CommandPart per simple command out.

The engine parses (parse.py), resolves each program, finds its rule, reads argv with the
rule's argument description, applies the rule's conditions, and follows code that a command
runs as code (wrappers, ``bash -c``, ``eval``, ``find -exec``) into parts of their own.
Anything it cannot see through is non_idempotent/never, with a reason naming the cause.

Choices, and why:
- Bash decides at run time what some words mean; the engine never guesses. A program named
  by an expansion, a glob, an environment variable that changes programs (environment.py,
  the request's env included), or a builtin that rebinds names makes the part never *and*
  gives it every flag a rule could set (approval, network): hiding a program must not lower
  its rule's flags. A path no rule trusts keeps the flags of the rule for its name.
- A word that starts with an expansion or a glob may become an option: the part takes the
  strictest verdict an option condition of its rule gives (``_maybe_option``). Expansions
  whose values cannot start with `-` (``_OPTION_FREE``) are exempt, so `ls $(pwd)` stays a
  read.
- Arithmetic runs `$(…)` in array subscripts: arguments of evaluating builtins, assigned
  values and request env values holding `$(…)` are classified as code, parts of their own.
- Where a parse fails, fallback.py reads every word so the rules' flags still apply.
- It looks outside the command only given a working directory: `python -m MODULE` lists it
  for a file that would shadow the module, and a git command reads the repository's
  configuration (gitconfig.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from shellward.types import ArgumentFact, ArgumentKind, CommandPart, Idempotency, ReplayPolicy

from . import gitconfig
from .environment import hijacks, holds_code, variable_name
from .fallback import fallback_segments
from .parse import Redirect, SimpleCommand, Word, join_context, parse
from .rules import Condition, Role, Rule
from .ruleset import ProgramRules, RuleIndex
from .scripts import READERS
from .toolchains import Toolchain, distrust, first_program

NEVER = (Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER)
# Strictness ranks, looked up instead of the enums' own ordering (which lists the members
# on every comparison): comparisons are the engine's inner loop.
RANK: dict[Idempotency | ReplayPolicy, int] = {
    **{m: n for n, m in enumerate(Idempotency)},
    **{m: n for n, m in enumerate(ReplayPolicy)},
}
# Code inside code inside code…: beyond this the engine stops following and fails closed.
MAX_DEPTH = 8
# An absolute path in one of these directories is the program its basename names.
SYSTEM_DIRS = frozenset(
    {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"}
)
# Harmless write targets of a redirection.
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")
# Builtins that evaluate their arguments (or the variables they name) as arithmetic, where
# an array subscript runs `$(…)`: `printf -v 'a[$(cmd)]'`, `test -v`, `let`, `read`…
_EVALUATING = frozenset(
    {
        "printf", "test", "[", "let", "declare", "typeset", "local", "export", "readonly",
        "read", "unset", "mapfile", "readarray", "getopts", "wait", "shift", "return", "exit",
        "ulimit", "umask",
    }
)  # fmt: skip
# Builtins that set the variables their arguments name.
_DECLARING = frozenset({"declare", "typeset", "local", "export", "readonly"})
_NAMING = frozenset({"read", "mapfile", "readarray", "getopts"})
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words after a program that the word-by-word reading hands to its rule.
_FALLBACK_WINDOW = 32
# Shells and `source`: with no script file and no -c they run whatever their input holds.
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "source", "."})
_STDIN_FILES = ("/dev/", "/proc/")
# bash opens these paths as network connections in redirections.
_NETWORK_PATHS = ("/dev/tcp/", "/dev/udp/")
# Expansions whose value cannot start with `-`: an absolute path, a number, a commit id or a
# branch name (git refuses names that start with `-`). Any other expansion at the start of
# a word may become an option.
_OPTION_FREE = re.compile(
    r"^(?:\$\{?(?:PWD|HOME|RANDOM|SECONDS|LINENO|UID|EUID|PPID|BASHPID|[$#?!])\}?"
    r"|\$\((?:pwd|nproc|git merge-base(?: [^\s$`;&|<>()]+)+"
    r"|git rev-parse(?: --short| --verify| --abbrev-ref| --show-toplevel"
    r"| [\w./@^~{}][^\s$`;&|<>()]*)*"
    r"|(?:realpath|readlink -f) [\w./][^\s$`;&|<>()]*)\))"
)
UNKNOWN_PROGRAM = (
    "the program that runs is not known before run time, so it takes the strictest flags "
    "(a human approves it first); name programs literally to avoid this"
)


@dataclass(slots=True)
class _Tokens:
    """argv read with a rule's flag description."""

    # (name, value, index of the flag's word, value attached to that word as in `-ofile`)
    flags: list[tuple[str, str | None, int, bool]] = field(default_factory=list)
    values: dict[int, str] = field(default_factory=dict)  # word index -> flag it is a value of
    positionals: list[int] = field(default_factory=list)
    stop: int | None = None  # for wrappers: index of the first word of the inner command


def _is_prefix(given: str, declared: str) -> bool:
    # GNU getopt_long accepts any prefix of a long option (`--o` for `--output`): one that
    # fits several options is an error, so matching all of them only errs on the strict side.
    return len(given) >= 3 and given[:2] == "--" and declared.startswith(given)


def _expand(name: str, long_flags: frozenset[str]) -> str:
    """The declared long option ``name`` abbreviates, when exactly one fits."""
    if name in long_flags or len(name) < 3:
        return name
    fits = [f for f in long_flags if f.startswith(name)]
    return fits[0] if len(fits) == 1 else name


def _takes_value(name: str, takes_value: frozenset[str]) -> bool:
    return name in takes_value or any(_is_prefix(name, f) for f in takes_value)


def _flag_matches(given: str, declared: str) -> bool:
    return given == declared or _is_prefix(given, declared)


# An ambiguous abbreviation takes the strictest role of the options it may name.
_ROLE_ORDER = (Role.EXEC, Role.WRITE, Role.NETWORK, Role.READ, Role.OPAQUE)


def _value_role(rule: Rule, name: str) -> Role | None:
    role = rule.value_roles.get(name)
    if role is not None or not name.startswith("--"):
        return role
    roles = {r for f, r in rule.value_roles.items() if _is_prefix(name, f)}
    return next((r for r in _ROLE_ORDER if r in roles), None)


def tokenize(
    texts: Sequence[str], indexes: Sequence[int], rule: Rule | None, *, stop: bool = False
) -> _Tokens:
    """Split the words at ``indexes`` into flags (with values) and positionals."""
    takes = rule.takes_value if rule else frozenset()
    long_single = rule.long_single if rule else frozenset()
    long_flags = rule.long_flags if rule else frozenset()
    out = _Tokens()
    only_positionals = False
    k = 0
    while k < len(indexes):
        i = indexes[k]
        w = texts[i]
        k += 1
        if only_positionals or len(w) < 2 or w[0] != "-":
            if stop:
                out.stop = i
                return out
            out.positionals.append(i)
        elif w == "--":
            only_positionals = True
            out.flags.append(("--", None, i, False))
            if stop:
                out.stop = indexes[k] if k < len(indexes) else None
                return out
        elif w[1] == "-" or w in long_single or w.partition("=")[0] in long_single:
            name, eq, value = w.partition("=")
            name = _expand(name, long_flags)
            if eq:
                out.flags.append((name, value, i, True))
            elif k < len(indexes) and _takes_value(name, takes):
                out.flags.append((name, texts[indexes[k]], i, False))
                out.values[indexes[k]] = name
                k += 1
            else:
                out.flags.append((name, None, i, False))
        else:
            for j in range(1, len(w)):
                name = "-" + w[j]
                if name in takes:
                    if j + 1 < len(w):
                        out.flags.append((name, w[j + 1 :], i, True))
                    elif k < len(indexes):
                        out.flags.append((name, texts[indexes[k]], i, False))
                        out.values[indexes[k]] = name
                        k += 1
                    else:
                        out.flags.append((name, None, i, False))
                    break
                out.flags.append((name, None, i, False))
    return out


def _subcommand_words(
    texts: Sequence[str], tokens: _Tokens, rules: ProgramRules
) -> tuple[tuple[int, ...], tuple[str, ...], int]:
    """(word indexes, texts) that may name a subcommand, and where the program's own options
    end when a flag introduces the subcommand (`python -m json.tool`, `-mjson.tool`)."""
    lead = rules.base.subcommand_flag if rules.base is not None else ""
    if not lead:
        indexes = tuple(tokens.positionals[: rules.longest_sub])
        return indexes, tuple(texts[i] for i in indexes), 0
    for name, value, i, attached in tokens.flags:
        if name == lead and value is not None:
            first = i if attached else i + 1
            rest = [p for p in tokens.positionals if p > first][: rules.longest_sub - 1]
            return (first, *rest), (value, *(texts[p] for p in rest)), i
    return (), (), 0


def _has_flag(tokens: _Tokens, declared: Sequence[str]) -> bool:
    return any(_flag_matches(flag[0], d) for flag in tokens.flags for d in declared)


def _holds(cond: Condition, tokens: _Tokens, texts: Sequence[str], segment: Sequence[int]) -> bool:
    if cond.flags:
        found = [f[1] for f in tokens.flags if any(_flag_matches(f[0], d) for d in cond.flags)]
        if not found:
            return False
        if cond.values and not any(
            v is not None and fnmatchcase(v, p) for v in found for p in cond.values
        ):
            return False
        # A flag without a readable value counts as not excepted: fail closed.
        if cond.unless_values and all(
            v is not None and any(fnmatchcase(v, p) for p in cond.unless_values) for v in found
        ):
            return False
    if cond.unless_flags and _has_flag(tokens, cond.unless_flags):
        return False
    if cond.min_args and len(tokens.positionals) < cond.min_args:
        return False
    return cond.arg_regex is None or any(cond.arg_regex.search(texts[i]) for i in segment)


@dataclass(slots=True)
class _Judgement:
    """A verdict being built for one simple command."""

    idempotency: Idempotency
    replay: ReplayPolicy
    reason: str
    rule_id: str
    network: bool = False
    approval: bool = False
    # The destinations the deciding rule names (its allow-list when it has network).
    hosts: tuple[str, ...] = ()
    facts: dict[int, ArgumentFact] = field(default_factory=dict)
    # Inner commands to classify as parts of their own: (kind, context, start, end).
    inner: list[tuple[str, str, int, int]] = field(default_factory=list)

    def raise_to(self, idempotency: Idempotency, replay: ReplayPolicy, reason: str) -> bool:
        higher_idempotency = RANK[idempotency] > RANK[self.idempotency]
        higher_replay = RANK[replay] > RANK[self.replay]
        if higher_idempotency:
            self.idempotency = idempotency
        if higher_replay:
            self.replay = replay
        if higher_idempotency or higher_replay:
            self.reason = reason
            return True
        return False

    def fact(self, index: int, text: str, kind: ArgumentKind, note: str = "") -> None:
        self.facts[index] = ArgumentFact(index, text, kind, note)


def _never(reason: str, rule_id: str) -> _Judgement:
    return _Judgement(*NEVER, reason, rule_id)


def _unknown(reason: str, rule_id: str) -> _Judgement:
    """A part whose program is only known at run time: never, with every flag a rule could
    set (approval, network), so hiding the program never lowers them."""
    return _Judgement(*NEVER, f"{reason}; {UNKNOWN_PROGRAM}", rule_id, network=True, approval=True)


@dataclass
class Analyzer:
    """Classifies one command string into parts; create one per classify() call."""

    index: RuleIndex
    constraints: RuleIndex | None
    cwd: str | None
    workspace: str | None
    parts: list[CommandPart] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)
    source: str = ""  # the original command string, to map spans of re-parsed code
    # Repository configuration hazards, read once per git directory per command.
    git_hazards: dict[str, list[gitconfig.Hazard]] = field(default_factory=dict)
    # The call's toolchain directories, first on the sandbox's PATH in this order.
    toolchains: tuple[Toolchain, ...] = ()

    def code(
        self, text: str, context: str, base: int | None, fallback: tuple[int, int], depth: int
    ) -> None:
        """Parse ``text`` as shell code and classify every simple command in it."""
        if depth > MAX_DEPTH:
            self.fail(fallback, context, "code nested too deeply to follow")
            return
        parsed = parse(text, context=context, base=base, fallback=fallback)
        self.functions |= parsed.functions
        for finding in parsed.findings:
            self.fail(finding.span, context, finding.reason)
        for variable in parsed.loop_variables:
            j = _Judgement(Idempotency.IDEMPOTENT, ReplayPolicy.AUTO, "", "classifier:assignment")
            self._hijack(j, variable.text)
            if j.reason:  # only a loop over a variable that changes programs is a part
                self._append(j, (), "", "", variable.span, join_context(context, "for loop"))
        if parsed.findings:
            self._fallback(text, context, base, fallback)
        for cmd in parsed.commands:
            self.simple(cmd.words, cmd, cmd.context, depth, appended=False)

    def request_env(self, env: Mapping[str, str], span: tuple[int, int]) -> None:
        """The request's env is the environment of the whole command: judge it as if it
        were assigned before every command."""
        for name in sorted(env):
            value = env[name]
            context = f"request env {name}"
            if hijacks(name, value):
                j = _unknown(
                    f"the request's env sets {name}, which changes which program runs or what "
                    "it executes",
                    "classifier:environment",
                )
                self._append(j, (), "", "", span, "request env")
            if holds_code(value):
                self.code(f": {value}", context, None, span, 1)

    def _fallback(
        self, text: str, context: str, base: int | None, fallback: tuple[int, int]
    ) -> None:
        """Where the parse failed, read every word: each program a rule knows keeps the
        flags (approval, network) its rule sets, and a program named by an expansion takes
        them all."""
        span = fallback if base is None else (base, base + len(text))
        label = join_context(context, "read word by word")
        for segment in fallback_segments(text):
            for assignment in segment.assignments:
                j = _Judgement(*NEVER, "", "classifier:environment")
                self._hijack(j, assignment)
                if j.approval:
                    self._append(j, (assignment,), "", "", span, label)
            if segment.dynamic:
                j = _unknown(
                    "the parser could not read this command, and a program in it is named by "
                    "an expansion",
                    "classifier:dynamic-program",
                )
                self._append(j, segment.words, "", "", span, label)
            for k, word in enumerate(segment.words):
                if not self._names_program(word):
                    continue
                # A rule's flags depend on the words right after the program: a bounded
                # window keeps a long unparsable text linear.
                argv = segment.words[k : k + _FALLBACK_WINDOW]
                found = self._judge_flags(argv)
                if found is not None:
                    self._append(found, argv, word, "", span, label)

    def _names_program(self, word: str) -> bool:
        """True when ``word`` may be a program some rule knows (cheap test)."""
        if "/" in word or word in self.index.programs:
            return True
        return self.constraints is not None and word in self.constraints.programs

    def _judge_flags(self, texts: Sequence[str]) -> _Judgement | None:
        """The judgement of ``texts`` when its rule sets approval or network, else None."""
        _, keys, problem = self._resolve(texts[0])
        if problem or not keys:
            return None
        found = self._judge(self.index, keys, list(texts), False, primary=False)
        if self.constraints is not None:
            stricter = self._judge(self.constraints, keys, list(texts), False, primary=False)
            if stricter is not None and found is not None:
                found.network |= stricter.network
                found.approval |= stricter.approval
            found = found or stricter
        if found is None or not (found.network or found.approval):
            return None
        # raise_to only replaces the reason when it raises: set it either way.
        reason = (
            f"the parser could not read this command; read word by word it runs "
            f"`{' '.join(texts[:2])}`, and {found.reason}"
        )
        found.raise_to(*NEVER, reason)
        found.reason = reason
        return found

    def _append(
        self,
        j: _Judgement,
        argv: Sequence[str],
        program: str,
        resolved: str,
        span: tuple[int, int],
        context: str,
    ) -> None:
        self.parts.append(
            CommandPart(
                program=program,
                resolved_program=resolved,
                argv=tuple(argv),
                span=span,
                idempotency=j.idempotency,
                replay_policy=j.replay,
                reason=j.reason,
                rule_id=j.rule_id,
                needs_network=j.network,
                needs_approval=j.approval,
                arguments=tuple(j.facts[k] for k in sorted(j.facts)),
                context=context,
                destinations=j.hosts if j.network else (),
            )
        )

    def fail(self, span: tuple[int, int], context: str, reason: str) -> None:
        self.parts.append(
            CommandPart(
                program="",
                resolved_program="",
                argv=(),
                span=span,
                idempotency=Idempotency.NON_IDEMPOTENT,
                replay_policy=ReplayPolicy.NEVER,
                reason=reason,
                rule_id="classifier:parse",
                context=context,
            )
        )

    def simple(
        self,
        words: Sequence[Word],
        cmd: SimpleCommand | None,
        context: str,
        depth: int,
        *,
        appended: bool,
    ) -> None:
        """Classify one simple command; ``cmd`` carries its redirects and assignments, and is
        None for a command found inside another's argv (a wrapper's inner command)."""
        texts = [w.text for w in words]
        if not words:
            judgement = _Judgement(
                Idempotency.IDEMPOTENT,
                ReplayPolicy.AUTO,
                "only sets shell variables or redirects",
                "classifier:assignment",
            )
            resolved = ""
        else:
            judgement, resolved = self._judge_program(words, texts, appended)
            self._builtin_effects(judgement, words, texts)
        if cmd is not None:
            # `IFS=, read a b` only changes how that builtin splits its input.
            splits = texts[:1] in (["read"], ["mapfile"], ["readarray"])
            self._environment(
                judgement,
                [w for w in cmd.assignments if not (splits and w.text.startswith("IFS="))],
            )
            self._redirects(judgement, cmd.redirects)
        self._escalate(judgement)
        span = cmd.span if cmd is not None else (words[0].span[0], words[-1].span[1])
        self._append(judgement, texts, texts[0] if texts else "", resolved, span, context)
        if cmd is not None:
            for w in cmd.assignments:
                if holds_code(w.text):
                    # A value holding `$(…)` runs wherever the variable meets arithmetic.
                    self.code(
                        f": {w.text}",
                        join_context(context, "assigned value"),
                        None,
                        w.span,
                        depth + 1,
                    )
        for kind, label, start, end in judgement.inner:
            inner_context = join_context(context, label)
            if kind == "code":
                self._reenter(words[start:end], inner_context, depth)
            elif kind == "evaluated":
                w = words[start]
                self.code(f": {w.text}", inner_context, None, w.span, depth + 1)
            else:
                self.simple(
                    words[start:end], None, inner_context, depth + 1, appended=kind == "appended"
                )

    def _reenter(self, words: Sequence[Word], context: str, depth: int) -> None:
        text = " ".join(w.text for w in words)
        first, last = words[0].span[0], words[-1].span[1]
        # Spans map exactly when the code appears verbatim in one word (e.g. single-quoted).
        at = -1
        if len(words) == 1:
            raw = self.source[first:last]
            at = raw.find(text)
        base = first + at if at >= 0 else None
        self.code(text, context, base, (first, last), depth + 1)

    # -- programs and rules ---------------------------------------------------------------

    def _judge_program(
        self, words: Sequence[Word], texts: list[str], appended: bool
    ) -> tuple[_Judgement, str]:
        program = words[0]
        if program.dynamic:
            return _unknown(
                f"the program is named by {program.dynamic}", "classifier:dynamic-program"
            ), ""
        name = program.text
        if "/" not in name and name in self.functions:
            return _Judgement(
                Idempotency.IDEMPOTENT,
                ReplayPolicy.AUTO,
                f"calls the shell function `{name}` defined in this command"
                " (its body is classified as parts of its own)",
                "classifier:function",
            ), name
        if name != "[" and any(c in name for c in "*?["):
            return _unknown(
                f"the program is named by a glob (`{name}`)", "classifier:dynamic-program"
            ), ""
        resolved, keys, problem = self._resolve(name)
        if problem:
            untrusted = _never(problem, "classifier:program-path")
            self._basename_flags(untrusted, name, texts)
            return untrusted, resolved
        # Words that start with an expansion may turn out to be options (`find . $opt`).
        unknown = frozenset(
            i
            for i, w in enumerate(words)
            if i
            and w.dynamic
            and w.text[:1] in ("$", "`", "*", "?", "[")
            and not _OPTION_FREE.match(w.text)
        )
        judgement = self._judge(self.index, keys, texts, appended, primary=True, unknown=unknown)
        if judgement is None:
            judgement = _never(f"runs `{name}`, which no rule knows", "classifier:unknown")
            self._basename_flags(judgement, name, texts)
        elif self.constraints is not None:
            stricter = self._judge(
                self.constraints, keys, texts, appended, primary=False, unknown=unknown
            )
            if stricter is not None:
                judgement.network |= stricter.network
                judgement.approval |= stricter.approval
                if judgement.raise_to(stricter.idempotency, stricter.replay, stricter.reason):
                    judgement.rule_id = stricter.rule_id
        return judgement, resolved

    def _basename_flags(self, j: _Judgement, name: str, texts: list[str]) -> None:
        """A program given by a path no rule trusts (`./node_modules/.bin/npm`) keeps the
        flags of the rule for its name: a path never lowers approval or network."""
        base = os.path.basename(name)
        if "/" not in name or not base:
            return
        for index in (self.index, self.constraints):
            if index is not None:
                found = self._judge(index, (base,), [base, *texts[1:]], False, primary=False)
                if found is not None:
                    j.network |= found.network
                    j.approval |= found.approval

    def _resolve(self, name: str) -> tuple[str, tuple[str, ...], str]:
        """(resolved program, lookup keys, why it cannot be trusted or "")."""
        if "/" not in name:
            found = first_program(self.toolchains, name)
            if found is None or not found[1].agent_writable:
                return name, (name,), ""
            why = distrust(found[1], name, found[0])
            if why:
                return (
                    found[0],
                    (),
                    f"runs `{name}`, which is {found[0]}, in a toolchain inside a workspace: "
                    + why,
                )
            return found[0], (name,), ""
        if name.startswith("~"):
            return (
                name,
                (),
                f"runs `{name}`, a path under a home directory the classifier cannot resolve",
            )
        if os.path.isabs(name):
            path = os.path.normpath(name)
        elif self.cwd is None:
            return name, (), f"runs `{name}`, a relative path, and no working directory was given"
        else:
            path = os.path.normpath(os.path.join(self.cwd, name))
        if self.workspace is not None:
            ws = os.path.normpath(self.workspace)
            if path == ws or path.startswith(ws.rstrip("/") + "/"):
                return (
                    path,
                    (),
                    (f"runs `{name}`, a program inside the workspace, which rules never trust"),
                )
        directory, base = os.path.split(path)
        return path, ((path, base) if self._trusted_directory(directory) else (path,)), ""

    def _trusted_directory(self, directory: str) -> bool:
        """A directory whose programs are what their names say: a system one, or an
        operator's toolchain outside every workspace."""
        return directory in SYSTEM_DIRS or any(
            t.path == directory and not t.agent_writable for t in self.toolchains
        )

    def _judge(
        self,
        index: RuleIndex,
        keys: Sequence[str],
        texts: list[str],
        appended: bool,
        *,
        primary: bool,
        unknown: frozenset[int] = frozenset(),
    ) -> _Judgement | None:
        rules: ProgramRules | None = None
        for key in keys:
            rules = index.programs.get(key)
            if rules is not None:
                break
        if rules is None:
            return None
        every = list(range(1, len(texts)))
        rule = rules.base
        sub: tuple[int, ...] = ()
        options_end = 0  # the program's own options are the words before this one
        candidates: tuple[str, ...] = ()
        if rules.subs:
            tokens = tokenize(texts, every, rules.base)
            indexes, candidates, options_end = _subcommand_words(texts, tokens, rules)
            if indexes and indexes[0] in unknown:
                return _unknown(
                    f"runs `{texts[0]}` with a subcommand only known at run time"
                    f" (`{texts[indexes[0]]}`)",
                    "classifier:dynamic-program",
                )
            for size in range(len(candidates), 0, -1):
                found = rules.subs.get(candidates[:size])
                if found is not None:
                    rule, sub = found, indexes[:size]
                    break
            else:
                if appended:
                    return _unknown(
                        f"runs `{texts[0]}` with arguments appended from its input, which may"
                        " name any subcommand",
                        "classifier:appended",
                    )
        if rule is None:
            shown = " ".join(texts[:2])
            return _never(f"runs `{shown}`, which no rule knows", "classifier:unknown")
        judgement = _Judgement(
            rule.idempotency,
            rule.replay,
            rule.reason,
            rule.qualified_id,
            rule.network,
            rule.approval,
            rule.hosts,
        )
        judgement.fact(0, texts[0], ArgumentKind.PROGRAM)
        if sub:
            for i in sub:
                judgement.fact(i, texts[i], ArgumentKind.SUBCOMMAND)
            if options_end and primary:
                self._shadowing(judgement, candidates[0])
            if rules.base is not None:
                # The program's own options (before the subcommand) answer to its own rule:
                # `git -c core.pager=… log` is decided by the `git` conditions.
                self._apply(
                    judgement,
                    rules.base,
                    texts,
                    list(range(1, options_end or sub[0])),
                    primary,
                    conditions_only=True,
                    unknown=unknown,
                )
            segment = list(range(sub[-1] + 1, len(texts)))
        else:
            segment = every
        self._apply(
            judgement, rule, texts, segment, primary, conditions_only=False, unknown=unknown
        )
        if primary and rules.base is not None and rules.base.repo_config:
            end = options_end or (sub[0] if sub else len(texts))
            self._repo_config(judgement, texts, tokenize(texts, range(1, end), rules.base))
        return judgement

    def _repo_config(self, j: _Judgement, texts: list[str], tokens: _Tokens) -> None:
        """git obeys the repository's configuration: one that names a program to run makes
        every git command in that repository never replayed (see gitconfig.py)."""
        if self.cwd is None:
            return
        starts = self._working_dirs(j, "git")
        explicit = None
        for name, value, _, _ in tokens.flags:
            if name in ("-C", "--git-dir", "--work-tree") and value is not None:
                if _dynamic_dir(value):
                    j.raise_to(*NEVER, f"runs git in `{value}`, a directory known only at run time")
                    j.rule_id = "classifier:git-config"
                    return
                if name == "-C":
                    starts = [os.path.join(start, value) for start in starts]
                elif name == "--git-dir":
                    explicit = [os.path.join(start, value) for start in starts]
        found: list[gitconfig.Hazard] = []
        for start in starts if explicit is None else explicit:
            directory = gitconfig.git_dir(start) if explicit is None else Path(start)
            if directory is not None:
                key = str(directory)
                if key not in self.git_hazards:
                    self.git_hazards[key] = gitconfig.hazards(directory)
                found.extend(self.git_hazards[key])
        if j.network:
            # git's network commands reach the URL they are given or the repository's remotes.
            named = [gitconfig.url_host(text) for text in texts[1:]]
            for start in starts if explicit is None else explicit:
                directory = gitconfig.git_dir(start) if explicit is None else Path(start)
                if directory is not None:
                    named += gitconfig.remote_hosts(directory)
            j.hosts = tuple(dict.fromkeys([*j.hosts, *filter(None, named)]))
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            j.raise_to(
                *NEVER,
                f"{j.reason}, but the repository's git configuration {found[0].describe()}{more}",
            )
            j.rule_id = "classifier:git-config"

    def _working_dirs(self, j: _Judgement, what: str) -> list[str]:
        """The directories a command may run in: the working directory, and every one an
        earlier `cd` or `pushd` of this command string named (in order, each relative to
        the last). One known only at run time makes the part never replayed."""
        assert self.cwd is not None
        current, dirs = self.cwd, [self.cwd]
        for part in self.parts:
            if part.program not in ("cd", "pushd", "popd"):
                continue
            args = [a for a in part.argv[1:] if not a.startswith("-") or a == "-"]
            target = args[0] if args and part.program != "popd" else "$HOME"
            if _dynamic_dir(target) or target == "-":
                j.raise_to(
                    *NEVER,
                    f"runs {what} after `{' '.join(part.argv)}`, in a directory known only at"
                    " run time",
                )
                j.rule_id = "classifier:working-directory"
                return []
            current = os.path.normpath(os.path.join(current, target))
            dirs.append(current)
        return dirs

    def _apply(
        self,
        j: _Judgement,
        rule: Rule,
        texts: list[str],
        segment: list[int],
        primary: bool,
        *,
        conditions_only: bool,
        unknown: frozenset[int] = frozenset(),
    ) -> None:
        if rule.exec_segments:
            segment = self._exec_segments(j, rule, texts, segment)
        tokens = tokenize(texts, segment, rule, stop=rule.wraps)
        if unknown:
            ends = [i for name, _, i, _ in tokens.flags if name == "--"]
            for i in tokens.positionals:
                if i in unknown and not (ends and i > ends[0]):
                    _maybe_option(j, rule, texts[i])
        inner_start = None
        if rule.wraps and tokens.stop is not None and not _has_flag(tokens, rule.wrap_unless):
            inner_start = self._wrapped(j, rule, texts, tokens.stop)
        args: Role = rule.args
        for cond in rule.when:
            if _holds(cond, tokens, texts, segment):
                if j.raise_to(cond.idempotency, cond.replay, cond.reason):
                    j.rule_id = rule.qualified_id
                j.network |= cond.network
                j.approval |= cond.approval
                if cond.args is not None:
                    args = cond.args
        if conditions_only or not primary:
            return
        for name, value, i, attached in tokens.flags:
            role = _value_role(rule, name)
            if attached and role is not None:
                self._role_fact(j, i, texts[i], role, f"value of {name}", rule, value)
            elif i not in j.facts:
                j.fact(i, texts[i], ArgumentKind.FLAG)
        for i, name in tokens.values.items():
            self._role_fact(
                j, i, texts[i], _value_role(rule, name) or Role.OPAQUE, f"value of {name}", rule
            )
        positionals = tokens.positionals
        code: list[int] = []
        if rule.code_args:
            code = positionals
        elif rule.code_flag and _has_flag(tokens, (rule.code_flag,)) and positionals:
            code = positionals[:1]
        if code:
            for i in code:
                j.fact(i, texts[i], ArgumentKind.EXEC_HOOK, "shell code, classified as parts")
            j.inner.append(("code", f"{texts[0]} {rule.code_flag}".strip(), code[0], code[-1] + 1))
            positionals = [i for i in positionals if i not in code]
        first = () if _has_flag(tokens, rule.first_args_unless) else rule.first_args
        for n, i in enumerate(positionals):
            if n < len(first):
                role = first[n]
            elif rule.last_arg is not None and n == len(positionals) - 1 and n > 0:
                role = rule.last_arg
            else:
                role = args
            self._role_fact(j, i, texts[i], role, "", rule)
        if inner_start is not None:
            label = texts[0] if rule.subcommands == ((),) else f"{texts[0]} {rule.id}"
            kind = "appended" if rule.wrap_appends else "command"
            j.inner.append((kind, label, inner_start, len(texts)))

    def _shadowing(self, j: _Judgement, module: str) -> None:
        """`python -m MODULE` looks in the working directory first: a file or directory
        there named like the module's top-level package runs instead of it."""
        if self.cwd is None:
            return
        for directory in self._working_dirs(j, f"`-m {module}`"):
            try:
                names = os.listdir(directory)
            except OSError:
                continue  # no such directory: the call fails before running anything
            found = sorted(n for n in names if _shadows(directory, n, module))
            if found:
                j.raise_to(
                    *NEVER,
                    f"runs `{module}` from the working directory, where `{found[0]}` shadows"
                    " the module (`-m` searches the working directory first)",
                )
                j.rule_id = "classifier:shadowed-module"
                return

    def _role_fact(
        self,
        j: _Judgement,
        i: int,
        text: str,
        role: Role,
        note: str,
        rule: Rule | None = None,
        value: str | None = None,
    ) -> None:
        j.fact(i, text, role.kind, note)
        if role is Role.EXEC:
            j.raise_to(*NEVER, f"runs a program given as an argument (`{text}`)")
        elif role is Role.SCRIPT and rule is not None:
            self._script(j, rule.script, text if value is None else value)

    def _script(self, j: _Judgement, language: str, script: str) -> None:
        """What a script argument (sed's) does besides printing: writes become file-write
        facts (judged like redirections), commands and unreadable scripts never replay."""
        effects = READERS[language](script)
        for target in effects.writes:
            if target in _NOT_FILES:
                continue
            key = -1000 - len(j.facts)  # not an argv word, like a redirection
            j.facts[key] = ArgumentFact(
                -1, target, ArgumentKind.FILE_WRITE, f"written by the {language} script"
            )
        if effects.runs:
            j.raise_to(*NEVER, effects.runs)
        elif effects.unreadable:
            j.raise_to(
                *NEVER, f"has a {language} script the classifier cannot read: {effects.unreadable}"
            )

    def _wrapped(self, j: _Judgement, rule: Rule, texts: list[str], start: int) -> int | None:
        """Skip a wrapper's leading operands (`timeout 5`, `env A=1`); return where the inner
        command starts, or None when there is none."""
        skip = rule.wrap_skip
        i = start
        while i < len(texts) and (skip > 0 or _ASSIGNMENT.match(texts[i])):
            if _ASSIGNMENT.match(texts[i]):
                j.fact(i, texts[i], ArgumentKind.OPAQUE, "environment assignment")
                self._hijack(j, texts[i])
            else:
                j.fact(i, texts[i], ArgumentKind.OPAQUE)
                skip -= 1
            i += 1
        if i >= len(texts):
            return None
        j.fact(i, texts[i], ArgumentKind.EXEC_HOOK, "runs the wrapped command (its own part)")
        return i

    def _exec_segments(
        self, j: _Judgement, rule: Rule, texts: list[str], segment: list[int]
    ) -> list[int]:
        """Cut `-exec CMD … ;` out of argv; each CMD becomes an inner part."""
        rest: list[int] = []
        k = 0
        while k < len(segment):
            i = segment[k]
            k += 1
            if texts[i] not in rule.exec_segments:
                rest.append(i)
                continue
            start = k
            while k < len(segment) and texts[segment[k]] not in (";", "+"):
                k += 1
            j.fact(i, texts[i], ArgumentKind.EXEC_HOOK, "runs a command for each file")
            if start < k:
                j.inner.append(
                    ("command", f"{texts[0]} {texts[i]}", segment[start], segment[k - 1] + 1)
                )
            k += 1  # the terminator
        return rest

    # -- redirections, environment, escalation ---------------------------------------------

    def _redirects(self, j: _Judgement, redirects: Sequence[Redirect]) -> None:
        for n, r in enumerate(redirects):
            if r.target is None:
                continue
            key = -1 - n  # not an argv word: facts of redirections sort before argv
            if r.target.text.startswith(_NETWORK_PATHS):
                j.facts[key] = ArgumentFact(
                    -1, r.target.text, ArgumentKind.NETWORK, f"redirection {r.op}"
                )
                # Never, but no network grant: no rule asked for this connection, and the
                # sandbox without network is what stops it.
                j.raise_to(
                    *NEVER,
                    f"opens a network connection (`{r.target.text}`) in a redirection, which "
                    "no rule grants",
                )
                j.rule_id = "classifier:network-redirect"
            elif r.writes and r.target.text not in _NOT_FILES:
                j.facts[key] = ArgumentFact(
                    -1, r.target.text, ArgumentKind.FILE_WRITE, f"redirection {r.op}"
                )
            elif r.reads:
                j.facts[key] = ArgumentFact(
                    -1, r.target.text, ArgumentKind.FILE_READ, f"redirection {r.op}"
                )

    def _environment(self, j: _Judgement, assignments: Sequence[Word]) -> None:
        for w in assignments:
            self._hijack(j, w.text)

    def _hijack(self, j: _Judgement, assignment: str) -> None:
        name = variable_name(assignment)
        _, eq, value = assignment.partition("=")
        self._sets(j, name, value if eq else None)

    def _sets(self, j: _Judgement, name: str, value: str | None) -> None:
        if hijacks(name, value):
            j.raise_to(
                *NEVER,
                f"sets {name}, which changes which program runs or what it executes; "
                + UNKNOWN_PROGRAM,
            )
            j.rule_id = "classifier:environment"
            j.network = j.approval = True

    def _builtin_effects(self, j: _Judgement, words: Sequence[Word], texts: list[str]) -> None:
        """What a builtin does to later words: variables it sets, code it stores, arithmetic
        it evaluates."""
        name = texts[0]
        args = range(1, len(texts))
        named = _dynamic_name(name, words, texts)
        if named and j.raise_to(
            *NEVER,
            f"names a variable with `{named}`, only known at run time: an array subscript "
            "in it is evaluated as arithmetic, which runs the commands it holds",
        ):
            j.rule_id = "classifier:arithmetic"
        if name in _EVALUATING:
            for i in args:
                if holds_code(texts[i]):
                    j.inner.append(
                        ("evaluated", f"{name} argument evaluated as arithmetic", i, i + 1)
                    )
        if name in _DECLARING:
            for i in args:
                text = texts[i]
                if (
                    name != "export"
                    and text.startswith("-")
                    and "n" in text[1:]
                    and "=" not in text
                ):
                    j.raise_to(
                        *NEVER,
                        f"`{name} {text}` makes a name reference: assignments through it set a "
                        "variable the classifier cannot follow; " + UNKNOWN_PROGRAM,
                    )
                    j.rule_id = "classifier:environment"
                    j.network = j.approval = True
                elif "=" in text:
                    self._hijack(j, text)
        elif name in _NAMING:
            for i in args:
                if _VARIABLE.fullmatch(texts[i]):
                    self._sets(j, texts[i], None)
        elif name == "printf":
            for flag, value, _, _ in tokenize(texts, list(args), None).flags:
                if flag == "-v" and value is not None:
                    self._sets(j, variable_name(value + "="), None)
            for k in range(1, len(texts) - 1):
                if texts[k] == "-v":
                    self._sets(j, variable_name(texts[k + 1] + "="), None)
        elif name in _SHELLS and _reads_code_from_input(words, texts):
            if j.raise_to(
                *NEVER, f"`{name}` reads the code it runs from its input; " + UNKNOWN_PROGRAM
            ):
                j.rule_id = "classifier:dynamic-program"
            j.network = j.approval = True
        elif name == "trap":
            # The action is shell code that runs later (on a signal or at exit).
            action = next((i for i in args if not texts[i].startswith("-")), None)
            if action is not None and texts[action]:
                j.inner.append(("code", "trap action", action, action + 1))

    def _escalate(self, j: _Judgement) -> None:
        writes = [f.text for f in j.facts.values() if f.kind is ArgumentKind.FILE_WRITE]
        outside = [w for w in writes if self._outside_workspace(w)]
        if outside:
            # The write detector only sees the workspace: such a change cannot be checked.
            j.raise_to(*NEVER, f"{j.reason}; writes `{outside[0]}`, outside the workspace")
        elif writes and j.idempotency is Idempotency.IDEMPOTENT:
            # A command that writes files is at best a write_file-style edit: ask.
            shown = ", ".join(f"`{w}`" for w in writes[:3])
            j.raise_to(Idempotency.CONDITIONAL, ReplayPolicy.ASK, f"{j.reason}; writes {shown}")

    def _outside_workspace(self, target: str) -> bool:
        """True for a write target known to be outside the workspace and the private /tmp;
        False when it is inside or cannot be known (a variable)."""
        if target.startswith("~"):
            return True
        if "$" in target or target in _NOT_FILES:
            return False
        if os.path.isabs(target):
            path = os.path.normpath(target)
        elif self.cwd is not None:
            path = os.path.normpath(os.path.join(self.cwd, target))
        else:
            return False
        if path == "/tmp" or path.startswith("/tmp/"):
            return False
        if self.workspace is None:
            return os.path.isabs(target)
        ws = os.path.normpath(self.workspace)
        return not (path == ws or path.startswith(ws.rstrip("/") + "/"))


def _maybe_option(j: _Judgement, rule: Rule, text: str) -> None:
    """``text`` (an expansion) may become any option of ``rule``: take the strictest verdict an
    option can give."""
    for cond in rule.when:
        if cond.flags:
            if j.raise_to(
                cond.idempotency,
                cond.replay,
                f"`{text}` is only known at run time and may be {cond.flags[0]}, which "
                f"{cond.reason}",
            ):
                j.rule_id = rule.qualified_id
            j.network |= cond.network
            j.approval |= cond.approval
    roles = set(rule.value_roles.values())
    if rule.exec_segments or rule.code_flag or Role.EXEC in roles:
        j.raise_to(
            *NEVER,
            f"`{text}` is only known at run time and may be an option that runs a program; "
            + UNKNOWN_PROGRAM,
        )
        j.network = j.approval = True
        j.rule_id = "classifier:dynamic-option"
    elif Role.WRITE in roles and j.idempotency is Idempotency.IDEMPOTENT:
        j.raise_to(
            Idempotency.CONDITIONAL,
            ReplayPolicy.ASK,
            f"`{text}` is only known at run time and may be an option that writes a file",
        )
        j.rule_id = "classifier:dynamic-option"


def _reads_code_from_input(words: Sequence[Word], texts: Sequence[str]) -> bool:
    """True when a shell or `source` runs code from stdin, a pipe or a process substitution
    (`bash <<EOF`, `curl … | sh`, `source <(…)`, `. /dev/stdin`)."""
    if texts[0] in ("source", "."):
        return len(texts) < 2 or bool(words[1].dynamic) or texts[1].startswith(_STDIN_FILES)
    options = [t for t in texts[1:] if t.startswith("-") and not t.startswith("--")]
    if any("c" in t[1:] for t in options):
        return False
    script = next((t for t in texts[1:] if not t.startswith(("-", "+"))), None)
    return (
        script is None
        or "s" in "".join(t[1:] for t in options)
        or (script.startswith(_STDIN_FILES))
    )


# Options of `read` whose value is not a variable name.
_READ_VALUES = frozenset({"-p", "-d", "-t", "-n", "-N", "-u", "-i"})


def _dynamic_name(name: str, words: Sequence[Word], texts: Sequence[str]) -> str:
    """The first word that names a variable (or an arithmetic expression) for ``name`` but is
    only known at run time: `printf -v "$v"`, `read "$v"`, `unset "$v"`, `test -v "$v"`,
    `let "$e"`, `declare -i n="$e"`; "" when there is none."""
    dynamic = [bool(w.dynamic) and not _OPTION_FREE.match(w.text) for w in words]
    if name == "let":
        return next((texts[i] for i in range(1, len(texts)) if dynamic[i]), "")
    if name in ("test", "[", "printf"):
        flag = "-v"
        return next(
            (texts[i] for i in range(2, len(texts)) if dynamic[i] and texts[i - 1] == flag), ""
        )
    if name in ("read", "unset", "mapfile", "readarray"):
        for i in range(1, len(texts)):
            if dynamic[i] and not texts[i].startswith("-") and texts[i - 1] not in _READ_VALUES:
                return texts[i]
        return ""
    if name in _DECLARING:
        integer = any(t.startswith("-") and "i" in t for t in texts[1:])
        for i in range(1, len(texts)):
            text = texts[i]
            target, eq, _ = text.partition("=")
            if text.startswith("-"):
                continue
            if ("$" in target or "`" in target) or (not eq and dynamic[i]):
                return text
            if integer and dynamic[i]:
                return text
    return ""


def _dynamic_dir(path: str) -> bool:
    return "$" in path or "`" in path or path.startswith("~")


# What Python imports a top-level name from: a source or bytecode file, an extension module
# (`json.cpython-311-x86_64-linux-gnu.so`), or a regular package. A directory without
# `__init__` is a namespace portion: a regular package later on sys.path wins over it, but
# where the module is not installed at all it runs, so one that holds the module's path
# (`json/tool.py`, `pytest/__main__.py`) counts too.
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")


def _shadows(directory: str, name: str, module: str) -> bool:
    top, _, rest = module.partition(".")
    if name.startswith(top + ".") and name.endswith(_MODULE_SUFFIXES):
        return True
    if name != top:
        return False
    package = os.path.join(directory, name)
    inner = os.path.join(package, *rest.split(".")) if rest else os.path.join(package, "__main__")
    return any(
        os.path.lexists(path + suffix)
        for path in (os.path.join(package, "__init__"), inner)
        for suffix in _MODULE_SUFFIXES
    ) or os.path.isdir(inner)
