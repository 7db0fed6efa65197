"""A strict applier of one-file unified diffs, the format models produce.

``parse_patch`` reads the hunks (bodies by the counts in their ``@@`` headers, so a blank
line is never mistaken for the end of a hunk); ``Patch.apply`` applies them to bytes.
Context and removed lines must match the file exactly, line endings aside: the file keeps
its CRLF or LF endings and added lines take the ending most of its lines have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from shellwardd.errors import Conflict, InvalidArgument

_HUNK_RE = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class _Line:
    op: bytes  # b" " context, b"-" removed, b"+" added
    text: bytes  # without its line ending
    no_eol: bool = False  # followed by "\ No newline at end of file"


@dataclass(frozen=True)
class _Hunk:
    number: int
    old_start: int
    lines: tuple[_Line, ...]

    @property
    def old(self) -> list[bytes]:
        return [line.text for line in self.lines if line.op != b"+"]

    @property
    def position(self) -> int:
        """The 0-based index the header gives: of the first old line, or of the insertion."""
        return self.old_start - 1 if self.old else self.old_start


@dataclass(frozen=True)
class Patch:
    creates: bool  # the old side is /dev/null
    hunks: tuple[_Hunk, ...]

    def apply(self, content: bytes, rel: str) -> bytes:
        """``content`` with every hunk applied; Conflict names the first that does not apply."""
        lines = _split_lines(content)
        texts = [text for text, _ in lines]
        crlf = sum(end == b"\r\n" for _, end in lines)
        eol = b"\r\n" if crlf > len(lines) - crlf else b"\n"  # added lines follow the file
        out: list[tuple[bytes, bytes]] = []
        cursor = offset = 0
        for hunk in self.hunks:
            # Context must match exactly, but a hunk may sit a few lines from where its header
            # says (as with `git apply`): models often miscount line numbers, rarely context.
            want = hunk.position + offset
            at = _find(texts, hunk.old, want, cursor)
            if at is None:
                raise Conflict(_mismatch(texts, hunk, max(want, cursor), rel))
            offset = at - hunk.position
            out.extend(lines[cursor:at])
            for line in hunk.lines:
                if line.op == b" ":
                    out.append(lines[at])
                elif line.op == b"+":
                    out.append((line.text, b"" if line.no_eol else eol))
                at += line.op != b"+"
            cursor = at
        out.extend(lines[cursor:])
        # A line without an ending that the patch put before others (it appended after an
        # unterminated last line without saying so) gets one, or two lines would fuse.
        last = len(out) - 1
        return b"".join(
            text + (end or (eol if n < last else b"")) for n, (text, end) in enumerate(out)
        )


def _header_name(line: bytes) -> bytes:
    # "--- a/x.py\t2024-01-01 10:00:00" → "a/x.py"
    return line[4:].split(b"\t", 1)[0].strip()


def parse_patch(patch: str) -> Patch:
    """Parse a one-file unified diff; hunk bodies are read by the counts in their headers."""
    raw = patch.encode("utf-8").split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    # A CR before the LF is part of the line ending; the file's own endings are kept.
    lines = [line.removesuffix(b"\r") for line in raw]
    i, old_name, new_name = 0, b"", b""
    while i < len(lines) and not lines[i].startswith(b"@@"):
        if lines[i].startswith(b"--- "):
            old_name = _header_name(lines[i])
        elif lines[i].startswith(b"+++ "):
            new_name = _header_name(lines[i])
        i += 1  # anything else before the first hunk ("diff --git", "index") is a header
    if new_name == b"/dev/null":
        raise InvalidArgument(
            "The patch deletes the file (+++ /dev/null): file tools do not delete files;"
            " use run_command with rm."
        )
    hunks: list[_Hunk] = []
    while i < len(lines):
        header = _HUNK_RE.match(lines[i])
        if header is None:
            if lines[i].startswith((b"--- ", b"diff ")):
                raise InvalidArgument(
                    "The patch changes more than one file: send one patch per file."
                )
            if not lines[i].strip():
                i += 1
                continue
            raise InvalidArgument(
                f"Line {i + 1} of the patch is outside any hunk: {_show(lines[i])}. A hunk is"
                " '@@ -l,n +l,m @@' followed by exactly n context/'-' and m context/'+' lines."
            )
        number, header_line = len(hunks) + 1, i
        old_left, new_left = int(header[2] or 1), int(header[4] or 1)
        body: list[_Line] = []
        i += 1
        while old_left > 0 or new_left > 0 or (i < len(lines) and lines[i].startswith(b"\\")):
            line = lines[i] if i < len(lines) else b"?"  # the patch ended: fails as a bad op
            if line.startswith(b"\\") and body:
                body[-1] = replace(body[-1], no_eol=True)
                i += 1
                continue
            # A blank line is blank context: models often drop its leading space.
            op = line[:1] or b" "
            old_left -= op in (b" ", b"-")
            new_left -= op in (b" ", b"+")
            if op not in (b" ", b"-", b"+") or old_left < 0 or new_left < 0:
                raise InvalidArgument(
                    f"Hunk {number} ({_show(lines[header_line])}) does not match its line"
                    " counts: it needs as many context and '-' lines as its old count, and"
                    " context and '+' lines as its new count; fix the counts or the lines."
                )
            body.append(_Line(op, line[1:]))
            i += 1
        hunks.append(_Hunk(number, int(header[1]), tuple(body)))
    if not hunks:
        raise InvalidArgument(
            "The patch has no hunks: send a unified diff with '@@ -l,n +l,m @@' sections."
        )
    return Patch(creates=old_name == b"/dev/null", hunks=tuple(hunks))


def _show(text: bytes) -> str:
    shown = text.decode("utf-8", errors="replace")
    return repr(shown if len(shown) <= 80 else shown[:77] + "...")


def _split_lines(content: bytes) -> list[tuple[bytes, bytes]]:
    """(text, line ending) pairs; the last line's ending is b"" when the file lacks one."""
    parts = content.split(b"\n")
    last = parts.pop()
    lines = [(p[:-1], b"\r\n") if p.endswith(b"\r") else (p, b"\n") for p in parts]
    if last:
        lines.append((last, b""))
    return lines


def _find(texts: list[bytes], old: list[bytes], want: int, low: int) -> int | None:
    """The start nearest ``want`` (not before ``low``) where ``old`` matches exactly."""
    if not old:  # a pure insertion has no context to search by
        return want if low <= want <= len(texts) else None
    high = len(texts) - len(old)
    for distance in range(max(want - low, high - want) + 1):
        for at in (want - distance, want + distance):
            if low <= at <= high and texts[at : at + len(old)] == old:
                return at
    return None


def _mismatch(texts: list[bytes], hunk: _Hunk, at: int, rel: str) -> str:
    where = f"Hunk {hunk.number} of the patch does not apply to {rel!r}"
    redo = "read the file again and make the patch against its current content"
    for k, expected in enumerate(hunk.old):
        actual = texts[at + k] if at + k < len(texts) else None
        if actual != expected:
            found = "the end of the file" if actual is None else _show(actual)
            return (
                f"{where}: it expects {_show(expected)} at line {at + k + 1}, but there is"
                f" {found}, and its lines are nowhere else after the previous hunk; {redo}."
            )
    return (
        f"{where}: it inserts at line {at + 1}, past the end of the file or inside the"
        f" previous hunk; {redo}."
    )
