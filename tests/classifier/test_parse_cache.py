"""The walk of a short command is cached: a cached answer must still be the one for the
arguments asked (the same text is re-parsed at other offsets and in other contexts, as
code inside `bash -c` or `$(…)`)."""

from __future__ import annotations

from shellwardd.classifier.parse import parse


def test_same_text_at_another_offset_gets_its_own_spans() -> None:
    first = parse("echo hi > out", base=0)
    shifted = parse("echo hi > out", base=10)
    assert first.commands[0].span == (0, 13)
    assert shifted.commands[0].span == (10, 23)
    assert shifted.commands[0].redirects[0].span[0] == first.commands[0].redirects[0].span[0] + 10


def test_same_text_in_another_context_keeps_that_context() -> None:
    assert parse("rm -rf x", context="").commands[0].context == ""
    assert parse("rm -rf x", context="bash -c").commands[0].context == "bash -c"


def test_same_text_without_a_base_takes_the_fallback_span() -> None:
    parse("touch f", base=0)
    assert parse("touch f", base=None, fallback=(3, 9)).commands[0].span == (3, 9)


def test_long_texts_are_walked_too() -> None:
    text = "true; " * 400 + "rm -rf x"
    parsed = parse(text)
    assert parsed.commands[-1].words[0].text == "rm"
    assert len(parsed.commands) == 401
