"""The labelled corpus the classifier is judged by.

``corpus.toml`` (next to this file) holds several hundred command strings, realistic agent
commands and commands built to fool a classifier, each labelled with the verdict the design
requires. A label is a lower bound: a case fails when the classifier is LESS strict than its
label (on idempotency or on replay policy) and passes when it is as strict or stricter.

Failing closed on everything would pass that check, so a summary test also requires that
nearly all commands labelled idempotent/auto are classified exactly idempotent/auto.
"""

from __future__ import annotations

import stat
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shellward.types import Idempotency, ReplayPolicy, Verdict
from shellwardd.classifier import Classifier, load_rules

CORPUS_PATH = Path(__file__).with_name("corpus.toml")

MIN_CASES = 300
MIN_PER_CLASS = 40
MIN_CATEGORIES = 15
# Share of idempotent/auto cases that must be classified exactly idempotent/auto.
MIN_EXACT_AUTO_SHARE = 0.90

REQUIRED_KEYS = frozenset({"command", "idempotency", "replay_policy", "category", "why"})

# Executables planted in the workspace so that `./cat`, `./ls` and `bin/rg` name real files
# that shadow the system programs, as they would in a hostile repository.
PLANTED_PROGRAMS = ("cat", "ls", "bin/rg", "gradlew", "scripts/test.sh", "manage.py")


def _load_cases() -> list[dict[str, Any]]:
    with CORPUS_PATH.open("rb") as fh:
        data = tomllib.load(fh)
    cases = data.get("case")
    if not isinstance(cases, list) or not cases:
        raise ValueError(f"{CORPUS_PATH}: no [[case]] entries")
    return cases


CASES = _load_cases()
CASE_IDS = [f"{case.get('category', 'uncategorised')}-{i}" for i, case in enumerate(CASES)]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    for name in PLANTED_PROGRAMS:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('#!/bin/sh\nrm -rf "$HOME"\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (root / "package.json").write_text('{"name": "demo", "scripts": {"test": "jest"}}\n')
    return root


@pytest.fixture(scope="module")
def classify(workspace: Path):
    """Classify with the built-in rules only, cwd and workspace both the temporary tree."""
    classifier = Classifier(load_rules())
    cache: dict[str, Verdict] = {}

    def run(command: str) -> Verdict:
        if command not in cache:
            try:
                cache[command] = classifier.classify(
                    command, cwd=str(workspace), workspace=str(workspace)
                )
            except Exception as exc:
                pytest.fail(
                    f"classifier raised {type(exc).__name__} on {command!r}: {exc}",
                    pytrace=False,
                )
        return cache[command]

    return run


def _label(case: dict[str, Any]) -> tuple[Idempotency, ReplayPolicy]:
    return Idempotency(case["idempotency"]), ReplayPolicy(case["replay_policy"])


def _describe(verdict: Verdict) -> str:
    return f"{verdict.idempotency.value}/{verdict.replay_policy.value}"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_verdict_is_at_least_as_strict_as_label(case: dict[str, Any], classify) -> None:
    command = case["command"]
    want_idempotency, want_policy = _label(case)
    verdict = classify(command)

    weaker = []
    if verdict.idempotency < want_idempotency:
        weaker.append("idempotency")
    if verdict.replay_policy < want_policy:
        weaker.append("replay_policy")
    if weaker:
        pytest.fail(
            f"{command!r} [{case['category']}] is labelled "
            f"{want_idempotency.value}/{want_policy.value} ({case['why']}) "
            f"but classified {_describe(verdict)}, less strict in {' and '.join(weaker)}; "
            f"classifier's reason: {verdict.reason!r}",
            pytrace=False,
        )


def test_corpus_has_enough_unique_commands() -> None:
    commands = [case.get("command") for case in CASES]
    blank = [i for i, c in enumerate(commands) if not isinstance(c, str) or not c.strip()]
    assert not blank, f"cases with an empty or non-string command: {blank}"
    duplicates = sorted(c for c, n in Counter(commands).items() if n > 1)
    assert not duplicates, f"duplicate commands in {CORPUS_PATH.name}: {duplicates}"
    assert len(set(commands)) >= MIN_CASES, (
        f"{CORPUS_PATH.name} has {len(set(commands))} unique commands, needs {MIN_CASES}"
    )


def test_every_label_is_valid() -> None:
    idempotencies = {m.value for m in Idempotency}
    kinds = sorted(idempotencies)
    policies = {m.value for m in ReplayPolicy}
    problems = []
    for case_id, case in zip(CASE_IDS, CASES, strict=True):
        keys = set(case)
        if keys != REQUIRED_KEYS:
            problems.append(
                f"{case_id}: missing {sorted(REQUIRED_KEYS - keys)}, "
                f"unknown {sorted(keys - REQUIRED_KEYS)}"
            )
            continue
        if case["idempotency"] not in idempotencies:
            problems.append(f"{case_id}: idempotency {case['idempotency']!r} is not one of {kinds}")
        if case["replay_policy"] not in policies:
            problems.append(f"{case_id}: replay_policy {case['replay_policy']!r} not in {policies}")
        for key in ("category", "why"):
            if not isinstance(case[key], str) or not case[key].strip():
                problems.append(f"{case_id}: empty {key}")
    assert not problems, "invalid corpus entries:\n" + "\n".join(problems)


def test_corpus_covers_every_class_and_many_categories() -> None:
    classes = Counter((case["idempotency"], case["replay_policy"]) for case in CASES)
    for pair in (("idempotent", "auto"), ("conditional", "ask"), ("non_idempotent", "never")):
        assert classes[pair] >= MIN_PER_CLASS, (
            f"only {classes[pair]} cases labelled {pair[0]}/{pair[1]}, need {MIN_PER_CLASS}"
        )
    categories = {case["category"] for case in CASES}
    assert len(categories) >= MIN_CATEGORIES, f"only {len(categories)} categories: {categories}"


def test_classifier_does_not_simply_fail_closed(classify) -> None:
    """Read-only commands must stay auto-replayable, or the corpus proves nothing."""
    auto_cases = [
        case for case in CASES if _label(case) == (Idempotency.IDEMPOTENT, ReplayPolicy.AUTO)
    ]
    misses = []
    for case in auto_cases:
        verdict = classify(case["command"])
        if (verdict.idempotency, verdict.replay_policy) != (
            Idempotency.IDEMPOTENT,
            ReplayPolicy.AUTO,
        ):
            misses.append(f"  {case['command']!r} -> {_describe(verdict)}: {verdict.reason}")
    exact = len(auto_cases) - len(misses)
    share = exact / len(auto_cases)
    if share < MIN_EXACT_AUTO_SHARE:
        pytest.fail(
            f"only {exact} of {len(auto_cases)} ({share:.0%}) idempotent/auto cases were "
            f"classified exactly idempotent/auto, need {MIN_EXACT_AUTO_SHARE:.0%}; misses:\n"
            + "\n".join(misses),
            pytrace=False,
        )


@pytest.mark.parametrize(
    ("command", "idempotency", "policy"),
    [
        ("ls", Idempotency.IDEMPOTENT, ReplayPolicy.AUTO),
        ("npm test", Idempotency.CONDITIONAL, ReplayPolicy.ASK),
        ("npm publish", Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER),
    ],
)
def test_design_examples_hold_exactly(
    command: str, idempotency: Idempotency, policy: ReplayPolicy, classify
) -> None:
    verdict = classify(command)
    assert (verdict.idempotency, verdict.replay_policy) == (idempotency, policy), (
        f"{command!r}: the design requires {idempotency.value}/{policy.value}, "
        f"got {_describe(verdict)}: {verdict.reason}"
    )
