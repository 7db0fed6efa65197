"""Repository git configuration that turns reads into code (gitconfig.py and the engine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shellwardd.classifier import Classifier
from shellwardd.classifier.gitconfig import git_dir, hazards

from .conftest import AUTO, NEVER, pair


def _repo(root: Path, config: str = "") -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    if config:
        with (root / ".git" / "config").open("a") as fh:
            fh.write(config)
    return root


# Each of these makes a git read run a program; the test fails on the code before the fix,
# which never looked at the repository's configuration.
@pytest.mark.parametrize(
    ("config", "key"),
    [
        ("[core]\n\tfsmonitor = touch pwned\n", "core.fsmonitor"),
        ("[core]\n\tpager = sh -c 'touch pwned'\n", "core.pager"),
        ("[pager]\n\tlog = sh\n", "pager.log"),
        ("[diff]\n\texternal = ./evil\n", "diff.external"),
        ('[diff "bin"]\n\ttextconv = ./evil\n', "diff.bin.textconv"),
        ('[filter "lfs"]\n\tclean = ./evil %f\n', "filter.lfs.clean"),
        ('[Filter "X.y"]\n\tSmudge = ./evil\n', "filter.X.y.smudge"),
        ("[man.x]\n\tcmd = ./evil\n", "man.x.cmd"),
        ("[core]\n\tsshCommand = ./evil\n", "core.sshcommand"),
        ("[gpg]\n\tprogram = ./evil\n", "gpg.program"),
        ("[core] fsmonitor = ./evil\n", "core.fsmonitor"),
        ("[core]\n\tpager = \\\n  ./evil\n", "core.pager"),
    ],
)
def test_a_poisoned_config_makes_git_reads_never(
    tmp_path: Path, clf: Classifier, config: str, key: str
) -> None:
    repo = _repo(tmp_path / "repo", config)
    (repo / "src").mkdir()
    for command in ("git status", "git log -p", "git diff", "git show HEAD"):
        verdict = clf.classify(command, cwd=str(repo / "src"), workspace=str(repo))
        assert pair(verdict) == NEVER, command
        assert f"`{key}` ({repo / '.git' / 'config'}:" in verdict.reason
        assert verdict.parts[0].rule_id == "classifier:git-config"
    # Other programs in the repository are not affected.
    assert pair(clf.classify("ls", cwd=str(repo), workspace=str(repo))) == AUTO


def test_a_clean_repo_keeps_git_reads_auto(tmp_path: Path, clf: Classifier) -> None:
    repo = _repo(
        tmp_path / "repo",
        '[core]\n\tfsmonitor = false\n[remote "origin"]\n\turl = https://x/y.git\n'
        "[alias]\n\tst = status\n",
    )
    for command in ("git status", "git log -p", "git diff"):
        assert pair(clf.classify(command, cwd=str(repo), workspace=str(repo))) == AUTO


def test_included_files_are_followed_whatever_their_condition(
    tmp_path: Path, clf: Classifier
) -> None:
    repo = _repo(
        tmp_path / "repo",
        '[includeIf "gitdir:/nowhere/"]\n\tpath = ../extra.cfg\n',
    )
    (repo / "extra.cfg").write_text("[include]\n\tpath = more.cfg\n")
    (repo / "more.cfg").write_text('[diff "x"]\n\tcommand = ./evil\n')
    verdict = clf.classify("git diff", cwd=str(repo), workspace=str(repo))
    assert pair(verdict) == NEVER and f"`diff.x.command` ({repo / 'more.cfg'}:2)" in verdict.reason


def test_includes_that_loop_or_lines_git_cannot_read_fail_closed(tmp_path: Path) -> None:
    looping = _repo(tmp_path / "a", "[include]\n\tpath = config\n")
    (found,) = hazards(looping / ".git")
    assert found.key == "" and "nested" in found.note
    broken = _repo(tmp_path / "b", "[core\n")
    (found,) = hazards(broken / ".git")
    assert found.key == "" and found.where.startswith(f"{broken / '.git' / 'config'}:")


def test_a_post_index_change_hook_runs_on_status(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    hook = repo / ".git" / "hooks" / "post-index-change"
    hook.write_text("#!/bin/sh\ntouch pwned\n")
    hook.chmod(0o755)
    assert [h.key for h in hazards(repo / ".git")] == ["hooks/post-index-change"]


def test_a_worktree_reads_the_common_config(tmp_path: Path, clf: Classifier) -> None:
    main = _repo(tmp_path / "main", "[core]\n\tpager = ./evil\n")
    subprocess.run(
        ["git", "-C", str(main), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
         "--allow-empty", "-m", "x"],
        check=True,
    )  # fmt: skip
    subprocess.run(
        ["git", "-C", str(main), "worktree", "add", "-q", str(tmp_path / "wt")], check=True
    )
    directory = git_dir(str(tmp_path / "wt"))
    assert directory is not None and directory.name == "wt"
    verdict = clf.classify("git status", cwd=str(tmp_path / "wt"), workspace=str(tmp_path))
    assert pair(verdict) == NEVER and "`core.pager`" in verdict.reason


def test_git_pointed_at_another_repo_reads_that_config(tmp_path: Path, clf: Classifier) -> None:
    clean = _repo(tmp_path / "clean")
    _repo(tmp_path / "bad", "[core]\n\tfsmonitor = ./evil\n")
    ws = str(tmp_path)
    assert pair(clf.classify("git -C ../bad status", cwd=str(clean), workspace=ws)) == NEVER
    assert pair(clf.classify("git --git-dir=../bad/.git log", cwd=str(clean), workspace=ws)) == (
        NEVER
    )
    assert pair(clf.classify('git -C "$D" status', cwd=str(clean), workspace=ws)) == NEVER
    assert pair(clf.classify("git -C ../clean status", cwd=str(clean), workspace=ws)) == AUTO


def test_a_fifo_or_huge_config_fails_closed_without_blocking(tmp_path: Path) -> None:
    fifo = _repo(tmp_path / "fifo")
    (fifo / ".git" / "config").unlink()
    os.mkfifo(fifo / ".git" / "config")
    (found,) = hazards(fifo / ".git")  # returns: the FIFO is never read
    assert found.key == "" and found.note == "not a regular file"
    huge = _repo(tmp_path / "huge")
    with (huge / ".git" / "config").open("a") as fh:
        fh.write("# padding\n" * 200_000)
    (found,) = hazards(huge / ".git")
    assert "larger than" in found.note
