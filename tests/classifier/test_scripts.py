"""The sed script reader (scripts.py): what a script writes and runs, read as sed reads it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shellwardd.classifier.scripts import sed_effects

SAFE = [
    "p", "d", "1d", "$d", "/x/d", "/a\\/b/p", "s/a/b/", "s/a/b/g", "s|/w|/x|2", "s/w/e/gI",
    "y/abc/xyz/", "1,5p", "/start/,/end/d", "0,/re/s//x/", "2~3p", "$!N", "P", "D", "h", "G",
    "=", "l", "q", "Q 3", "n", "/when/p", "/e/d", "\\%w%d", "b end", ":end", "t", "{p}", "x",
]  # fmt: skip
scripts = st.lists(st.sampled_from(SAFE), min_size=1, max_size=6)


@given(scripts)
def test_scripts_of_safe_commands_do_nothing_else(commands: list[str]) -> None:
    assert sed_effects(";".join(commands)) == sed_effects("p")


@given(scripts, st.sampled_from(["w out.txt", "W out.txt", "1wout.txt", "s/a/b/w out.txt",
                                 "s/a/b/gpw out.txt", "/x/w out.txt"]))  # fmt: skip
def test_a_write_anywhere_is_found(commands: list[str], write: str) -> None:
    for at in range(len(commands) + 1):
        script = "\n".join([*commands[:at], write, *commands[at:]])
        assert sed_effects(script).writes == ("out.txt",), script


@given(scripts, st.sampled_from(["e", "e touch x", "1e id", "s/.*/ls/e", "s/a/b/ge"]))
def test_a_command_anywhere_is_found(commands: list[str], run: str) -> None:
    for at in range(len(commands) + 1):
        script = "\n".join([*commands[:at], run, *commands[at:]])
        assert sed_effects(script).runs, script


@pytest.mark.parametrize("script", ["k", "s/a/b", "s", "y/ab/", "/unterminated"])
def test_what_sed_would_refuse_is_unreadable(script: str) -> None:
    assert sed_effects(script).unreadable
