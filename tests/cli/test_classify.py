"""`shellward classify`: the verdict in plain text, as JSON, and explained part by part."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.cli.conftest import Outcome

Shellward = Callable[..., Outcome]

PART_KEYS = {
    "program", "resolved_program", "argv", "span", "idempotency", "replay_policy",
    "rule_id", "reason", "context", "arguments",
}  # fmt: skip


def test_plain_verdict_for_the_design_examples(shellward: Shellward) -> None:
    for command, label in (
        ("ls", "idempotent/auto"),
        ("npm test", "conditional/ask"),
        ("npm publish", "non_idempotent/never"),
    ):
        outcome = shellward("classify", command)
        assert outcome.code == 0, outcome.err
        head, reason = outcome.out.splitlines()[:2]
        assert head.startswith(label), (command, outcome.out)
        assert reason.strip()


def test_words_are_joined_like_run(shellward: Shellward) -> None:
    joined = json.loads(shellward("classify", "--json", "--", "ls", "-la", "a b").out)
    assert joined["parts"][0]["argv"] == ["ls", "-la", "a b"]


def test_json_has_the_verdict_and_every_part(shellward: Shellward) -> None:
    outcome = shellward("classify", "--json", "ls -la && npm publish")
    verdict = json.loads(outcome.out)
    assert verdict["idempotency"] == "non_idempotent" and verdict["replay_policy"] == "never"
    assert verdict["reason"] and isinstance(verdict["needs_network"], bool)
    assert isinstance(verdict["needs_approval"], bool)
    ls, publish = verdict["parts"]
    assert ls.keys() >= PART_KEYS and publish.keys() >= PART_KEYS
    assert ls["program"] == "ls" and ls["argv"] == ["ls", "-la"] and ls["span"] == [0, 6]
    assert ls["idempotency"] == "idempotent" and ls["rule_id"]
    assert {"index", "text", "kind"} <= ls["arguments"][0].keys()
    assert publish["replay_policy"] == "never"
    assert verdict["parts"][verdict["deciding_part"]] == publish


def test_explain_shows_each_part_its_rule_and_the_decider(shellward: Shellward) -> None:
    command = "ls -la && npm publish"
    parts = json.loads(shellward("classify", "--json", command).out)["parts"]
    outcome = shellward("classify", "--explain", command)
    assert outcome.code == 0
    text = outcome.out
    assert text.splitlines()[0].startswith("non_idempotent/never")
    assert "decided by: part 2 (npm publish)" in text
    assert "1. ls -la\n" in text and "2. npm publish  ◀ decides" in text
    for part in parts:
        assert f"rule:    {part['rule_id']}" in text
        assert f"why:     {part['reason']}" in text


def test_explain_names_the_context_of_nested_parts(shellward: Shellward) -> None:
    verdict = json.loads(shellward("classify", "--json", "bash -c 'rm -rf build'").out)
    nested = [part for part in verdict["parts"] if part["context"]]
    assert nested, verdict
    text = shellward("classify", "--explain", "bash -c 'rm -rf build'").out
    assert f"[in {nested[0]['context']}]" in text


def test_empty_input_is_a_usage_error(shellward: Shellward) -> None:
    for args in (("classify",), ("classify", ""), ("classify", "--", "  ")):
        outcome = shellward(*args)
        assert outcome.code == 2 and outcome.out == ""
        assert outcome.err.startswith("shellward: no command given")


def test_input_the_daemon_refuses_is_a_usage_error(shellward: Shellward) -> None:
    outcome = shellward("classify", "# only a comment")
    assert outcome.code == 2 and outcome.out == ""
    assert outcome.err.startswith("shellward: ") and "Traceback" not in outcome.err
