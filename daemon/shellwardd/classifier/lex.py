"""A quote-aware pre-scan of a command string, run before bashlex sees it.

bashlex misses or refuses some constructs that agents write every day. This scan finds them
so that the classifier can either rewrite them into something bashlex parses *with the same
character offsets* (so spans still point into the original string), or fail closed:

- quoted here-documents (``<<'EOF'``) make bashlex raise; their body is literal data, so the
  delimiter is unquoted and the body blanked, and bashlex then parses the rest;
- ``time`` raises NotImplementedError; it is a keyword that only times the pipeline, so it is
  blanked (with its ``-p``);
- every ``$(``, backtick, ``<(`` and ``>(`` that bash would expand is recorded, so that the
  parse walk can check that bashlex produced a node for each one (it produces none inside
  ``${x:-$(…)}`` or in the body of an unquoted here-document);
- constructs where bashlex and bash are known to read differently are recorded as *doubts*
  and fail closed: a here-document delimiter holding `$` (`<<$'EOF'` ends at the line `EOF`
  in bash, decoding ANSI-C escapes, but at `$EOF` in bashlex, so every line between would be
  invisible).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Characters where the scanner's state can change; everything between them is plain text.
_SPECIAL = re.compile(r"""[\\'"`$<>()#\n}]""")
_HEREDOC_WORD_END = frozenset(" \t\n;&|()<>")
_COMMENT_START_AFTER = frozenset(" \t\n;&|()")
# `time` in command position: at the start, after an operator, or after a keyword that
# starts a command list.
_TIME = re.compile(
    r"(?:^|[;&|(){!\n`]|\b(?:do|then|else|elif|if|while|until)\b)[ \t]*(time)(?=[ \t\n])"
)
_TIME_OPTIONS = re.compile(r"[ \t]+(?:-p|--)(?=[ \t\n])")


@dataclass(frozen=True, slots=True)
class Heredoc:
    """One here-document: its delimiter word and its body, as offsets."""

    word: tuple[int, int]
    delimiter: str
    quoted: bool
    body: tuple[int, int] | None  # None when the delimiter line never comes


@dataclass(frozen=True, slots=True)
class Prepared:
    """The text to hand to bashlex (same length as the original) and what the scan found."""

    text: str
    # Offsets of every `$(`, backtick, `<(` and `>(` that bash would expand.
    expansions: tuple[int, ...]
    # (start, end, why): constructs bashlex may read differently from bash.
    doubts: tuple[tuple[int, int, str], ...] = ()


class _Scanner:
    """Walks the text once, tracking quotes, `${…}`, substitutions and here-documents."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.expansions: list[int] = []
        self.literal: list[tuple[int, int]] = []  # quoted text, comments, here-doc bodies
        self.heredocs: list[Heredoc] = []
        self.doubts: list[tuple[int, int, str]] = []
        self._pending: list[tuple[tuple[int, int], str, bool, bool]] = []

    def run(self) -> None:
        text, n = self.text, len(self.text)
        # Contexts: "c" code, "d" double quotes, "b" ${…}, "k" backticks.
        stack = ["c"]
        i = 0
        while True:
            m = _SPECIAL.search(text, i)
            if m is None:
                return
            i = m.start()
            ch = text[i]
            top = stack[-1]
            if ch == "\\":
                i += 2
            elif top == "d":
                i = self._in_double_quotes(i, ch, stack)
            elif ch == "'" and top != "d":
                i = self._skip_single_quotes(i)
            elif ch == '"':
                stack.append("d")
                i += 1
            elif ch == "`":
                if top == "k":
                    stack.pop()
                else:
                    self.expansions.append(i)
                    stack.append("k")
                i += 1
            elif ch == "$":
                i = self._dollar(i, stack)
            elif ch == "}":
                if top == "b":
                    stack.pop()
                i += 1
            elif top == "b":
                i += 1
            elif ch in "<>" and i + 1 < n and text[i + 1] == "(":
                self.expansions.append(i)
                stack.append("c")
                i += 2
            elif ch == "<" and text.startswith("<<", i):
                i = self._heredoc_operator(i)
            elif ch == "(":
                stack.append("c")
                i += 1
            elif ch == ")":
                if len(stack) > 1 and top == "c":
                    stack.pop()
                i += 1
            elif ch == "#" and (i == 0 or text[i - 1] in _COMMENT_START_AFTER):
                end = text.find("\n", i)
                end = n if end < 0 else end
                self.literal.append((i, end))
                i = end
            elif ch == "\n" and self._pending:
                i = self._bodies(i + 1)
            else:
                i += 1

    def _in_double_quotes(self, i: int, ch: str, stack: list[str]) -> int:
        if ch == '"':
            stack.pop()
            return i + 1
        if ch == "`":
            self.expansions.append(i)
            stack.append("k")
            return i + 1
        if ch == "$":
            return self._dollar(i, stack)
        return i + 1

    def _skip_single_quotes(self, i: int) -> int:
        end = self.text.find("'", i + 1)
        end = len(self.text) - 1 if end < 0 else end
        self.literal.append((i, end + 1))
        return end + 1

    def _dollar(self, i: int, stack: list[str]) -> int:
        text = self.text
        nxt = text[i + 1 : i + 2]
        # `$((…))` is recorded too: bashlex refuses arithmetic, so it fails closed anyway.
        if nxt == "(":
            self.expansions.append(i)
            stack.append("c")
            return i + 2
        if nxt == "{":
            stack.append("b")
            return i + 2
        if nxt == "'":
            # ANSI-C quoting: literal, with backslash escapes.
            j = i + 2
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            self.literal.append((i, j + 1))
            return j + 1
        return i + 1

    def _heredoc_operator(self, i: int) -> int:
        text, n = self.text, len(self.text)
        if text.startswith("<<<", i):
            return i + 3
        j = i + 2
        strip_tabs = j < n and text[j] == "-"
        j += strip_tabs
        while j < n and text[j] in " \t":
            j += 1
        start = j
        delimiter: list[str] = []
        quoted = False
        while j < n and text[j] not in _HEREDOC_WORD_END:
            ch = text[j]
            if ch in "'\"":
                end = text.find(ch, j + 1)
                if end < 0:
                    return n  # unterminated quote: bashlex will refuse the whole string
                delimiter.append(text[j + 1 : end])
                quoted = True
                j = end + 1
            elif ch == "\\":
                delimiter.append(text[j + 1 : j + 2])
                quoted = True
                j += 2
            else:
                delimiter.append(ch)
                j += 1
        if "$" in text[start:j]:
            self.doubts.append(
                (
                    i,
                    j,
                    f"the here-document delimiter `{text[start:j]}` holds `$`: bash and the "
                    "parser may end the here-document at different lines; use a plain "
                    "delimiter such as <<'EOF'",
                )
            )
        if j > start:
            self._pending.append(((start, j), "".join(delimiter), quoted, strip_tabs))
        return j

    def _bodies(self, pos: int) -> int:
        """Consume the bodies of the pending here-documents, which start after a newline."""
        text, n = self.text, len(self.text)
        for word, delimiter, quoted, strip_tabs in self._pending:
            body_start = pos
            body: tuple[int, int] | None = None
            while pos < n:
                end = text.find("\n", pos)
                end = n if end < 0 else end
                line = text[pos:end]
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    body = (body_start, pos)
                    pos = min(end + 1, n)
                    break
                pos = end + 1
            if body is None:
                pos = n
            if not quoted:
                self._expansions_in_body(body_start, pos)
            self.literal.append((body_start, pos))
            self.heredocs.append(Heredoc(word, delimiter, quoted, body))
        self._pending.clear()
        return pos

    def _expansions_in_body(self, start: int, end: int) -> None:
        # An unquoted here-document expands `$(…)` and backticks; bashlex keeps them as text.
        text = self.text
        for m in re.finditer(r"\$\(|`", text[start:end]):
            at = start + m.start()
            if at == 0 or text[at - 1] != "\\":
                self.expansions.append(at)

    def in_literal(self, pos: int) -> bool:
        return any(a <= pos < b for a, b in self.literal)


def prepare(text: str) -> Prepared:
    """Scan ``text`` and return the string bashlex should parse, with what the scan found."""
    scanner = _Scanner(text)
    scanner.run()
    chars: list[str] | None = None

    def writable() -> list[str]:
        nonlocal chars
        if chars is None:
            chars = list(text)
        return chars

    for doc in scanner.heredocs:
        if doc.quoted and doc.body is not None:
            # The body of a quoted here-document is literal data: blank it, keep the lines.
            out = writable()
            a, b = doc.word
            out[a:b] = doc.delimiter.ljust(b - a)
            for k in range(*doc.body):
                if out[k] != "\n":
                    out[k] = " "
    if "time" in text:
        for m in _TIME.finditer(text):
            at = m.start(1)
            if scanner.in_literal(at):
                continue
            end = at + 4
            while (opt := _TIME_OPTIONS.match(text, end)) is not None:
                end = opt.end()
            writable()[at:end] = " " * (end - at)
    return Prepared(
        text="".join(chars) if chars is not None else text,
        expansions=tuple(scanner.expansions),
        doubts=tuple(scanner.doubts),
    )
