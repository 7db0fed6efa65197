"""Property tests over generated command strings (hypothesis)."""

from __future__ import annotations

from datetime import timedelta

import bashlex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shellwardd.classifier import Classifier, load_rules
from shellwardd.classifier.lex import prepare
from shellwardd.classifier.parse import is_blank

from .conftest import NEVER, pair

CLF = Classifier(load_rules())

# A generous per-example bound: classification takes well under a millisecond; this only
# catches a runaway (exponential) parse.
BOUNDED = settings(
    deadline=timedelta(seconds=2),
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)

WORDS = [
    "ls",
    "rm",
    "-rf",
    "x",
    "git",
    "push",
    "status",
    "echo",
    "'a b'",
    '"$x"',
    "$(",
    ")",
    "`",
    "${x:-",
    "}",
    "<(",
    ">",
    ">>",
    "<",
    "2>&1",
    "|",
    "&&",
    "||",
    ";",
    "&",
    "\n",
    "<<'EOF'",
    "EOF",
    "<<EOF",
    "if",
    "then",
    "fi",
    "for",
    "in",
    "do",
    "done",
    "case",
    "esac",
    "[[",
    "]]",
    "$((",
    "))",
    "time",
    "bash",
    "-c",
    "eval",
    "xargs",
    "sudo",
    "#",
    "find",
    "-exec",
    "\\;",
    "{",
    "(",
    "=",
    "X=1",
    "./cat",
    "npm",
    "test",
    "$cmd",
]
shellish = st.lists(st.sampled_from(WORDS), min_size=1, max_size=25).map(" ".join)
anything = st.text(max_size=200)


def check(command: str) -> None:
    if is_blank(command):
        try:
            CLF.classify(command)
        except ValueError:
            return
        raise AssertionError(f"blank input {command!r} did not raise ValueError")
    verdict = CLF.classify(command)
    assert verdict.parts
    assert verdict.deciding_part is not None
    assert max(p.idempotency for p in verdict.parts) == verdict.idempotency
    assert max(p.replay_policy for p in verdict.parts) == verdict.replay_policy
    for part in verdict.parts:
        assert 0 <= part.span[0] <= part.span[1] <= len(command)
    # Whatever bashlex cannot parse (after the documented rewrites of quoted here-documents
    # and `time`) is never replayed.
    try:
        bashlex.parse(prepare(command).text)
    except Exception:
        assert pair(verdict) == NEVER, (command, verdict.reason)


@BOUNDED
@given(shellish)
def test_shell_like_strings_never_raise_and_unparsed_is_never(command: str) -> None:
    check(command)


@BOUNDED
@given(anything)
def test_arbitrary_text_never_raises(command: str) -> None:
    check(command)


@BOUNDED
@given(st.sampled_from(["ls", "git status", "cat a"]), st.sampled_from(WORDS))
def test_appending_a_dangerous_part_is_never_weaker(prefix: str, word: str) -> None:
    safe = CLF.classify(prefix)
    combined = CLF.classify(f"{prefix} && rm -rf {word!r}")
    assert combined.idempotency >= safe.idempotency
    assert pair(combined) == NEVER
