"""Reclassification of an MCP tool: what running it again does, decided by shellward.

A tool's own annotations are a claim by its server, not a fact. The verdict comes from, in
order of authority:

1. the operator's pin (``[[tool]]`` in the config): wins for every field it sets;
2. the server's annotations (readOnlyHint, destructiveHint, idempotentHint), but only when
   the operator marked that server trusted; from an untrusted server they are ignored, and
   the verdict's reason says so;
3. the words of the tool's name, the leading verb of its description and the names of its
   arguments, matched on word boundaries (snake_case, camelCase, kebab-case, spaces);
4. nothing usable: non_idempotent / never (fail closed).

Word vocabularies (step 3): a *read* verb (get, list, search, …) gives idempotent / auto; a
*converging* write (set, put, upsert, enable, …: running it twice leaves the same state)
gives conditional / ask; any other *write* verb (create, send, charge, delete, …) gives
non_idempotent / never. When several kinds appear, the stricter wins: ``get_or_create_user``,
``getOrCreate`` and ``target_list_writer`` are not reads. A write word matches in its base
form, its agent noun (``writer``, ``creator``) and its gerund (``writing``), but not its
plural or past participle, which in tool names are nouns and adjectives (``get_posts``,
``list_deleted_items`` stay reads). A read word matches only in its base form, because a
read loosens the verdict: ``bump_counter`` is not a read because of ``count``.

The module is pure: strings in, verdict out.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shellward.types import Idempotency, ReplayPolicy

from .config import ToolPin

READ_VERBS = frozenset(
    {
        "browse",
        "count",
        "describe",
        "explain",
        "fetch",
        "find",
        "get",
        "inspect",
        "list",
        "lookup",
        "peek",
        "ping",
        "poll",
        "preview",
        "query",
        "read",
        "retrieve",
        "search",
        "show",
        "stat",
        "view",
    }
)

# Writes whose repetition converges on the same state: the outcome of a replay depends on
# what happened in between, which is what conditional / ask means.
CONVERGING_VERBS = frozenset(
    {
        "configure",
        "disable",
        "enable",
        "label",
        "lock",
        "mark",
        "overwrite",
        "put",
        "rename",
        "replace",
        "save",
        "set",
        "store",
        "tag",
        "unlock",
        "upsert",
    }
)

WRITE_VERBS = frozenset(
    {
        "accept",
        "add",
        "append",
        "apply",
        "approve",
        "assign",
        "buy",
        "cancel",
        "charge",
        "close",
        "commit",
        "create",
        "decline",
        "decrement",
        "delete",
        "deploy",
        "deposit",
        "destroy",
        "dispatch",
        "drop",
        "edit",
        "emit",
        "enqueue",
        "exec",
        "execute",
        "fork",
        "forward",
        "grant",
        "import",
        "increment",
        "insert",
        "install",
        "invite",
        "invoke",
        "kill",
        "launch",
        "merge",
        "modify",
        "move",
        "notify",
        "pay",
        "post",
        "provision",
        "publish",
        "purchase",
        "purge",
        "push",
        "refund",
        "register",
        "reject",
        "remove",
        "reply",
        "reset",
        "restart",
        "revert",
        "revoke",
        "rollback",
        "run",
        "sell",
        "send",
        "spawn",
        "start",
        "stop",
        "submit",
        "subscribe",
        "sync",
        "terminate",
        "transfer",
        "trigger",
        "truncate",
        "uninstall",
        "unsubscribe",
        "update",
        "upload",
        "withdraw",
        "write",
    }
)

# Arguments a tool takes only because it has side effects (dedupe keys, confirmations),
# compared with separators removed. A tool whose own name mentions the argument is a
# lookup *by* it (get_issue_by_idempotency_key), and the argument says nothing.
SIDE_EFFECT_ARGUMENTS = frozenset(
    {
        "clientrequestid",
        "clienttoken",
        "confirm",
        "dedupekey",
        "dedupkey",
        "dryrun",
        "idempotencykey",
    }
)

_DEFAULT_POLICY = {
    Idempotency.IDEMPOTENT: ReplayPolicy.AUTO,
    Idempotency.CONDITIONAL: ReplayPolicy.ASK,
    Idempotency.NON_IDEMPOTENT: ReplayPolicy.NEVER,
}

# One word of an identifier: an acronym before a capitalised word or digit (HTTPServer →
# HTTP), a capitalised or lower-case run, an all-caps run, or digits.
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


class Source(enum.Enum):
    """Where a verdict came from, from most to least authoritative."""

    PIN = "pin"
    ANNOTATIONS = "annotations"
    NAME = "name"
    DEFAULT = "default"


@dataclass(frozen=True)
class ToolHints:
    """A server's annotations about one of its tools (None = not stated)."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    def stated(self) -> str:
        """The hints that were given, as the MCP spec spells them, for a reason."""
        named = (
            ("readOnlyHint", self.read_only),
            ("destructiveHint", self.destructive),
            ("idempotentHint", self.idempotent),
            ("openWorldHint", self.open_world),
        )
        return ", ".join(
            f"{name}={str(value).lower()}" for name, value in named if value is not None
        )


@dataclass(frozen=True)
class ToolVerdict:
    """What running a tool again does, and why shellward thinks so."""

    idempotency: Idempotency
    replay_policy: ReplayPolicy
    reason: str
    source: Source
    needs_approval: bool = False


def words(text: str) -> list[str]:
    """The lower-case words of an identifier or a sentence, split on every convention."""
    return [w.lower() for w in _WORD.findall(text)]


def _write_forms(verb: str) -> set[str]:
    """The spellings that count as a write ``verb`` in a tool name: base, agent noun, gerund."""
    stem = verb[:-1] if verb.endswith("e") else verb
    forms = {verb, stem + "er", stem + "or", stem + "ing"}
    if re.fullmatch(r"[^aeiou]*[aeiou][bdglmnprt]", verb):  # run → runner, running
        forms |= {verb + verb[-1] + "er", verb + verb[-1] + "ing"}
    return forms


def _vocabulary(verbs: Iterable[str], kind: Idempotency) -> dict[str, tuple[str, Idempotency]]:
    return {form: (verb, kind) for verb in verbs for form in _write_forms(verb)}


# Built once; stricter kinds overwrite a colliding spelling of a looser one.
_VOCABULARY = {
    **{verb: (verb, Idempotency.IDEMPOTENT) for verb in READ_VERBS},
    **_vocabulary(CONVERGING_VERBS, Idempotency.CONDITIONAL),
    **_vocabulary(WRITE_VERBS, Idempotency.NON_IDEMPOTENT),
}


@dataclass(frozen=True)
class _Signal:
    idempotency: Idempotency
    says: str


def _name_signals(name: str) -> list[_Signal]:
    found = []
    for word in words(name):
        if word in _VOCABULARY:
            verb, kind = _VOCABULARY[word]
            shown = f"`{word}`" if word == verb else f"`{word}` ({verb})"
            found.append(_Signal(kind, f"name word {shown}"))
    return found


def _description_signal(description: str) -> _Signal | None:
    """The description's leading verb ("Creates an issue…"), by convention its first word."""
    first = next(iter(words(description)), "")
    for candidate in (first, first.removesuffix("s"), first.removesuffix("es")):
        if candidate in _VOCABULARY and _VOCABULARY[candidate][0] == candidate:
            return _Signal(_VOCABULARY[candidate][1], f"description starts with `{first}`")
    return None


def _schema_signal(name: str, input_schema: Mapping[str, Any]) -> _Signal | None:
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    compact_name = "".join(words(name))
    for argument in properties:
        compact = "".join(words(str(argument)))
        if compact in SIDE_EFFECT_ARGUMENTS and compact not in compact_name:
            return _Signal(Idempotency.NON_IDEMPOTENT, f"takes the argument `{argument}`")
    return None


def _from_words(name: str, description: str, input_schema: Mapping[str, Any]) -> ToolVerdict:
    signals = _name_signals(name)
    for extra in (_description_signal(description), _schema_signal(name, input_schema)):
        if extra is not None:
            signals.append(extra)
    if not signals:
        return _verdict(
            Idempotency.NON_IDEMPOTENT,
            f"no read or write verb in the name `{name}` or its description: assumed to have"
            " side effects until the operator pins it",
            Source.DEFAULT,
        )
    worst = max(s.idempotency for s in signals)
    deciding = [s.says for s in signals if s.idempotency == worst]
    overruled = [s.says for s in signals if s.idempotency != worst]
    reason = f"{worst.value}: " + ", ".join(deciding)
    if overruled:
        reason += "; the stricter reading wins over " + ", ".join(overruled)
    return _verdict(worst, reason, Source.NAME)


def _from_hints(hints: ToolHints) -> ToolVerdict | None:
    """A trusted server's own statement, or None when it states nothing about effects."""
    # destructiveHint contradicts readOnlyHint when both are set; the stricter claim is kept.
    if hints.read_only and not hints.destructive:
        idempotency = Idempotency.IDEMPOTENT
    elif hints.idempotent:
        # A write with no additional effect when repeated: the same state, like `set`.
        idempotency = Idempotency.CONDITIONAL
    elif hints.read_only is False or hints.destructive or hints.idempotent is False:
        idempotency = Idempotency.NON_IDEMPOTENT
    else:
        return None
    return _verdict(
        idempotency,
        f"{idempotency.value}: trusted server's annotations ({hints.stated()})",
        Source.ANNOTATIONS,
    )


def _verdict(idempotency: Idempotency, reason: str, source: Source) -> ToolVerdict:
    return ToolVerdict(idempotency, _DEFAULT_POLICY[idempotency], reason, source)


def classify_tool(
    name: str,
    description: str,
    input_schema: Mapping[str, Any],
    hints: ToolHints | None,
    *,
    trusted: bool,
    pin: ToolPin | None = None,
) -> ToolVerdict:
    """The verdict for one tool of one server (see the module docstring for the order)."""
    heard = _from_hints(hints) if hints is not None and trusted else None
    verdict = heard or _from_words(name, description, input_schema)
    notes = []
    if hints is not None and not trusted and hints.stated():
        notes.append(f"ignored hint from an untrusted server: {hints.stated()}")
    if pin is not None and (pin.idempotency or pin.replay_policy):
        idempotency = pin.idempotency or verdict.idempotency
        policy = pin.replay_policy or _DEFAULT_POLICY[idempotency]
        pinned = "/".join(v.value for v in (pin.idempotency, pin.replay_policy) if v is not None)
        notes.insert(0, f"without the pin: {verdict.reason}")
        verdict = ToolVerdict(
            idempotency,
            policy,
            f"{idempotency.value}/{policy.value}: pinned by the operator ({pinned})",
            Source.PIN,
        )
    approval = pin.approval if pin is not None and pin.approval is not None else False
    reason = "; ".join([verdict.reason, *notes])
    return ToolVerdict(verdict.idempotency, verdict.replay_policy, reason, verdict.source, approval)
