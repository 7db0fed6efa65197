"""Reading the scripts of text tools whose language can write files or run commands.

Choices, and why:
- sed's `w`/`W` commands, the `w` flag of `s`, the `e` command and the `e` flag of `s` turn
  a reader into a writer or a shell. A regular expression over the script cannot tell the
  `w` of `/when/p` from `1wout` (GNU sed needs no space before the file name), so the
  script is scanned command by command, the way sed's own compiler reads it: addresses,
  the command letter, then what that command consumes.
- What the scanner cannot read (an unknown command letter, an unterminated `s`) is
  reported as unreadable: the caller fails closed. sed itself would refuse such a script,
  but the classifier's reading must never be the looser one.
- The scanner is pure: script text in, effects out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScriptEffects:
    writes: tuple[str, ...] = ()  # files the script writes
    runs: str = ""  # why it runs commands, or ""
    unreadable: str = ""  # why the script could not be read, or ""


_SPACE = " \t"
_SIMPLE = frozenset("=dDgGhHnNpPxzF")
_S_FLAGS = frozenset("gpiImM0123456789")


class _Unreadable(Exception):
    pass


class _Sed:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.writes: list[str] = []
        self.runs = ""

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.i += 1

    def rest_of_line(self) -> str:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        line = self.text[self.i : end]
        self.i = end
        return line.strip(_SPACE)

    def until(self, delimiter: str, what: str) -> None:
        """Skip past the next unescaped ``delimiter``."""
        while self.i < len(self.text):
            c = self.text[self.i]
            self.i += 2 if c == "\\" else 1
            if c == delimiter:
                return
        raise _Unreadable(f"an unterminated {what}")

    def address(self) -> None:
        c = self.peek()
        if c.isdigit():
            self.skip("0123456789")
            if self.peek() == "~":
                self.i += 1
                self.skip("0123456789")
        elif c == "$":
            self.i += 1
        elif c in ("+", "~"):  # `addr,+N` and `addr,~N`
            self.i += 1
            self.skip("0123456789")
        elif c in ("/", "\\"):
            if c == "\\":
                self.i += 1
            delimiter = self.peek()
            self.i += 1
            self.until(delimiter, "address")
            self.skip("IM")

    def command(self) -> None:
        self.address()
        self.skip(_SPACE)
        if self.peek() == ",":
            self.i += 1
            self.skip(_SPACE)
            self.address()
        self.skip(_SPACE + "!")
        c = self.peek()
        self.i += 1
        if c == "{" or c in _SIMPLE:
            return
        if c in "wW":
            self.writes.append(self.rest_of_line())
        elif c == "e":
            self.runs = "runs shell commands with sed's `e` command"
            self.rest_of_line()
        elif c in "rRaicv#":
            self.continued_line()
        elif c in ":btT":
            self.skip(_SPACE)
            while self.peek() and self.peek() not in ";\n":
                self.i += 1
        elif c in "qQlL":
            self.skip(_SPACE)
            self.skip("0123456789")
        elif c in "sy":
            self.substitution(c)
        else:
            shown = repr(c) if c else "the end of the script"
            raise _Unreadable(f"{shown} where a sed command was expected")

    def continued_line(self) -> None:
        # `a`, `i`, `c` text (and comments, file names) runs to the end of the line; a
        # backslash before the newline continues it.
        while self.i < len(self.text):
            c = self.text[self.i]
            self.i += 2 if c == "\\" else 1
            if c == "\n":
                return

    def substitution(self, letter: str) -> None:
        delimiter = self.peek()
        if not delimiter or delimiter in "\n\\":
            raise _Unreadable(f"`{letter}` without a delimiter")
        self.i += 1
        self.until(delimiter, f"`{letter}` command")
        self.until(delimiter, f"`{letter}` command")
        if letter == "y":
            return
        while True:
            c = self.peek()
            if c in _S_FLAGS and c:
                self.i += 1
            elif c == "e":
                self.i += 1
                self.runs = "runs the result of a substitution as a shell command (`s///e`)"
            elif c == "w":
                self.i += 1
                self.writes.append(self.rest_of_line())
                return
            else:
                return

    def read(self) -> None:
        while True:
            self.skip(_SPACE + "\n;}")
            if self.i >= len(self.text):
                return
            self.command()


def sed_effects(script: str) -> ScriptEffects:
    """What a sed script (one `-e` value or the script operand) may do besides printing."""
    reader = _Sed(script)
    try:
        reader.read()
    except _Unreadable as exc:
        return ScriptEffects(tuple(reader.writes), reader.runs, str(exc))
    return ScriptEffects(tuple(reader.writes), reader.runs)


READERS = {"sed": sed_effects}
