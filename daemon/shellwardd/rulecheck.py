"""``shellward rules check``, answered by the daemon: each rule file checked with the trust
the daemon gives it, so that the check never says ok for a file the daemon would refuse.

Choices, and why:
- The check runs the daemon's own loader (``load_rules``) with the daemon's own
  configuration, narrowed to the file in question: the user file over the built-ins; a
  workspace's ``.shellward/rules.toml`` over both, trusted only when that workspace is one
  of the daemon's trusted repositories. Trust is never decided here, only passed on, so the
  check follows whatever the loader does.
- A draft inside a workspace is checked as that workspace's repository file would be once
  put there: a copy is loaded as ``<temporary root>/.shellward/rules.toml``, standing in for
  the workspace in the trusted list when the workspace is trusted; problems name the draft.
- Any other file is not read: the daemon never loads it, and a daemon reachable over TCP
  does not read arbitrary files for a caller.
- ``load_rules`` stops at a file's first problem; one problem at a time is enough to fix. A
  broken repository file does not make it raise (that repository fails closed instead): its
  problem is read from the loaded rule set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from shellward.types import RuleFileCheck, RuleLayer
from shellwardd.classifier import RuleFileError, load_rules
from shellwardd.classifier.loading import REPO_RULES
from shellwardd.classifier.ruleset import RuleSet
from shellwardd.config import Config

BUILTIN_LABEL = "built-in rules"


def check_rule_files(config: Config, paths: Sequence[str]) -> list[RuleFileCheck]:
    """Check ``paths`` (absolute), or with none every rule file the daemon loads."""
    if paths:
        return [_check_path(config, path) for path in paths]
    checks = [_check(BUILTIN_LABEL, RuleLayer.BUILTIN, load_rules)]
    if config.user_rules is not None:
        checks.append(_check_user(config, str(config.user_rules)))
    checks.extend(
        _check_repo(config, root, str(root / REPO_RULES))
        for root in config.workspaces
        if (root / REPO_RULES).is_file()
    )
    return checks


def _check_path(config: Config, path: str) -> RuleFileCheck:
    if "\0" in path or not os.path.isabs(path):
        return _refused(path, RuleLayer.NOT_READ, "give the rule file as an absolute path")
    try:
        return _check_resolved(config, path, Path(os.path.realpath(path)))
    except OSError as exc:  # a name too long, a directory we may not search, …
        return _refused(path, RuleLayer.NOT_READ, f"cannot read the rule file: {exc}")


def _check_resolved(config: Config, path: str, resolved: Path) -> RuleFileCheck:
    # Resolved first: a link inside a workspace that points out of it is outside.
    if config.user_rules is not None and resolved == Path(os.path.realpath(config.user_rules)):
        return _check_user(config, path)
    root = next((w for w in config.workspaces if w == resolved or w in resolved.parents), None)
    if root is not None:
        if not resolved.is_file():
            return _refused(path, _repo_layer(config, root), "no such file")
        if resolved == Path(os.path.realpath(root / REPO_RULES)):
            return _check_repo(config, root, path)
        return _check_draft(config, root, path, resolved)
    user = str(config.user_rules) if config.user_rules is not None else "none"
    roots = ", ".join(str(root) for root in config.workspaces)
    return _refused(
        path,
        RuleLayer.NOT_READ,
        f"the daemon does not read this file: it is neither its user rule file ({user}) nor "
        f"inside one of its workspaces ({roots}); put it in a workspace to check it there",
    )


def _check_user(config: Config, shown: str) -> RuleFileCheck:
    return _check(shown, RuleLayer.USER, lambda: load_rules(user_file=config.user_rules))


def _check_repo(config: Config, root: Path, shown: str) -> RuleFileCheck:
    return _check(
        shown,
        _repo_layer(config, root),
        lambda: load_rules(
            user_file=config.user_rules,
            repo_roots=(root,),
            trusted_repos=config.trusted_repos,
        ),
    )


def _check_draft(config: Config, root: Path, shown: str, resolved: Path) -> RuleFileCheck:
    with tempfile.TemporaryDirectory(prefix="shellward-rules-check-") as stand_in:
        copy = Path(stand_in) / REPO_RULES
        copy.parent.mkdir()
        try:
            shutil.copyfile(resolved, copy)
        except OSError as exc:
            return _refused(shown, _repo_layer(config, root), f"cannot read the rule file: {exc}")
        trusted = tuple(
            Path(stand_in) if os.path.abspath(t) == os.path.abspath(root) else t
            for t in config.trusted_repos
        )
        check = _check(
            shown,
            _repo_layer(config, root),
            lambda: load_rules(
                user_file=config.user_rules, repo_roots=(Path(stand_in),), trusted_repos=trusted
            ),
        )
        problems = tuple(problem.replace(str(copy), shown) for problem in check.problems)
        return RuleFileCheck(shown, check.layer, problems)


def _check(shown: str, layer: RuleLayer, load: Callable[[], RuleSet]) -> RuleFileCheck:
    try:
        rules = load()
    except RuleFileError as exc:
        return RuleFileCheck(shown, layer, (str(exc),))
    # A broken repository file does not stop the loader (that repository fails closed
    # instead), so its problem is read from what the loader returns.
    return RuleFileCheck(
        shown, layer, tuple(str(repo.problem) for repo in rules.repos if repo.problem)
    )


def _refused(path: str, layer: RuleLayer, why: str) -> RuleFileCheck:
    return RuleFileCheck(path, layer, (f"{path}: {why}",))


def _repo_layer(config: Config, root: Path) -> RuleLayer:
    """For the report only; ``load_rules`` applies the trust itself."""
    trusted = {os.path.abspath(t) for t in config.trusted_repos}
    if os.path.abspath(root) in trusted:
        return RuleLayer.TRUSTED_REPOSITORY
    return RuleLayer.REPOSITORY
