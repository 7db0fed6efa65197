"""bashlex walk: a command string in, the simple commands bash would run out.

Each simple command comes with the context it was found in ("$(…)", "function f", …) and
its source span. Whatever bashlex refuses, or parses without seeing a substitution that bash
would run, becomes a ``Finding``: the classifier turns each one into a non_idempotent/never
part (fail closed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import bashlex

from .braces import expand_word, has_braces
from .crosscheck import disagreement
from .lex import Prepared, prepare

# Redirection operators that open their target for writing.
_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


@dataclass(frozen=True, slots=True)
class Word:
    """One word after quote removal, with its span in the original string."""

    text: str
    span: tuple[int, int]
    # Why the word's value is only known at run time ("" when it is literal text).
    dynamic: str = ""


@dataclass(frozen=True, slots=True)
class Redirect:
    """A redirection; ``target`` is None for fd duplications and here-documents."""

    op: str
    target: Word | None
    span: tuple[int, int]

    @property
    def writes(self) -> bool:
        return self.target is not None and self.op in _WRITE_OPS

    @property
    def reads(self) -> bool:
        return self.target is not None and self.op in ("<", "<<<")


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    words: tuple[Word, ...]
    assignments: tuple[Word, ...]
    redirects: tuple[Redirect, ...]
    span: tuple[int, int]
    context: str


@dataclass(frozen=True, slots=True)
class Finding:
    """Something the parser could not see through: it fails closed."""

    span: tuple[int, int]
    reason: str


@dataclass(frozen=True, slots=True)
class Parsed:
    commands: tuple[SimpleCommand, ...]
    findings: tuple[Finding, ...]
    functions: frozenset[str]
    # Variables a `for`/`select` loop assigns, as `NAME=` words.
    loop_variables: tuple[Word, ...] = ()


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace and comments."""
    return all(not line or line.startswith("#") for line in map(str.strip, text.splitlines()))


def join_context(outer: str, inner: str) -> str:
    return f"{outer} / {inner}" if outer else inner


def parse(
    text: str,
    *,
    context: str = "",
    base: int | None = 0,
    fallback: tuple[int, int] = (0, 0),
) -> Parsed:
    """Walk ``text``. Spans are ``base + offset``; with ``base=None`` every span is
    ``fallback`` (used for code re-parsed from a word whose text differs from its source)."""
    if len(text) <= _CACHED_TEXT:
        return _cached_walk(text, context, base, fallback)
    return _walk(text, context, base, fallback)


# The walk is pure (a string in, frozen values out) and agents repeat commands (a test
# loop, `git status`): bashlex's parser was ~6 % of a call's CPU. Only short texts, so
# the cache stays small (at most ~128 x 2 KiB of source) whatever a client sends.
_CACHED_TEXT = 2048


def _walk(text: str, context: str, base: int | None, fallback: tuple[int, int]) -> Parsed:
    walker = _Walker(text, prepare(text), context, base, fallback)
    walker.run()
    return Parsed(
        tuple(walker.commands),
        tuple(walker.findings),
        frozenset(walker.functions),
        tuple(walker.loop_variables),
    )


_cached_walk = functools.lru_cache(maxsize=128)(_walk)


@dataclass
class _Walker:
    text: str
    prepared: Prepared
    context: str
    base: int | None
    fallback: tuple[int, int]
    commands: list[SimpleCommand] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)
    loop_variables: list[Word] = field(default_factory=list)
    substitutions: set[int] = field(default_factory=set)
    # Word offsets in ``text`` of every simple command, for the second parser's check.
    local: list[tuple[tuple[int, int], ...]] = field(default_factory=list)

    def span(self, pos: tuple[int, int]) -> tuple[int, int]:
        if self.base is None:
            return self.fallback
        return (pos[0] + self.base, pos[1] + self.base)

    def fail(self, pos: tuple[int, int], reason: str) -> None:
        self.findings.append(Finding(self.span(pos), reason))

    def run(self) -> None:
        for start, end, why in self.prepared.doubts:
            self.fail((start, end), why)
        try:
            trees = bashlex.parse(self.prepared.text)
        except Exception as exc:  # bashlex raises many kinds; all of them mean "unparsed"
            self.fail((0, len(self.text)), _parse_failure(self.text, exc))
            return
        for tree in trees:
            self.walk(tree, self.context, ())
        for at in self.prepared.expansions:
            if at not in self.substitutions:
                snippet = _snippet(self.text[at:])
                self.fail(
                    (at, at + len(snippet)),
                    f"the parser did not see the substitution `{snippet}`"
                    " (inside `${…}` or an unquoted here-document)",
                )
        if not self.findings:
            found = disagreement(self.text, self.local)
            if found is not None:
                self.fail((found[0], found[1]), found[2])

    def walk(self, node: Any, context: str, redirects: tuple[Redirect, ...]) -> None:
        kind = node.kind
        if kind == "command":
            self.command(node, context, redirects)
        elif kind in ("list", "pipeline"):
            for part in node.parts:
                self.walk(part, context, redirects)
        elif kind == "compound":
            own = tuple(self.redirect(r, context) for r in getattr(node, "redirects", ()))
            for part in node.list:
                self.walk(part, context, redirects + own)
        elif kind in ("if", "for", "while", "until"):
            if kind == "for":
                name = next((p for p in node.parts if p.kind == "word"), None)
                if name is not None:
                    self.loop_variables.append(Word(f"{name.word}=", self.span(name.pos)))
            for part in node.parts:
                self.walk(part, context, redirects)
        elif kind == "function":
            name = next(p.word for p in node.parts if p.kind == "word")
            self.functions.add(name)
            for part in node.parts:
                if part.kind != "word":
                    self.walk(part, join_context(context, f"function {name}"), ())
        elif kind == "word":
            self.word(node, context)
        elif kind not in ("operator", "pipe", "reservedword"):
            self.fail(node.pos, f"the parser produced an unexpected `{kind}` node")

    def command(self, node: Any, context: str, inherited: tuple[Redirect, ...]) -> None:
        words: list[Word] = []
        assignments: list[Word] = []
        redirects: list[Redirect] = []
        local: list[tuple[int, int]] = []
        for part in node.parts:
            if part.kind == "word":
                words.extend(self.expanded(self.word(part, context), part.pos))
                local.append(part.pos)
            elif part.kind == "assignment":
                assignments.append(self.word(part, context))
            elif part.kind == "redirect":
                redirects.append(self.redirect(part, context))
        self.local.append(tuple(local))
        self.commands.append(
            SimpleCommand(
                tuple(words),
                tuple(assignments),
                tuple(redirects) + inherited,
                self.span(node.pos),
                context,
            )
        )

    def word(self, node: Any, context: str) -> Word:
        dynamic = ""
        for part in getattr(node, "parts", ()):
            if part.kind == "parameter":
                dynamic = dynamic or f"a variable (`${part.value}`)"
            elif part.kind in ("commandsubstitution", "processsubstitution"):
                start = part.pos[0]
                self.substitutions.add(start)
                opener = self.text[start : start + 2]
                label = "`…`" if opener[:1] == "`" else f"{opener}…)"
                dynamic = "a command substitution"
                self.walk(part.command, join_context(context, label), ())
        raw = self.text[node.pos[0] : node.pos[1]]
        if not dynamic and _glob_start(raw):
            # The files in the directory decide what it becomes (a file named `-delete`…).
            dynamic = f"a glob (`{raw}`)"
        return Word(node.word, self.span(node.pos), dynamic)

    def expanded(self, word: Word, pos: tuple[int, int]) -> list[Word]:
        """The words bash makes of ``word`` by brace expansion (usually just ``word``)."""
        raw = self.text[pos[0] : pos[1]]
        if not has_braces(raw):
            return [word]
        texts = expand_word(raw)
        if texts is None:
            return [
                Word(word.text, word.span, word.dynamic or "a brace expansion too large to read")
            ]
        return [Word(text, word.span, word.dynamic) for text in texts]

    def redirect(self, node: Any, context: str) -> Redirect:
        target = node.output
        op = node.type
        if getattr(node, "heredoc", None) is not None or not hasattr(target, "kind"):
            return Redirect(op, None, self.span(node.pos))
        word = self.word(target, context)
        if op in (">&", "<&") and (word.text.isdigit() or word.text == "-"):
            return Redirect(op, None, self.span(node.pos))
        return Redirect(op, word, self.span(node.pos))


def _glob_start(raw: str) -> bool:
    """True when an unquoted word starts with a glob that matches file names."""
    return raw[:1] in ("*", "?") or (raw[:1] == "[" and len(raw) > 2 and "]" in raw[1:])


def _snippet(text: str, limit: int = 40) -> str:
    line = text.split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


_CONSTRUCT_HINTS = (
    ("case ", "a `case` statement"),
    ("[[", "a `[[ … ]]` test"),
    ("((", "arithmetic `((…))`"),
    ("select ", "a `select` loop"),
    ("coproc", "a `coproc`"),
    ("=(", "an array assignment"),
)


def _parse_failure(text: str, exc: Exception) -> str:
    hint = next((name for needle, name in _CONSTRUCT_HINTS if needle in text), "")
    what = f" (it contains {hint})" if hint else ""
    detail = str(exc).split("\n", 1)[0][:80]
    return f"the parser cannot read this command{what}: {type(exc).__name__}: {detail}"
