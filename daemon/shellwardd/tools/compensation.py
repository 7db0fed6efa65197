"""A business tool's compensation: the tool that reverts one of its calls, and its arguments.

Configured per tool in the tools file (``compensate = { tool = "cancel_order", arguments =
{ order_id = "{output.order_id}" } }``) and rendered from the original call's recorded input
(the arguments as sent, the idempotency key included) and output (its structured answer).

Choices, and why
- **Templates are values, not code.** A string argument may hold ``{input.<path>}`` or
  ``{output.<path>}`` placeholders; ``<path>`` walks objects by key and lists by index
  (``output.items.0.id``). ``{{`` and ``}}`` are literal braces. Nothing is evaluated, so a
  hostile answer from a server cannot make the daemon run anything but the configured tool.
- **A whole-string placeholder keeps its type.** ``"{output.id}"`` passes ``10`` as the
  integer ``10``, a list as a list; inside other text only a string, number or boolean may
  appear (an object would be printed in some Python spelling nobody asked for).
- **All or nothing.** A path that is missing, or a value that cannot be written into text,
  refuses the whole compensation before anything is sent: a cancel with half its
  arguments filled in could cancel the wrong thing.
- **Checked at load.** A placeholder outside ``input.`` / ``output.``, an empty path, a
  format spec: the tools file is refused with file and line, not at the first compensation.
"""

from __future__ import annotations

import string
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shellwardd.errors import InvalidArgument

ROOTS = ("input", "output")


@dataclass(frozen=True)
class Compensation:
    """The tool (on the same server) that reverts a call, with its argument template."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}))

    @property
    def needs_output(self) -> bool:
        """Whether the template reads the original call's answer (unknown when uncertain)."""
        return any(path[0] == "output" for path in _placeholders(self.arguments))


def template_problem(arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with an argument template, or None when it can be rendered."""
    try:
        list(_placeholders(arguments))
    except ValueError as exc:
        return str(exc)
    return None


def render(compensation: Compensation, given: Mapping[str, Any], answer: Any) -> dict[str, Any]:
    """The compensating call's arguments; InvalidArgument (nothing rendered) on any gap."""
    roots = {"input": given, "output": answer}
    rendered = _render(dict(compensation.arguments), roots)
    assert isinstance(rendered, dict)
    return rendered


def _placeholders(value: Any) -> list[tuple[str, ...]]:
    """Every placeholder path in a template value; ValueError naming a bad one."""
    if isinstance(value, Mapping):
        return [p for item in value.values() for p in _placeholders(item)]
    if isinstance(value, list):
        return [p for item in value for p in _placeholders(item)]
    if not isinstance(value, str):
        return []
    return [path for _, path in _parts(value) if path is not None]


def _parts(text: str) -> list[tuple[str, tuple[str, ...] | None]]:
    """``text`` as (literal, placeholder path or None) pairs; ValueError when malformed."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"compensate template {text!r} is not a valid template: {exc}") from None
    parts: list[tuple[str, tuple[str, ...] | None]] = []
    for literal, name, spec, conversion in parsed:
        parts.append((literal, None))
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(
                f"compensate placeholder {{{name}}} takes no format spec or conversion"
            )
        path = tuple(name.split("."))
        if path[0] not in ROOTS or len(path) < 2 or not all(path):
            raise ValueError(
                f"compensate placeholder {{{name}}} must be {{input.<path>}} (the original "
                "call's arguments) or {output.<path>} (its structured answer), e.g. "
                "{output.order_id}"
            )
        parts.append(("", path))
    return parts


def _render(value: Any, roots: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping):
        return {key: _render(item, roots) for key, item in value.items()}
    if isinstance(value, list):
        return [_render(item, roots) for item in value]
    if not isinstance(value, str):
        return value
    parts = [(literal, path) for literal, path in _parts(value) if literal or path]
    if len(parts) == 1 and parts[0][1] is not None:
        return _lookup(parts[0][1], roots)  # the whole string: keep the value's type
    text = []
    for literal, path in parts:
        if path is None:
            text.append(literal)
            continue
        found = _lookup(path, roots)
        if isinstance(found, bool):
            text.append("true" if found else "false")
        elif isinstance(found, str | int | float):
            text.append(str(found))
        else:
            raise InvalidArgument(
                f"the compensation template puts {{{'.'.join(path)}}} inside a string, but its "
                f"value is a {type(found).__name__}; nothing was sent. Make the placeholder the "
                "whole string, or point it at a string or number."
            )
    return "".join(text)


def _lookup(path: tuple[str, ...], roots: Mapping[str, Any]) -> Any:
    value = roots[path[0]]
    for depth, step in enumerate(path[1:], start=1):
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            where = ".".join(path[:depth])
            raise InvalidArgument(
                f"the compensation needs {{{'.'.join(path)}}}, but the original call's {where} "
                f"has no `{step}`; nothing was sent. Check the [[tool]] compensate template "
                "against what the call recorded (shellward show CALL_ID)."
            )
    if value is None:
        raise InvalidArgument(
            f"the compensation needs {{{'.'.join(path)}}}, but the original call recorded "
            "null there; nothing was sent. Revert it by hand, or ask the user."
        )
    return value
