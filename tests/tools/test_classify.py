"""Reclassification of MCP tools: names, descriptions, schemas, trusted hints and pins."""

from __future__ import annotations

from typing import Any

import pytest

from shellward.types import Idempotency, ReplayPolicy
from shellwardd.tools.classify import Source, ToolHints, classify_tool, words
from shellwardd.tools.config import ToolPin

READ = (Idempotency.IDEMPOTENT, ReplayPolicy.AUTO)
ASK = (Idempotency.CONDITIONAL, ReplayPolicy.ASK)
NEVER = (Idempotency.NON_IDEMPOTENT, ReplayPolicy.NEVER)

LYING = ToolHints(read_only=True, idempotent=True)
KEYED = {"type": "object", "properties": {"idempotency_key": {"type": "string"}}}


def verdict_of(
    name: str,
    description: str = "",
    schema: dict[str, Any] | None = None,
    hints: ToolHints | None = None,
    *,
    trusted: bool = False,
    pin: ToolPin | None = None,
) -> Any:
    return classify_tool(name, description, schema or {}, hints, trusted=trusted, pin=pin)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("get_or_create_user", ["get", "or", "create", "user"]),
        ("getOrCreate", ["get", "or", "create"]),
        ("target-list-writer", ["target", "list", "writer"]),
        ("HTTPServerError", ["http", "server", "error"]),
        ("list issues v2", ["list", "issues", "v", "2"]),
    ],
)
def test_words_split_every_convention(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(
    ("name", "description", "expected"),
    [
        # reads, in every spelling convention
        ("get_order_status", "Return the status of an order.", READ),
        ("listIssues", "", READ),
        ("search-documents", "", READ),
        ("describe table", "", READ),
        ("fetchPage", "", READ),
        # plurals and participles are nouns and adjectives in names, not writes
        ("get_posts", "", READ),
        ("list_deleted_items", "", READ),
        # writes
        ("create_order", "", NEVER),
        ("sendEmail", "", NEVER),
        ("charge-customer", "", NEVER),
        ("merge_pull_request", "", NEVER),
        ("HTTPPostRequest", "", NEVER),
        ("execute_query", "", NEVER),
        # a read and a write word: the stricter wins
        ("get_or_create_user", "", NEVER),
        ("getOrCreate", "", NEVER),
        ("target_list_writer", "", NEVER),
        ("search_and_publish", "", NEVER),
        # converging writes
        ("set_status", "", ASK),
        ("upsertRecord", "", ASK),
        ("list_and_enable_flags", "", ASK),
        # a read agent noun does not count: bump is unknown, so nothing usable
        ("bump_counter", "", NEVER),
        # the description's leading verb is a signal too, and the stricter wins
        ("orders", "Lists the orders of a customer.", READ),
        ("get_thing", "Creates the thing when it is missing, then returns it.", NEVER),
        ("issue_tracker", "Search issues created by a user.", READ),
    ],
)
def test_names_and_descriptions(
    name: str, description: str, expected: tuple[Idempotency, ReplayPolicy]
) -> None:
    verdict = verdict_of(name, description)
    assert (verdict.idempotency, verdict.replay_policy) == expected, verdict.reason
    assert verdict.needs_approval is False


def test_both_kinds_are_named_in_the_reason() -> None:
    verdict = verdict_of("get_or_create_user")
    assert verdict.source is Source.NAME
    assert "`create`" in verdict.reason
    assert "stricter reading wins over name word `get`" in verdict.reason


def test_agent_noun_counts_as_its_verb() -> None:
    assert "`writer` (write)" in verdict_of("target_list_writer").reason


def test_no_usable_signal_is_non_idempotent() -> None:
    verdict = verdict_of("weather", "Tells you about the weather.")
    assert (verdict.idempotency, verdict.replay_policy) == NEVER
    assert verdict.source is Source.DEFAULT
    assert "no read or write verb" in verdict.reason


def test_a_dedupe_argument_is_a_write_signal() -> None:
    verdict = verdict_of("reserve_seat", "", KEYED)
    assert (verdict.idempotency, verdict.source) == (Idempotency.NON_IDEMPOTENT, Source.NAME)
    assert "takes the argument `idempotency_key`" in verdict.reason
    assert (verdict_of("lookup", "", KEYED).idempotency) is Idempotency.NON_IDEMPOTENT


def test_a_lookup_by_key_is_still_a_read() -> None:
    verdict = verdict_of("get_issue_by_idempotency_key", "", KEYED)
    assert (verdict.idempotency, verdict.replay_policy) == READ


def test_untrusted_hints_are_ignored_and_recorded() -> None:
    verdict = verdict_of("create_issue", hints=LYING, trusted=False)
    assert (verdict.idempotency, verdict.replay_policy) == NEVER
    assert verdict.source is Source.NAME
    assert "ignored hint from an untrusted server: readOnlyHint=true" in verdict.reason


def test_untrusted_server_stating_nothing_adds_no_note() -> None:
    assert "ignored" not in verdict_of("create_issue", hints=ToolHints()).reason


def test_trusted_hints_decide() -> None:
    verdict = verdict_of("create_issue", hints=LYING, trusted=True)
    assert (verdict.idempotency, verdict.replay_policy) == READ
    assert verdict.source is Source.ANNOTATIONS
    assert "readOnlyHint=true" in verdict.reason


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (ToolHints(read_only=True), READ),
        # contradictory claims: the stricter is kept
        (ToolHints(read_only=True, destructive=True), NEVER),
        (ToolHints(read_only=False, idempotent=True), ASK),
        (ToolHints(read_only=False), NEVER),
        (ToolHints(destructive=False, idempotent=False), NEVER),
    ],
)
def test_trusted_hint_table(hints: ToolHints, expected: tuple[Idempotency, ReplayPolicy]) -> None:
    verdict = verdict_of("weather", hints=hints, trusted=True)
    assert (verdict.idempotency, verdict.replay_policy) == expected


def test_trusted_server_without_effect_hints_falls_back_to_words() -> None:
    verdict = verdict_of("list_orders", hints=ToolHints(open_world=True), trusted=True)
    assert (verdict.idempotency, verdict.source) == (Idempotency.IDEMPOTENT, Source.NAME)


def test_pin_wins_over_trusted_hints() -> None:
    pin = ToolPin("biz", "create_issue", idempotency=Idempotency.NON_IDEMPOTENT, replay_policy=None)
    verdict = verdict_of("create_issue", hints=LYING, trusted=True, pin=pin)
    assert (verdict.idempotency, verdict.replay_policy) == NEVER
    assert verdict.source is Source.PIN
    assert "pinned by the operator (non_idempotent)" in verdict.reason
    assert "without the pin: idempotent: trusted server's annotations" in verdict.reason


def test_pin_may_loosen_what_the_name_says() -> None:
    pin = ToolPin("biz", "weather", idempotency=Idempotency.IDEMPOTENT)
    assert (verdict_of("weather", pin=pin).replay_policy) is ReplayPolicy.AUTO


def test_pin_of_the_policy_alone_keeps_the_idempotency() -> None:
    pin = ToolPin("biz", "list_orders", replay_policy=ReplayPolicy.NEVER)
    verdict = verdict_of("list_orders", pin=pin)
    assert (verdict.idempotency, verdict.replay_policy) == (
        Idempotency.IDEMPOTENT,
        ReplayPolicy.NEVER,
    )
    assert verdict.source is Source.PIN


def test_pin_of_approval_alone_keeps_the_verdict() -> None:
    pin = ToolPin("biz", "charge_customer", approval=True)
    verdict = verdict_of("charge_customer", pin=pin)
    assert (verdict.idempotency, verdict.replay_policy) == NEVER
    assert verdict.source is Source.NAME
    assert verdict.needs_approval is True
