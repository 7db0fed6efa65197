"""The rules in force, swapped whole on reload (SIGHUP or the ReloadRules RPC).

A broken file never replaces good rules: the reload reports the error and the last good
rules stay in force. At start-up there is no last good set, so the error is raised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from shellward.types import ReloadOutcome, Verdict

from .classifier import Classifier
from .loading import load_repo_rules
from .rules import RuleFileError
from .ruleset import RepoRules, RuleSet
from .toolchains import NO_TOOLCHAINS, Toolchains

log = logging.getLogger("shellwardd.rules")


class LiveRules:
    def __init__(self, load: Callable[[], RuleSet], toolchains: Toolchains = NO_TOOLCHAINS) -> None:
        self._load = load
        self._toolchains = toolchains
        rules = load()  # RuleFileError here means: refuse to start
        self._classifier = Classifier(rules, self._toolchains)
        self._sources = rules.files
        self._lock = threading.Lock()

    @property
    def sources(self) -> tuple[str, ...]:
        return self._sources

    def classify(
        self,
        command: str,
        cwd: str | None,
        workspace: str | None,
        env: Mapping[str, str] | None = None,
    ) -> Verdict:
        return self._classifier.classify(command, cwd=cwd, workspace=workspace, env=env)

    def check_repo(self, root: Path, *, trusted: bool) -> RepoRules | None:
        """Load ``<root>/.shellward/rules.toml`` over the rules in force, with the given trust,
        as the daemon would (``RepoRules.problem`` says what is wrong); None if absent."""
        rules = self._classifier.rules
        return load_repo_rules(root, rules.below, rules.index, trusted=trusted)

    def reload(self) -> ReloadOutcome:
        with self._lock:
            try:
                rules = self._load()
            except RuleFileError as exc:
                log.error("rule reload failed; the last good rules stay", extra={"error": str(exc)})
                return ReloadOutcome(False, str(exc), self._sources)
            # One assignment each: a classification in flight uses the old or the new set.
            self._classifier = Classifier(rules, self._toolchains)
            self._sources = rules.files
            log.info("rules reloaded", extra={"sources": list(rules.files)})
            return ReloadOutcome(True, "", self._sources)
