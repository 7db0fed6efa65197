"""The Classifier: a command string in, a Verdict out. Pure but for two reads of the
workspace (a module shadowed for `python -m`, the repository's git configuration); never
raises except ValueError for input that holds no command at all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from shellward.types import CommandPart, Idempotency, ReplayPolicy, Verdict

from .engine import RANK, Analyzer
from .parse import is_blank
from .ruleset import RepoRules, RuleIndex, RuleSet
from .toolchains import NO_TOOLCHAINS, Toolchain, Toolchains

# Longer input is refused (fail closed) rather than handed to a parser of unknown cost.
MAX_COMMAND_CHARS = 65536


class Classifier:
    """Classifies commands with one RuleSet; safe to share between threads."""

    def __init__(self, rules: RuleSet, toolchains: Toolchains = NO_TOOLCHAINS) -> None:
        self.rules = rules
        self.toolchains = toolchains

    def classify(
        self,
        command: str,
        *,
        cwd: str | None = None,
        workspace: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Verdict:
        """``env`` is the request's environment: bash and every program it starts see it, so
        it is judged like assignments before every command."""
        if is_blank(command):
            raise ValueError(
                "the command is empty (only whitespace or comments): give a shell command to run"
            )
        scope = self.rules.for_directory(cwd if cwd is not None else workspace)
        verdict = classify_with(
            command,
            scope.index,
            scope.constraints,
            cwd=cwd,
            workspace=workspace,
            env=env or {},
            toolchains=self.toolchains.for_workspace(workspace),
        )
        if scope.broken is None:
            return verdict
        return _verdict(command, [_fail_closed(part, scope.broken) for part in verdict.parts])


def _fail_closed(part: CommandPart, repo: RepoRules) -> CommandPart:
    """A part in a repo whose rule file is broken: never replayed, but with the network and
    approval flags the layers below gave it (a broken file must not lower them)."""
    return replace(
        part,
        idempotency=Idempotency.NON_IDEMPOTENT,
        replay_policy=ReplayPolicy.NEVER,
        reason=f"is in {repo.root}, whose rule file is broken ({repo.problem}); fix it "
        "(`shellward rules check`), then reload the rules",
        rule_id="classifier:repo-rules",
    )


def classify_with(
    command: str,
    index: RuleIndex,
    constraints: RuleIndex | None,
    *,
    cwd: str | None,
    workspace: str | None,
    env: Mapping[str, str] = MappingProxyType({}),
    toolchains: Sequence[Toolchain] = (),
) -> Verdict:
    """Classify ``command`` (not blank) with explicit rule indexes."""
    everything = (0, len(command))
    analyzer = Analyzer(
        index, constraints, cwd, workspace, source=command, toolchains=tuple(toolchains)
    )
    if len(command) > MAX_COMMAND_CHARS:
        analyzer.fail(everything, "", f"the command is longer than {MAX_COMMAND_CHARS} characters")
    else:
        try:
            analyzer.request_env(env, everything)
            analyzer.code(command, "", 0, everything, 0)
        except Exception as exc:  # the safety core must answer; a bug here means "never"
            analyzer.fail(
                everything,
                "",
                f"the classifier failed ({type(exc).__name__}: {exc}); treated as unsafe",
            )
    return _verdict(command, analyzer.parts)


def _verdict(command: str, parts: list[CommandPart]) -> Verdict:
    deciding = max(
        range(len(parts)),
        key=lambda n: (RANK[parts[n].replay_policy], RANK[parts[n].idempotency], -n),
    )
    idempotency = max((p.idempotency for p in parts), key=RANK.__getitem__)
    replay = parts[deciding].replay_policy
    part = parts[deciding]
    where = f" (in {part.context})" if part.context else ""
    of = f"; worst of {len(parts)} parts" if len(parts) > 1 else ""
    reason = (
        f"`{_snippet(command, part.span)}`{where} {part.reason}: {idempotency.value}, "
        f"{_replay_words(replay)}{of}"
    )
    return Verdict(
        idempotency=idempotency,
        replay_policy=replay,
        reason=reason,
        needs_network=any(p.needs_network for p in parts),
        needs_approval=any(p.needs_approval for p in parts),
        parts=tuple(parts),
        deciding_part=deciding,
        destinations=tuple(dict.fromkeys(d for p in parts for d in p.destinations)),
    )


def _replay_words(replay: ReplayPolicy) -> str:
    return {
        ReplayPolicy.AUTO: "safe to replay automatically",
        ReplayPolicy.ASK: "ask before replaying",
        ReplayPolicy.NEVER: "never replay",
    }[replay]


def _snippet(command: str, span: tuple[int, int], limit: int = 60) -> str:
    text = " ".join(command[span[0] : span[1]].split()) or " ".join(command.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
