"""Idempotency keys for business tools, built by the runtime and never by the model.

A key is rendered from the tool's configured template. Placeholders:

=============  ==========================================================================
``{user}``     the user the daemon acts for
``{run}``      the agent run (``run_id`` of the call identity)
``{step}``     the step within the run (``step_id``: the model's tool-call id)
``{server}``   the MCP server's configured name
``{tool}``     the tool's name on its server
``{object}``   the business object: the value of the tool's ``object_argument``
=============  ==========================================================================

Every value is inserted with ``%`` and ``:`` percent-encoded, so the ``:``-separated parts of
a key cannot run into each other (``a:b`` + ``c`` ≠ ``a`` + ``b:c``). The same inputs always
give the same key.

Two scopes, chosen per tool (``key_scope``):

- ``run`` (default ``agent:{user}:{run}:{tool}:{object}``, or ``…:{step}`` without an object
  argument): the key must contain ``{run}``. A retry within the run sends the same key and
  the service dedupes it; a new run is a new intent and gets a new key.
- ``object`` (default ``agent:{user}:{tool}:{object}``): the key must contain ``{object}``
  and must not contain ``{run}`` or ``{step}``. It survives a new run and a daemon restart,
  so a resumed agent cannot create the same order twice, but a real second intent for the
  same object (a second order for the same cart) is deduped too. Pick it for operations
  that happen once per object.
"""

from __future__ import annotations

import enum
import string
from collections.abc import Mapping
from typing import Any

from shellwardd.errors import InvalidArgument

PLACEHOLDERS = ("user", "run", "step", "server", "tool", "object")


class KeyScope(enum.Enum):
    RUN = "run"
    OBJECT = "object"


def default_template(scope: KeyScope, *, has_object: bool) -> str:
    if scope is KeyScope.OBJECT:
        return "agent:{user}:{tool}:{object}"
    return "agent:{user}:{run}:{tool}:" + ("{object}" if has_object else "{step}")


def template_problem(template: str, scope: KeyScope, object_argument: str) -> str | None:
    """What is wrong with a key template for this scope, or None when it is usable."""
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as exc:
        return f"key_template {template!r} is not a valid template: {exc}"
    names = {name for name, _, _ in fields}
    for name, spec, conversion in fields:
        if name not in PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            return f"key_template has an unknown placeholder {{{name}}}; use {known}"
        if spec or conversion:
            return f"key_template placeholder {{{name}}} takes no format spec or conversion"
    if "object" in names and not object_argument:
        return "key_template uses {object}: set object_argument to the argument holding its id"
    if scope is KeyScope.RUN and "run" not in names:
        return 'key_scope = "run" needs {run} in key_template (or use key_scope = "object")'
    if scope is KeyScope.OBJECT:
        if "object" not in names:
            return 'key_scope = "object" needs {object} in key_template'
        if names & {"run", "step"}:
            return (
                'key_scope = "object" keys must survive a new run: remove {run} and {step}'
                " from key_template"
            )
    return None


def object_id(tool: str, object_argument: str, arguments: Mapping[str, Any]) -> str:
    """The business object id from the call's arguments; InvalidArgument when unusable."""
    value = arguments.get(object_argument)
    if value is None or value == "":
        raise InvalidArgument(
            f"{tool} needs the argument `{object_argument}` (the business object's id) to"
            " build its idempotency key; nothing was sent. Call it again with"
            f" `{object_argument}` set."
        )
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidArgument(
            f"{tool}: the argument `{object_argument}` must be a string or an integer id to"
            f" build the idempotency key (got {type(value).__name__}); nothing was sent."
        )
    return str(value)


def _encode(value: str) -> str:
    return value.replace("%", "%25").replace(":", "%3A")


def render_key(
    template: str,
    *,
    user: str,
    run_id: str,
    step_id: str,
    server: str,
    tool: str,
    object_id: str = "",
) -> str:
    """The key for one call; ``template`` must have passed ``template_problem``."""
    values = {
        "user": user,
        "run": run_id,
        "step": step_id,
        "server": server,
        "tool": tool,
        "object": object_id,
    }
    return template.format_map({name: _encode(value) for name, value in values.items()})
