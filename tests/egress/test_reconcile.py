"""Network effects against the verdict: an idempotent call that did more than read is
downgraded, and what the model and `shellward show` are told."""

from __future__ import annotations

from shellward._render import Style, entry_details
from shellward.types import (
    CallStatus,
    Idempotency,
    LedgerEntry,
    NetworkEffect,
    ReplayPolicy,
    Verdict,
)
from shellwardd.outcomes import reconcile_network, result_from_entry

VERDICT = Verdict(
    Idempotency.IDEMPOTENT, ReplayPolicy.AUTO, "reads", needs_network=True,
    destinations=("*.registry.test",),
)  # fmt: skip
GET = NetworkEffect("a.registry.test", 443, "203.0.113.7", "CONNECT", "", 500, 9000)


def _entry() -> LedgerEntry:
    return LedgerEntry(
        call_id="c1", run_id="", step_id="", tool_name="run_command", input_hash="h",
        status=CallStatus.SUCCEEDED, idempotency=Idempotency.IDEMPOTENT,
        replay_policy=ReplayPolicy.AUTO, verdict=VERDICT, network_granted=True,
        content="The command succeeded (exit status 0).",
    )  # fmt: skip


def test_reads_from_the_rules_destinations_keep_the_verdict() -> None:
    refused = NetworkEffect("evil.test", 80, "", "POST", "/", refused="not on the allow-list")
    entry = reconcile_network(_entry(), (GET, refused))
    assert entry.idempotency is Idempotency.IDEMPOTENT and not entry.unexpected_network
    assert entry.network_effects == (GET, refused)
    assert "refused 1 connection(s): not on the allow-list" in entry.content


def test_a_post_or_another_destination_downgrades() -> None:
    post = NetworkEffect("a.registry.test", 80, "203.0.113.7", "POST", "/publish", 300, 20)
    other = NetworkEffect("elsewhere.test", 443, "203.0.113.9", "CONNECT", "", 300, 20)
    for effect in (post, other):
        entry = reconcile_network(_entry(), (GET, effect))
        assert entry.unexpected_network and entry.idempotency is Idempotency.CONDITIONAL
        assert entry.replay_policy is ReplayPolicy.ASK and effect.host in entry.note


def test_the_model_and_show_see_the_effects() -> None:
    post = NetworkEffect("pay.test", 80, "203.0.113.8", "POST", "/charge", 120, 80)
    entry = reconcile_network(_entry(), (post,))
    shown = result_from_entry(entry).to_dict()["metadata"]["network_effects"]  # type: ignore[index]
    assert shown == [
        {"host": "pay.test", "port": 80, "method": "POST", "path": "/charge",
         "bytes_sent": 120, "bytes_received": 80},
    ]  # fmt: skip
    text = entry_details(entry, Style())
    assert "network effects" in text and "pay.test:80 (203.0.113.8)" in text
    assert "/charge" in text and "120 / 80" in text and "unexpected network" in text
