"""A reading of every word, for text the parser could not read.

Choices, and why:
- When a parse fails the command is non_idempotent/never anyway; what is still at stake are
  the flags a rule sets (approval, network). `npm publish $((0))` must still need approval.
  So a failed text is read again without any grammar: words split at blanks and at every
  operator, each run of words between operators a *segment*.
- Quotes are dropped, not honoured: code in `bash -c '…'` or a here-document the parser
  misread is still found. That reads more programs than bash would run (`echo 'curl x'`),
  which only adds flags to a command that already fails closed.
- `$(`, backticks and `<(`/`>(` open a nested segment; the outer one carries on after the
  closing `)`, so `$(echo npm) publish` is a segment whose program is an expansion
  (``dynamic``): the engine gives it the strictest flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .braces import expand_word, has_braces

# Operators end a segment; `$(`, backtick, `<(`, `>(` and `(` open one; `)` closes one.
_TOKEN = re.compile(
    r"(?P<open>\$\(\(?|\(\(|<\(|>\(|\(|\[\[)|(?P<close>\)\)?|\]\])|(?P<tick>`)"
    r"|(?P<op>&&|\|\||;;&?|;&|[;&|\n])|(?P<space>[ \t\r]+)|(?P<word>[^\s;&|()`]+)"
)
# Openers whose words are data (a test, arithmetic), not a command.
_DATA_OPENERS = frozenset({"[[", "((", "$(("})
_QUOTES = str.maketrans("", "", "'\"\\")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac", "function",
     "time", "coproc", "-p"}
)  # fmt: skip
# Keywords after which the words up to the next operator are data.
_DATA_KEYWORDS = frozenset({"case", "for", "select", "in"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_REDIRECT = re.compile(r"^\d*(<<<|<<-?|&>>?|>>?|<>?|>&|<&|>\|)")


@dataclass(frozen=True, slots=True)
class Segment:
    """Words between two operators; ``dynamic`` when the first is an expansion."""

    words: tuple[str, ...]
    dynamic: bool
    assignments: tuple[str, ...] = ()  # `NAME=value` words before the program


@dataclass
class _Open:
    words: list[str]
    assignments: list[str] = field(default_factory=list)
    dynamic: bool = False
    # True while the next word could still be the program (after assignments/keywords).
    at_start: bool = True
    # False for a test or arithmetic, whose words are data.
    command: bool = True
    pending: list[str] = field(default_factory=list)  # more words from a brace expansion


def fallback_segments(text: str) -> list[Segment]:
    """Every segment of ``text``, nested ones included."""
    out: list[Segment] = []
    stack: list[_Open] = [_Open([])]
    ticks = 0

    def close_segment() -> None:
        top = stack[-1]
        if top.words or top.dynamic or top.assignments:
            out.append(Segment(tuple(top.words), top.dynamic, tuple(top.assignments)))
        stack[-1] = _Open([])

    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "space":
            continue
        if kind == "open" or (kind == "tick" and ticks % 2 == 0):
            if kind == "tick":
                ticks += 1
            opener = m.group()
            data = opener in _DATA_OPENERS
            if stack[-1].at_start and stack[-1].command and opener != "(" and not data:
                stack[-1].dynamic = True  # the program is the output of a substitution
            stack[-1].at_start = False
            stack.append(_Open([], command=not data))
        elif kind == "close" or kind == "tick":
            if kind == "tick":
                ticks += 1
            close_segment()
            if len(stack) > 1:
                stack.pop()
        elif kind == "op" or m.group() in ("{", "}", "!"):  # `{`, `}`, `!` standing alone
            close_segment()
        else:
            raw = m.group()
            expanded = expand_word(raw) if has_braces(raw) else None
            top = stack[-1]
            if expanded:  # `{npm,publish}` is two words, the first a program
                raw, more = expanded[0], expanded[1:]
                top.pending.extend(more)
            word = raw.translate(_QUOTES)
            if top.at_start and word in _KEYWORDS:
                continue
            if top.at_start and _ASSIGNMENT.match(word):
                top.assignments.append(word)
                continue
            if _REDIRECT.match(word):
                continue
            if top.at_start and word in _DATA_KEYWORDS:
                top.command = False
            if top.at_start and top.command and word.startswith("$"):
                top.dynamic = True
            top.at_start = False
            top.words.append(word)
            top.words.extend(top.pending)
            top.pending.clear()
    while stack:
        close_segment()
        stack.pop()
    return out
