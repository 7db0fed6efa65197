"""Reading the operator's TOML files (rule files, the MCP tools configuration) with
``file:line`` errors.

Choices, and why:
- tomllib gives values, not positions. Lines come from the raw text instead: a syntax error
  names its line in tomllib's message ("at line N"; "at end of document" is the last line);
  the n-th ``[[kind]]`` header line opens the n-th table of that kind, and the table runs to
  the next array-of-tables header; a key's line is the first line of its table that starts
  with the key (or opens a ``[kind.key]`` sub-table). A key this cannot place is reported
  at its table's header: never a wrong line, at worst a less precise one.
- A table written any other way (an inline array, ``[kind]`` without the second bracket)
  would break the n-th-header rule, so it is refused with a message saying how to write it.
- Each file keeps its own error class (``RuleFileError``, ``ToolConfigError``); the reader
  is given a factory ``(path, line, message) -> Exception`` and raises what it returns.
- Renamed keys: the replay policy is spelled ``replay`` in every operator file. The old
  spelling ``replay_policy`` is still read, as a deprecated alias, with a warning in the
  log naming the file and line; a table that gives both is refused.
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

log = logging.getLogger("shellwardd.config")

ErrorFactory = Callable[[str, int, str], Exception]

# Deprecated spelling → the one spelling.
RENAMED_KEYS = {"replay_policy": "replay"}

_TOML_LINE = re.compile(r"at line (\d+)")
_HEADER = re.compile(r"^\s*\[\[\s*([\w.-]+)\s*\]\]\s*(?:#.*)?$")


def read_text(path: Path, error: ErrorFactory, what: str) -> str:
    """The file's text; ``what`` names the file in the error ("rule file")."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(str(path), 1, f"cannot read the {what}: {exc}") from exc


class Block(NamedTuple):
    """The lines of one table: its header line, and the line after its last (1-based)."""

    start: int
    end: int


class TomlFile:
    """A parsed TOML document that remembers its lines."""

    def __init__(self, path: str, text: str, error: ErrorFactory) -> None:
        self.path = path
        self.lines = text.splitlines()
        self._error = error
        try:
            self.data: dict[str, Any] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            found = _TOML_LINE.search(str(exc))
            line = int(found.group(1)) if found else max(1, len(self.lines))
            raise error(path, line, f"invalid TOML: {exc}") from exc
        self._headers = [
            (n + 1, m.group(1)) for n, line in enumerate(self.lines) if (m := _HEADER.match(line))
        ]

    def fail(self, line: int, message: str) -> NoReturn:
        raise self._error(self.path, line, message)

    def check_top_level(self, allowed: Iterable[str], hint: str) -> None:
        """Refuse any top-level key but ``allowed``; ``hint`` says how to write the file."""
        for key in self.data:
            if key not in allowed:
                self.fail(self.top_key_line(key), f"unknown top-level key `{key}`; {hint}")

    def top_key_line(self, key: str) -> int:
        pattern = re.compile(rf"^\s*\[*\s*{re.escape(key)}(?![\w-])")
        return next((n + 1 for n, line in enumerate(self.lines) if pattern.match(line)), 1)

    def tables(self, kind: str) -> list[tuple[Block, dict[str, Any]]]:
        """Every ``[[kind]]`` table with the lines it spans."""
        tables = self.data.get(kind, [])
        starts = [start for start, name in self._headers if name == kind]
        if not isinstance(tables, list) or len(tables) != len(starts):
            self.fail(
                starts[0] if starts else self.top_key_line(kind),
                f"write each {kind} as its own `[[{kind}]]` table, one header line each",
            )
        found = []
        for start, table in zip(starts, tables, strict=True):
            if not isinstance(table, dict):
                self.fail(start, f"a {kind} must be a table")
            found.append((Block(start, self._block_end(start)), table))
        return found

    def _block_end(self, start: int) -> int:
        later = (n for n, name in self._headers if n > start and "." not in name)
        return next(later, len(self.lines) + 1)

    def key_line(self, block: Block, key: str) -> int:
        """The line of ``key`` inside ``block``, or the block's header line."""
        pattern = re.compile(rf"^\s*(\[+\s*[\w-]+\.)?{re.escape(key)}(?![\w-])")
        for n in range(block.start, block.end):
            if pattern.match(self.lines[n - 1]):
                return n
        return block.start

    def take_renamed(self, block: Block, table: dict[str, Any]) -> dict[str, Any]:
        """``table`` with deprecated keys under their one spelling (see RENAMED_KEYS)."""
        for old, new in RENAMED_KEYS.items():
            if old not in table:
                continue
            line = self.key_line(block, old)
            if new in table:
                self.fail(line, f"give `{new}` only: `{old}` is its old spelling")
            log.warning(
                "deprecated key: write `%s` instead of `%s`",
                new,
                old,
                extra={"file": self.path, "line": line},
            )
            table = {(new if key == old else key): value for key, value in table.items()}
        return table
