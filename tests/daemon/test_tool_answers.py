"""A tool's answer is stored in the ledger capped like command output: a business tool
answering a gigabyte must not put a gigabyte into the ledger (three times)."""

from __future__ import annotations

import hashlib
import json

from shellward.types import CallStatus, Idempotency, LedgerEntry, ReplayPolicy
from shellwardd.calls.mcp_tool import finished_entry
from shellwardd.outcomes import captured
from shellwardd.tools.classify import Source, ToolVerdict
from shellwardd.tools.config import Trust
from shellwardd.tools.connection import OutcomeKind, ToolCallOutcome
from shellwardd.tools.registry import RegisteredTool

CAP = 64


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_captured_keeps_the_start_and_the_size_and_digest_of_the_whole() -> None:
    data = bytes(range(200))
    out = captured(data, CAP)
    assert (out.data, out.total_bytes, out.truncated, out.sha256) == (
        data[:CAP], 200, True, sha(data),
    )  # fmt: skip
    small = captured(b"ok", CAP)
    assert (small.data, small.total_bytes, small.truncated) == (b"ok", 2, False)


def _finished(outcome: ToolCallOutcome) -> LedgerEntry:
    verdict = ToolVerdict(Idempotency.IDEMPOTENT, ReplayPolicy.AUTO, "reads", Source.DEFAULT)
    tool = RegisteredTool("get", "biz", "", {}, verdict, Trust.UNTRUSTED, "", False)
    entry = LedgerEntry(
        "c1", "", "", "biz.get", "h", CallStatus.STARTED, Idempotency.IDEMPOTENT,
        ReplayPolicy.AUTO,
    )  # fmt: skip
    return finished_entry(entry, tool, outcome, None, 0.0, cap=CAP)


def test_a_large_business_answer_is_stored_capped_in_every_column() -> None:
    text = "x" * 1000
    entry = _finished(ToolCallOutcome(OutcomeKind.OK, content=text))
    assert entry.stdout.data == b"x" * CAP and entry.stdout.truncated
    assert (entry.stdout.total_bytes, entry.stdout.sha256) == (1000, sha(text.encode()))
    assert entry.content.startswith("x" * CAP + "\n[shellward kept the first 64 of 1000 bytes")
    assert len(entry.content) < CAP + 200
    whole = json.dumps({"content": entry.content}).encode()
    assert json.loads(entry.output_json) == {
        "truncated": True, "total_bytes": len(whole), "sha256": sha(whole),
    }  # fmt: skip


def test_a_large_structured_answer_is_replaced_by_its_size_and_digest() -> None:
    structured = {"rows": list(range(100))}
    entry = _finished(ToolCallOutcome(OutcomeKind.OK, content="rows", structured=structured))
    whole = json.dumps(structured).encode()
    assert json.loads(entry.output_json) == {
        "truncated": True, "total_bytes": len(whole), "sha256": sha(whole),
    }  # fmt: skip
    assert entry.content == "rows" and not entry.stdout.truncated


def test_a_small_answer_is_kept_whole() -> None:
    entry = _finished(ToolCallOutcome(OutcomeKind.OK, content="done", structured={"id": 7}))
    assert (entry.content, entry.stdout.data, json.loads(entry.output_json)) == (
        "done", b"done", {"id": 7},
    )  # fmt: skip
