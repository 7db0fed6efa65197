"""A second, independent reading of every command: tree-sitter-bash.

Choices, and why:
- bashlex is the parser the classifier walks, but every place where it reads a command
  differently from bash is a way around the rules (a here-document that ends elsewhere hides
  the lines between). A second parser written independently (tree-sitter-bash, the grammar
  Codex and Gemini CLI parse with) is unlikely to misread the same text the same way, so both
  must find the same simple commands with the same words at the same offsets; where they do
  not, the text fails closed and the reason names the first disagreement.
- Compared: for each simple command, the source spans of its words (program and arguments;
  not assignments, not redirections). Spans, not texts: the two parsers remove quotes
  differently, but a word starts and ends at the same character in both.
- Known, harmless differences are normalised, each for a reason bash's grammar gives: the
  words of a `[ … ]` test are one span (tree-sitter parses its expression); `time [-p]` is
  dropped (the pre-scan blanks it for bashlex); a redirection takes exactly one word, so
  tree-sitter's extra words after a redirection target are arguments (`ls >out -l`).
- tree-sitter is primary for nothing: `[[ … ]]`, `case` and `$((…))`, which bashlex refuses,
  still fail closed. tree-sitter-bash reads them, but then a single parser would decide
  alone, which is what this check exists to prevent; the fallback reading (fallback.py)
  keeps the rules' flags for them.
- A text tree-sitter reports an error in fails closed too.
- tree-sitter-bash 0.25 crashes the process (a segmentation fault, found by fuzzing) on some
  text with characters outside ASCII. bash's metacharacters are all ASCII, so every other
  character is replaced by `x` before tree-sitter sees the text: word boundaries do not
  move, the crash cannot happen (no crash in 240,000 fuzzed texts), and byte offsets become
  character offsets.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

Spans = tuple[tuple[int, int], ...]

_LANGUAGE = Language(tree_sitter_bash.language())
_local = threading.local()  # a Parser is not safe to share between threads
_COMMANDS = frozenset({"command", "declaration_command", "unset_command"})
_NOT_WORDS = frozenset({"variable_assignment", "file_redirect", "herestring_redirect",
                        "heredoc_redirect", "comment"})  # fmt: skip
# The keyword of a declaration_command / unset_command is an anonymous node.
_DECLARATION_KEYWORDS = frozenset({"export", "declare", "typeset", "local", "readonly", "unset",
                                   "unsetenv"})  # fmt: skip
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")
_GAP_WORD = re.compile(rb"[^\s<>&|;()]+")


def _parser() -> Parser:
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = Parser(_LANGUAGE)
    return parser


def disagreement(text: str, bashlex_commands: Sequence[Spans]) -> tuple[int, int, str] | None:
    """(start, end, reason) of the first difference between bashlex's simple commands
    (``bashlex_commands``, word spans in ``text``) and tree-sitter-bash's; None if they agree."""
    data = _NOT_ASCII.sub("x", text).encode("ascii")
    root = _parser().parse(data).root_node
    if root.has_error:
        where = _first_error(root)
        # An error at the very end (a missing token) has an empty span: widen it inside the text.
        end = min(max(where.end_byte, where.start_byte + 1), len(text))
        start = min(where.start_byte, end)
        return (
            start,
            end,
            (
                "the second parser (tree-sitter-bash) cannot read "
                f"`{_snippet(text[start:end] or text)}`, so the two readings cannot be "
                "compared; write the command more plainly"
            ),
        )
    theirs = sorted(_collapse(text, spans) for spans in _commands(root, data))
    ours = sorted(_collapse(text, spans) for spans in bashlex_commands if spans)
    if theirs == ours:
        return None
    only_ours = [c for c in ours if c not in theirs]
    only_theirs = [c for c in theirs if c not in ours]
    if only_ours:
        first = only_ours[0]
        start, end = first[0][0], first[-1][1]
        other = _overlapping(only_theirs, start, end)
        shown = f"`{_words(text, other)}`" if other else "no command there"
        return (
            start,
            end,
            (
                f"the two parsers read this differently: bashlex finds the command "
                f"`{_words(text, first)}`, tree-sitter-bash finds {shown}; write the command "
                "more plainly"
            ),
        )
    first = only_theirs[0]
    start, end = first[0][0], first[-1][1]
    return (
        start,
        end,
        (
            f"the two parsers read this differently: tree-sitter-bash finds the command "
            f"`{_words(text, first)}`, which bashlex does not; write the command more plainly"
        ),
    )


def _commands(root: Node, data: bytes) -> Iterator[list[tuple[int, int]]]:
    """The word spans (bytes) of every simple command under ``root``."""
    stack = [root]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind in _COMMANDS:
            words = _command_words(node)
            if words:
                yield [(w.start_byte, w.end_byte) for w in words]
        elif kind == "test_command" and node.child_count and node.children[0].type == "[":
            yield [(node.start_byte, node.end_byte)]
        elif kind == "redirected_statement":
            body = node.child_by_field_name("body")
            if body is not None and body.type == "command":
                words = _command_words(body)
                spans = [(w.start_byte, w.end_byte) for w in words]
                redirects = [c for c in node.children if c.id != body.id]
                if redirects:
                    # tree-sitter drops a lone `-` before a here-document (`python3 - <<EOF`)
                    # without reporting an error: words in the gap are the command's.
                    gap = (body.end_byte, redirects[0].start_byte)
                    for m in _GAP_WORD.finditer(data, *gap):
                        spans.append((m.start(), m.end()))
                for redirect in redirects:
                    if redirect.type == "file_redirect":
                        # bash: a redirection takes one word; the rest are arguments
                        targets = [c for c in redirect.children if c.is_named]
                        targets = [c for c in targets if c.type != "file_descriptor"]
                        spans.extend((t.start_byte, t.end_byte) for t in targets[1:])
                if spans:
                    yield sorted(spans)
                stack.extend(reversed(body.children))
                stack.extend(redirects)
                continue
        stack.extend(reversed(node.children))


def _command_words(node: Node) -> list[Node]:
    words: list[Node] = []
    # In `export A=1` the assignment is an argument of the builtin.
    declaration = node.type != "command"
    for child in node.children:
        named_word = child.is_named and (
            child.type not in _NOT_WORDS or (declaration and child.type == "variable_assignment")
        )
        if named_word or child.type == "command_name" or child.type in _DECLARATION_KEYWORDS:
            words.append(child)
    if node.type == "command" and words and words[0].text == b"time":
        words.pop(0)
        while words and words[0].text in (b"-p", b"--"):
            words.pop(0)
    return words


def _collapse(text: str, pairs: Sequence[tuple[int, int]]) -> Spans:
    """Word spans (characters) of one command; a `[ … ]` test is one span."""
    if pairs and text[pairs[0][0] : pairs[0][1]] == "[":
        return ((pairs[0][0], pairs[-1][1]),)
    return tuple(pairs)


def _first_error(node: Node) -> Node:
    for child in node.children:
        if child.has_error or child.is_missing or child.type == "ERROR":
            return _first_error(child) if child.type != "ERROR" else child
    return node


def _overlapping(commands: Sequence[Spans], start: int, end: int) -> Spans | None:
    return next((c for c in commands if c[0][0] < end and start < c[-1][1]), None)


def _words(text: str, spans: Spans) -> str:
    return _snippet(" ".join(text[a:b] for a, b in spans))


def _snippet(text: str, limit: int = 50) -> str:
    # Control characters are shown escaped: a stray `\r` is often the whole difference.
    shown = "".join(c if c.isprintable() or c in " \n\t" else repr(c)[1:-1] for c in text)
    line = " ".join(shown.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
