"""GNU long options abbreviated: every declared option, at every unique prefix (class 4).

`sort --outp=x` is `sort --output=x` to getopt_long. Rather than listing examples, this
walks every built-in rule and checks each long option it declares with a role or in a
condition: any prefix that names only that option must give a verdict at least as strict as
the option written out.
"""

from __future__ import annotations

import pytest

from shellward.types import Verdict
from shellwardd.classifier import Classifier, load_rules
from shellwardd.classifier.rules import Role

from .conftest import pair


def _cases() -> list[tuple[str, str, str]]:
    """(rule id, command with the full option, the shortest unique prefix of it)."""
    cases = []
    for rule in load_rules().below:
        risky = {f for f, r in rule.value_roles.items() if r in (Role.WRITE, Role.EXEC)}
        risky |= {f for c in rule.when for f in c.flags}
        for flag in sorted(f for f in risky if f.startswith("--")):
            others = rule.long_flags - {flag}
            prefix = next(
                (
                    flag[:n]
                    for n in range(3, len(flag))
                    if not any(o.startswith(flag[:n]) for o in others)
                ),
                None,
            )
            if prefix is None:
                continue
            words = [rule.programs[0], *rule.subcommands[0]]
            takes = flag in rule.takes_value
            cases.append(
                (
                    rule.qualified_id,
                    " ".join([*words, f"{flag}=x" if takes else flag, "f"]),
                    " ".join([*words, f"{prefix}=x" if takes else prefix, "f"]),
                )
            )
    return cases


CASES = _cases()


def _rank(verdict: Verdict) -> tuple[int, int]:
    return verdict.idempotency.rank, verdict.replay_policy.rank


def test_there_are_many_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("rule", "full", "short"), CASES, ids=[c[2] for c in CASES])
def test_a_unique_prefix_is_as_strict_as_the_option(
    clf: Classifier, rule: str, full: str, short: str
) -> None:
    whole, abbreviated = clf.classify(full), clf.classify(short)
    assert _rank(abbreviated) >= _rank(whole), (
        f"{rule}: `{short}` is {pair(abbreviated)} but `{full}` is {pair(whole)}"
    )
    assert abbreviated.needs_network >= whole.needs_network
    assert abbreviated.needs_approval >= whole.needs_approval
