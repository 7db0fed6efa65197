"""Rules in force and their reload: a broken file never replaces good rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellward.types import ReplayPolicy
from shellwardd.classifier import LiveRules, RuleFileError, load_rules

GOOD = """
[[rule]]
program = "frobnicate"
idempotency = "idempotent"
replay = "auto"
reason = "only prints"
match = ["frobnicate --list"]
"""


def test_reload_swaps_and_keeps_the_last_good_rules(tmp_path: Path) -> None:
    user = tmp_path / "rules.toml"
    live = LiveRules(lambda: load_rules(user_file=user if user.exists() else None))
    assert live.classify("frobnicate --list", None, None).replay_policy is ReplayPolicy.NEVER
    user.write_text(GOOD)
    outcome = live.reload()
    assert outcome.ok and str(user) in outcome.sources
    assert live.classify("frobnicate --list", None, None).replay_policy is ReplayPolicy.AUTO
    user.write_text(GOOD.replace('replay = "auto"', 'replay = "sometimes"'))
    broken = live.reload()
    assert not broken.ok and f"{user}:" in broken.error
    assert live.classify("frobnicate --list", None, None).replay_policy is ReplayPolicy.AUTO


def test_a_broken_file_at_start_raises(tmp_path: Path) -> None:
    user = tmp_path / "rules.toml"
    user.write_text("[[rule]]\nprogram = 3\n")
    with pytest.raises(RuleFileError):
        LiveRules(lambda: load_rules(user_file=user))


def test_check_repo_uses_the_rules_in_force_and_the_given_trust(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text(
        "[[rule]]\nprogram = 'frob'\nidempotency = 'idempotent'\nreplay = 'auto'\n"
        "reason = 'reads'\n"
    )
    live = LiveRules(lambda: load_rules(user_file=user))
    repo = tmp_path / "repo"
    (repo / ".shellward").mkdir(parents=True)
    (repo / ".shellward" / "rules.toml").write_text(
        "[[rule]]\nprogram = 'frob'\nidempotency = 'idempotent'\nreplay = 'auto'\n"
        "network = true\nreason = 'fetches'\n"
    )
    untrusted = live.check_repo(repo, trusted=False)
    assert untrusted is not None and untrusted.problem is not None
    assert "network = true" in untrusted.problem.message and untrusted.problem.line == 1
    trusted = live.check_repo(repo, trusted=True)
    assert trusted is not None and trusted.problem is None
    assert live.check_repo(tmp_path, trusted=False) is None
