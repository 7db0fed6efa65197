"""The command classifier: what may this command do, and may it run again?

    rules = load_rules(user_file, repo_roots, trusted_repos)   # RuleFileError if broken
    # (a broken repo file does not raise: that repo fails closed, see RuleSet.repos)
    verdict = Classifier(rules).classify("npm test", cwd=..., workspace=...)

See rules/README.md for the rule file format.
"""

from .classifier import Classifier
from .live import LiveRules
from .loading import load_repo_rules, load_rules
from .rules import RuleFileError
from .ruleset import RuleSet

__all__ = [
    "Classifier",
    "LiveRules",
    "RuleFileError",
    "RuleSet",
    "load_repo_rules",
    "load_rules",
]
