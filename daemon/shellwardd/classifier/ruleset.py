"""Layering: built-in < user < repo rules, merged into lookup tables once, at load.

Rules are keyed by (program, subcommand words). A layer that is trusted (the user file, a
trusted repo) replaces a lower layer's rule with the same key. An untrusted repo's rules are
kept apart as *constraints*: the engine evaluates them next to the trusted rules and keeps
whichever verdict is stricter, so they can only make verdicts stricter. A repo whose rule
file is broken keeps its problem instead of rules: every command in it fails closed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .rules import Rule, RuleFileError

Key = tuple[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class ProgramRules:
    """Every rule for one program name or path."""

    base: Rule | None
    subs: Mapping[tuple[str, ...], Rule]
    longest_sub: int


@dataclass(frozen=True, slots=True)
class RuleIndex:
    programs: Mapping[str, ProgramRules]

    @classmethod
    def build(cls, rules: Iterable[Rule]) -> RuleIndex:
        keyed: dict[Key, Rule] = {}
        for rule in rules:
            for key in keys(rule):
                keyed[key] = rule  # later layers come later: they replace
        grouped: dict[str, dict[tuple[str, ...], Rule]] = {}
        for (program, sub), rule in keyed.items():
            grouped.setdefault(program, {})[sub] = rule
        programs = {}
        for program, by_sub in grouped.items():
            base = by_sub.pop((), None)
            programs[program] = ProgramRules(
                base=base,
                subs=by_sub,
                longest_sub=max(map(len, by_sub), default=0),
            )
        return cls(programs)


def keys(rule: Rule) -> list[Key]:
    return [(p, s) for p in rule.programs for s in rule.subcommands]


def check_conflicts(rules: Sequence[Rule]) -> None:
    """Two rules of one layer for the same program and subcommand: refuse the second."""
    seen: dict[Key, Rule] = {}
    for rule in rules:
        for key in keys(rule):
            first = seen.get(key)
            if first is not None and first is not rule:
                what = " ".join((key[0], *key[1]))
                raise RuleFileError(
                    rule.path,
                    rule.line,
                    f"rule `{rule.id}` conflicts with rule `{first.id}` at {first.location}: "
                    f"both decide `{what}`; keep one (merge their conditions)",
                )
            seen[key] = rule


@dataclass(frozen=True, slots=True)
class RepoRules:
    root: str
    trusted: bool
    # Trusted: the whole stack merged. Untrusted: the repo's rules alone, as constraints.
    # Broken: the layers below the repo (built-in + user), used only for the flags.
    index: RuleIndex
    path: str = ""
    # Why the repo's rule file cannot be used (it then fails closed for this repo only).
    problem: RuleFileError | None = None

    @property
    def source(self) -> str:
        """How ``shellward status`` lists this repo's file."""
        if self.problem is None:
            return self.path
        return (
            f"{self.path}: BROKEN, every command in {self.root} is non_idempotent/never "
            f"until it is fixed: {self.problem}"
        )


@dataclass(frozen=True, slots=True)
class Scope:
    """The rules for commands run in one directory."""

    index: RuleIndex
    constraints: RuleIndex | None = None  # an untrusted repo's rules
    broken: RepoRules | None = None  # a repo whose rule file is broken


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Every loaded rule, ready for lookups: what ``load_rules`` returns."""

    index: RuleIndex
    repos: tuple[RepoRules, ...] = ()
    files: tuple[str, ...] = ()
    # The built-in and user rules: what a repo's file is layered on (see load_repo_rules).
    below: tuple[Rule, ...] = ()

    def for_directory(self, cwd: str | None) -> Scope:
        """The rules that apply to commands run in ``cwd``."""
        if cwd is None or not self.repos:
            return Scope(self.index)
        path = os.path.normpath(cwd)
        best: RepoRules | None = None
        for repo in self.repos:
            if (path == repo.root or path.startswith(repo.root.rstrip("/") + "/")) and (
                best is None or len(repo.root) > len(best.root)
            ):
                best = repo
        if best is None:
            return Scope(self.index)
        if best.problem is not None:
            return Scope(self.index, broken=best)
        return Scope(best.index) if best.trusted else Scope(self.index, best.index)
