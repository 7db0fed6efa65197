"""A repository's git configuration through the real daemon: a clean repo and a poisoned one."""

from __future__ import annotations

import subprocess
from pathlib import Path

from shellward import Client, Idempotency, ReplayPolicy


def test_git_reads_in_a_poisoned_repo_are_never_replayed(client: Client, workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    clean = client.run_command("git status --short", cwd=workspace)
    assert clean.ok and clean.verdict is not None
    assert (
        clean.verdict.replay_policy is ReplayPolicy.AUTO
    )  # as classified (it then wrote .git/index)

    # What an agent (or a cloned repo) can write: git status now runs a program.
    config = workspace / ".git" / "config"
    with config.open("a") as fh:
        fh.write("[core]\n\tfsmonitor = touch pwned-by-fsmonitor\n")
    verdict = client.classify("git status --short", cwd=workspace)
    assert verdict.idempotency is Idempotency.NON_IDEMPOTENT
    assert verdict.replay_policy is ReplayPolicy.NEVER
    assert f"`core.fsmonitor` ({config}:" in verdict.reason
    result = client.run_command("git status --short", cwd=workspace)
    assert result.replay_policy is ReplayPolicy.NEVER
    assert result.verdict is not None and "core.fsmonitor" in result.verdict.reason
    # Other programs in the repo keep their verdicts.
    assert client.classify("ls", cwd=workspace).replay_policy is ReplayPolicy.AUTO
