"""Loading rule files into a RuleSet, and checking their examples.

The built-in files are package data (``shellwardd.builtin_rules``), read with
importlib.resources so that an installed daemon finds them; they are parsed and checked once
per process.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from shellward.types import CommandPart, Idempotency, ReplayPolicy
from shellwardd.tomlfile import read_text

from .classifier import classify_with
from .rules import Rule, RuleFileError, parse_rule_file
from .ruleset import RepoRules, RuleIndex, RuleSet, check_conflicts, keys

log = logging.getLogger("shellwardd.rules")
BUILTIN_PACKAGE = "shellwardd.builtin_rules"
REPO_RULES = Path(".shellward") / "rules.toml"


@functools.cache
def _builtins() -> tuple[tuple[Rule, ...], RuleIndex, tuple[str, ...]]:
    rules: list[Rule] = []
    files: list[str] = []
    texts: dict[str, str] = {}
    for resource in sorted(
        importlib.resources.files(BUILTIN_PACKAGE).iterdir(), key=lambda r: r.name
    ):
        if resource.name.endswith(".toml"):
            text = resource.read_text(encoding="utf-8")
            path = str(resource)
            texts[path] = text
            files.append(path)
            rules.extend(parse_rule_file(text, path, resource.name))
    check_conflicts(rules)
    index = RuleIndex.build(rules)
    problems = check_examples(rules, index, None, texts)
    if problems:
        raise problems[0]
    return tuple(rules), index, tuple(files)


def load_rules(
    user_file: Path | None = None,
    repo_roots: Sequence[Path] = (),
    trusted_repos: Sequence[Path] = (),
) -> RuleSet:
    """Load built-in, user and repo rules. A broken built-in or user file raises
    RuleFileError; a broken repo file only makes that repo fail closed (see RepoRules)."""
    builtin, index, files = _builtins()
    stack = list(builtin)
    if user_file is not None:
        user, text = _read(user_file, "user")
        check_conflicts(user)
        stack.extend(user)
        index = RuleIndex.build(stack)
        _raise_first(check_examples(user, index, None, {str(user_file): text}))
        files += (str(user_file),)
    trusted = {os.path.abspath(p) for p in trusted_repos}
    repos: list[RepoRules] = []
    for root in repo_roots:
        repo = load_repo_rules(Path(root), stack, index, trusted=os.path.abspath(root) in trusted)
        if repo is not None:
            repos.append(repo)
            files += (repo.source,)
            if repo.problem is not None:
                log.error(
                    "broken repository rule file: commands in it are never replayed",
                    extra={"repo": repo.root, "error": str(repo.problem)},
                )
    return RuleSet(index, tuple(repos), files, tuple(stack))


def load_repo_rules(
    root: Path, below: Sequence[Rule], below_index: RuleIndex, *, trusted: bool
) -> RepoRules | None:
    """The rules of ``<root>/.shellward/rules.toml`` layered on ``below`` (the built-in and
    user rules, indexed as ``below_index``); None when the repo has no rule file.

    Never raises for a problem of the file: it is returned as ``RepoRules.problem`` (the repo
    then fails closed), because an agent can write this file and must not stop the daemon.
    """
    path = root / REPO_RULES
    if not os.path.lexists(path):
        return None
    absolute = os.path.abspath(root)
    try:
        if not path.is_file():  # a directory, a FIFO (reading it would block), a dead link
            raise RuleFileError(str(path), 1, "not a regular file: make it one, or remove it")
        rules, text = _read(path, "repo")
        check_conflicts(rules)
        if trusted:
            merged = RuleIndex.build([*below, *rules])
            _raise_first(check_examples(rules, merged, None, {str(path): text}))
            return RepoRules(absolute, True, merged, str(path))
        _raise_first(_widenings(rules, below_index))
        own = RuleIndex.build(rules)
        _raise_first(check_examples(rules, below_index, own, {str(path): text}))
        return RepoRules(absolute, False, own, str(path))
    except RuleFileError as exc:
        return RepoRules(absolute, trusted, below_index, str(path), exc)


def _widenings(rules: Sequence[Rule], below: RuleIndex) -> list[RuleFileError]:
    """What an untrusted repo's rules may not say: anything less strict than the layers
    below. Its verdicts could never win anyway (constraints keep the stricter one), but
    granting network would, and a file that tries is refused rather than half-applied."""
    untrusted = "this repository is not trusted, so its rules may only make verdicts stricter"
    problems = []
    for rule in rules:
        if rule.network or any(c.network for c in rule.when):
            line = next((c.line for c in rule.when if c.network), rule.line)
            problems.append(
                RuleFileError(rule.path, line, f"`network = true` grants network: {untrusted}")
            )
        if rule.hosts:
            problems.append(
                RuleFileError(rule.path, rule.line, f"`hosts` names destinations: {untrusted}")
            )
        if rule.approval_off or any(c.approval_off for c in rule.when):
            line = next((c.line for c in rule.when if c.approval_off), rule.line)
            problems.append(
                RuleFileError(rule.path, line, f"`approval = false` lifts an approval: {untrusted}")
            )
        for program, sub in keys(rule):
            found = below.programs.get(program)
            lower = None if found is None else (found.base if not sub else found.subs.get(sub))
            if lower is not None and (
                rule.idempotency < lower.idempotency or rule.replay < lower.replay
            ):
                problems.append(
                    RuleFileError(
                        rule.path,
                        rule.line,
                        f"rule `{rule.id}` says {rule.idempotency.value}/{rule.replay.value} "
                        f"where `{lower.qualified_id}` says "
                        f"{lower.idempotency.value}/{lower.replay.value}: {untrusted}",
                    )
                )
                break
    return problems


def _read(path: Path, source: str) -> tuple[list[Rule], str]:
    text = read_text(path, RuleFileError, "rule file")
    return parse_rule_file(text, str(path), source), text


def _raise_first(problems: list[RuleFileError]) -> None:
    if problems:
        raise problems[0]


def check_examples(
    rules: Sequence[Rule],
    index: RuleIndex,
    constraints: RuleIndex | None,
    texts: dict[str, str],
) -> list[RuleFileError]:
    """Run every ``match`` / ``not_match`` example; one error per failing example."""
    problems: list[RuleFileError] = []

    def check(
        rule: Rule,
        example: str,
        verdict: tuple[Idempotency, ReplayPolicy],
        should_match: bool,
        line: int,
    ) -> None:
        parts = classify_with(example, index, constraints, cwd=None, workspace=None).parts
        mine = [p for p in parts if p.rule_id == rule.qualified_id]
        matched = any((p.idempotency, p.replay_policy) == verdict for p in mine)
        if matched == should_match:
            return
        expected = f"{verdict[0].value}/{verdict[1].value}"
        if should_match:
            what = f"should be {expected} by rule `{rule.id}`"
        else:
            what = f"should not be {expected} by rule `{rule.id}`, but it is"
        hint = (
            ""
            if constraints is None
            else (" (this repo is not trusted: its rules can only make verdicts stricter)")
        )
        problems.append(
            RuleFileError(
                rule.path,
                _line_of(texts.get(rule.path, ""), example, line),
                f"example `{example}` {what}; got {_describe(parts, mine)}{hint}",
            )
        )

    for rule in rules:
        base = (rule.idempotency, rule.replay)
        for example in rule.match:
            check(rule, example, base, True, rule.line)
        for example in rule.not_match:
            check(rule, example, base, False, rule.line)
        for cond in rule.when:
            raised = (max(rule.idempotency, cond.idempotency), max(rule.replay, cond.replay))
            for example in cond.match:
                check(rule, example, raised, True, cond.line)
            for example in cond.not_match:
                check(rule, example, raised, False, cond.line)
    return problems


def _describe(parts: Sequence[CommandPart], mine: Sequence[CommandPart]) -> str:
    part = mine[0] if mine else max(parts, key=lambda p: (p.replay_policy.rank, p.idempotency.rank))
    return (
        f"{part.idempotency.value}/{part.replay_policy.value} from `{part.rule_id}` ({part.reason})"
    )


def _line_of(text: str, example: str, after: int) -> int:
    lines = text.splitlines()
    for n in range(after - 1, len(lines)):
        if example in lines[n]:
            return n + 1
    return after
