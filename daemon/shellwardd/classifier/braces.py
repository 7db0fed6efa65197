"""Brace expansion, as bash does it before any other expansion.

Choices, and why:
- bashlex keeps `{-delete,}` as one word, but bash runs `find src -delete`: an expansion
  can produce an option, a subcommand or the program itself (`{npm,publish}` runs `npm
  publish`). The classifier therefore reads the words bash would read, not the words bashlex
  returns: a word with a brace expansion becomes the words it expands to.
- The expansion works on the word's source text (quotes still in place), because quoting is
  what decides whether a brace expands; each result then goes through quote removal.
- Only what bash expands is expanded: an unquoted `{` that is not `${`, with a matching `}`
  and a top-level comma or a `..` sequence. `{}`, `{x}` and `{a..}` stay literal.
- A word that would expand to more than ``MAX_WORDS`` words, or whose results cannot be
  read back, is reported as unreadable (None): the caller fails closed.
"""

from __future__ import annotations

import re
import shlex

MAX_WORDS = 256
_INT_SEQUENCE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_SEQUENCE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")


def expand_word(raw: str) -> list[str] | None:
    """The words bash makes of the source text ``raw`` by brace expansion and quote removal;
    ``[]`` when it expands to nothing, None when it cannot be read."""
    pieces = _expand(raw, 0)
    if pieces is None:
        return None
    words: list[str] = []
    for piece in pieces:
        try:
            split = shlex.split(piece, comments=False, posix=True)
        except ValueError:
            return None
        if len(split) > 1:
            return None
        words.extend(split)  # an unquoted empty result disappears, as in bash
    return words


def has_braces(raw: str) -> bool:
    """Cheap test: could ``raw`` hold a brace expansion?"""
    return "{" in raw and "}" in raw and ("," in raw or ".." in raw)


def _expand(text: str, depth: int) -> list[str] | None:
    found = _first_expansion(text)
    if found is None:
        return [text]
    start, end, alternatives = found
    if depth > 16 or len(alternatives) > MAX_WORDS:
        return None
    out: list[str] = []
    for alt in alternatives:
        more = _expand(text[:start] + alt + text[end + 1 :], depth + 1)
        if more is None:
            return None
        out.extend(more)
        if len(out) > MAX_WORDS:
            return None
    return out


def _first_expansion(text: str) -> tuple[int, int, list[str]] | None:
    """(index of `{`, index of its `}`, alternatives) of the first brace bash expands."""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
        elif ch in "'\"":
            i = _after_quote(text, i)
        elif ch == "$" and text[i + 1 : i + 2] in ("{", "("):
            i = _after_group(text, i + 1)
        elif ch == "{":
            close, commas = _match(text, i)
            if close is not None:
                inner = text[i + 1 : close]
                if commas:
                    starts = [i, *commas]  # each alternative starts after one of these
                    ends = [*commas, close]
                    return i, close, [text[a + 1 : b] for a, b in zip(starts, ends, strict=True)]
                sequence = _sequence(inner)
                if sequence is not None:
                    return i, close, sequence
            i += 1
        else:
            i += 1
    return None


def _after_quote(text: str, i: int) -> int:
    quote = text[i]
    j = i + 1
    while j < len(text) and text[j] != quote:
        j += 2 if (text[j] == "\\" and quote == '"') else 1
    return j + 1


def _after_group(text: str, i: int) -> int:
    """Past the `{…}` or `(…)` opening at ``i`` (nesting and quotes respected)."""
    opener = text[i]
    closer = "}" if opener == "{" else ")"
    level = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "'\"":
            j = _after_quote(text, j)
            continue
        if ch == opener:
            level += 1
        elif ch == closer:
            level -= 1
            if level == 0:
                return j + 1
        j += 1
    return len(text)


def _match(text: str, i: int) -> tuple[int | None, list[int]]:
    """The `}` matching the `{` at ``i`` and the positions of its top-level commas."""
    level = 0
    commas: list[int] = []
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "'\"":
            j = _after_quote(text, j)
            continue
        if ch == "$" and text[j + 1 : j + 2] in ("{", "("):
            j = _after_group(text, j + 1)
            continue
        if ch == "{":
            level += 1
        elif ch == "}":
            level -= 1
            if level == 0:
                return j, commas
        elif ch == "," and level == 1:
            commas.append(j)
        j += 1
    return None, commas


def _sequence(inner: str) -> list[str] | None:
    m = _INT_SEQUENCE.match(inner)
    if m is not None:
        first, last = int(m.group(1)), int(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        if abs(last - first) // step >= MAX_WORDS:
            return None
        width = max(len(m.group(1)), len(m.group(2)))
        padded = any(
            g.lstrip("-").startswith("0") and len(g.lstrip("-")) > 1 for g in m.groups()[:2]
        )
        values = range(first, last + (1 if last >= first else -1), step if last >= first else -step)
        return [f"{v:0{width}d}" if padded else str(v) for v in values]
    m = _CHAR_SEQUENCE.match(inner)
    if m is not None:
        first, last = ord(m.group(1)), ord(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        values = range(first, last + (1 if last >= first else -1), step if last >= first else -step)
        return [chr(v) for v in values]
    return None
