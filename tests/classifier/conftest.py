"""Fixtures for the classifier tests: the built-in rules and a workspace path."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellward.types import Idempotency, ReplayPolicy, Verdict
from shellwardd.classifier import Classifier, load_rules

AUTO = (Idempotency.IDEMPOTENT, ReplayPolicy.AUTO)
ASK = (Idempotency.CONDITIONAL, ReplayPolicy.ASK)
NEVER = (Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER)


def pair(verdict: Verdict) -> tuple[Idempotency, ReplayPolicy]:
    return verdict.idempotency, verdict.replay_policy


@pytest.fixture(scope="session")
def clf() -> Classifier:
    return Classifier(load_rules())


@pytest.fixture(scope="session")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ws")
