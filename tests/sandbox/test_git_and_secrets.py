"""A hostile repository's persistence channel (.git) and the secrets a command must not read."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellwardd.config import DEFAULT_HIDDEN, Limits
from shellwardd.sandbox import ProcessOutcome, Sandbox, SandboxSpec

GIT_ENV = {
    "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@x", "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def run(box: Sandbox, workspace: Path, command: str) -> ProcessOutcome:
    spec = SandboxSpec(command, workspace, workspace, GIT_ENV, None, 30.0, Limits(), 1 << 20)
    return box.run(spec, lambda chunk: None, threading.Event())


def make_box(request: pytest.FixtureRequest, **kwargs: object) -> Sandbox:
    box = Sandbox(**kwargs)  # type: ignore[arg-type]
    box.check()
    request.addfinalizer(box.close)
    return box


@pytest.fixture
def repo(workspace: Path) -> Iterator[Path]:
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", str(workspace)], check=True, env=env)
    (workspace / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(workspace), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(workspace), "commit", "-qm", "one"], check=True, env=env)
    yield workspace


@pytest.mark.parametrize(
    "attack",
    [
        "echo 'touch /tmp/pwned' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout",
        "git config core.fsmonitor 'touch /tmp/pwned'",
        "echo '[core]' >> .git/config && echo 'pager = touch /tmp/pwned' >> .git/config",
        "rm -rf .git/hooks && mkdir .git/hooks && echo x > .git/hooks/pre-commit",
        # Swap the whole .git for a copy whose config is writable.
        "cp -r .git /tmp/g && mv .git .git-old && mv /tmp/g .git"
        " && git config core.fsmonitor 'touch /tmp/pwned'",
    ],
)
def test_git_hooks_and_config_are_read_only(
    request: pytest.FixtureRequest, repo: Path, attack: str
) -> None:
    config_before = (repo / ".git" / "config").read_text()
    outcome = run(make_box(request), repo, attack)
    assert outcome.exit_code != 0
    assert (repo / ".git" / "config").read_text() == config_before
    assert not [p for p in (repo / ".git" / "hooks").iterdir() if not p.name.endswith(".sample")]
    assert not (repo / ".git-old").exists()


def test_git_commit_still_works(request: pytest.FixtureRequest, repo: Path) -> None:
    outcome = run(
        make_box(request),
        repo,
        "echo b > b.txt && git add b.txt && git commit -qm two && git log --oneline | wc -l",
    )
    assert outcome.exit_code == 0, outcome.stderr.text
    assert outcome.stdout.text.strip() == "2"


def test_operator_may_allow_git_writes(request: pytest.FixtureRequest, repo: Path) -> None:
    outcome = run(make_box(request, git_writable=True), repo, "git config shellward.test yes")
    assert outcome.exit_code == 0, outcome.stderr.text
    assert "shellward" in (repo / ".git" / "config").read_text()


def test_default_hidden_set_hides_tool_credentials(
    request: pytest.FixtureRequest, workspace: Path, host_dir: Path
) -> None:
    home = host_dir / "home"
    secrets = {
        ".claude/.credentials.json": "claude-secret",
        ".codex/auth.json": "codex-secret",
        ".config/gh/hosts.yml": "gh-secret",
        ".config/acme-token": "glob-secret",
        ".docker/config.json": "docker-secret",
        ".npmrc": "npm-secret",
        ".config/acme/key": "configured-secret",
    }
    for name, text in secrets.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (home / ".config" / "editor.toml").write_text("not-a-secret")
    box = make_box(request, home=home, hidden=(*DEFAULT_HIDDEN, ".config/acme"))
    paths = " ".join(str(home / name) for name in [*secrets, ".config/editor.toml"])
    outcome = run(box, workspace, f"cat {paths} 2>/dev/null")
    assert "secret" not in outcome.stdout.text.replace("not-a-secret", "")
    assert "not-a-secret" in outcome.stdout.text


def test_symlinked_secret_is_hidden_and_a_dangling_one_breaks_nothing(
    request: pytest.FixtureRequest, workspace: Path, host_dir: Path
) -> None:
    home = host_dir / "home"
    (home / "dotfiles").mkdir(parents=True)
    (home / "dotfiles" / "pypirc").write_text("pypi-secret")
    (home / ".pypirc").symlink_to(home / "dotfiles" / "pypirc")
    (home / ".npmrc").symlink_to(home / "gone")  # dangling: bwrap cannot mount over it
    box = make_box(request, home=home)
    outcome = run(box, workspace, f"cat {home}/.pypirc {home}/dotfiles/pypirc; echo ran")
    assert outcome.started and "ran" in outcome.stdout.text, outcome.sandbox_error
    assert "pypi-secret" not in outcome.stdout.text


def test_missing_hooks_directory_cannot_be_created_inside(
    request: pytest.FixtureRequest, repo: Path
) -> None:
    hooks = repo / ".git" / "hooks"
    shutil.rmtree(hooks)
    outcome = run(make_box(request), repo, "mkdir -p .git/hooks; echo x > .git/hooks/pre-commit")
    assert outcome.exit_code != 0
    assert hooks.is_dir() and not list(hooks.iterdir())
    assert hooks.stat().st_uid == (repo / ".git").stat().st_uid
