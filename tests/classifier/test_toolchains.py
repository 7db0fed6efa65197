"""Toolchains: which directories join the sandbox's PATH, and when the rules may trust a
program found in one inside a workspace (a venv the operator named, matching its RECORD as
read at start). Each attack is one an agent with the file tools could make."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from shellward.types import ReplayPolicy, Verdict
from shellwardd.classifier import Classifier, load_rules
from shellwardd.classifier.toolchains import Toolchains, build_toolchains

LINT = "#!/usr/bin/python3\nfrom linter import main\nmain()\n"
MODULE = "def main():\n    print('linted')\n"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _record(site: Path, files: dict[str, str]) -> Path:
    record = site / "linter-1.0.dist-info" / "RECORD"
    record.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{name},{_digest(text.encode())},{len(text)}" for name, text in files.items()]
    record.write_text("\n".join([*rows, "linter-1.0.dist-info/RECORD,,"]) + "\n")
    return record


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace whose .venv holds `flake8` (a rule that replays automatically), installed
    by the package `linter` with its RECORD, and the venv's `python` link."""
    root = tmp_path / "ws"
    venv = root / ".venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "linter").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "linter" / "__init__.py").write_text(MODULE)
    script = venv / "bin" / "flake8"
    script.write_text(LINT)
    script.chmod(0o755)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    _record(site, {"../../../bin/flake8": LINT, "linter/__init__.py": MODULE})
    return root


def _toolchains(workspace: Path, *, named: bool) -> Toolchains:
    operator = [workspace / ".venv" / "bin"] if named else []
    return build_toolchains(
        operator, [workspace], auto=not named, home=workspace / "nohome", reaches=lambda p: True
    )


def _classify(toolchains: Toolchains, workspace: Path, command: str = "flake8 src") -> Verdict:
    classifier = Classifier(load_rules(), toolchains)
    return classifier.classify(command, cwd=str(workspace), workspace=str(workspace))


def test_a_named_venv_program_that_matches_its_record_keeps_its_rule(workspace: Path) -> None:
    verdict = _classify(_toolchains(workspace, named=True), workspace)
    assert verdict.replay_policy is ReplayPolicy.AUTO, verdict.reason
    assert verdict.parts[0].resolved_program == str(workspace / ".venv" / "bin" / "flake8")


def test_a_found_venv_is_on_path_but_never_trusted(workspace: Path) -> None:
    toolchains = _toolchains(workspace, named=False)
    assert [t.path for t in toolchains.for_workspace(str(workspace))] == [
        str(workspace / ".venv" / "bin")
    ]
    verdict = _classify(toolchains, workspace)
    assert verdict.replay_policy is ReplayPolicy.NEVER
    assert "--toolchain" in verdict.reason


def _rewrite_script(workspace: Path) -> None:
    (workspace / ".venv" / "bin" / "flake8").write_text("#!/bin/sh\nrm -rf ~\n")


def _rewrite_script_and_record(workspace: Path) -> None:
    evil = "#!/bin/sh\nrm -rf ~\n"
    (workspace / ".venv" / "bin" / "flake8").write_text(evil)
    _record(
        workspace / ".venv" / "lib" / "python3.11" / "site-packages",
        {"../../../bin/flake8": evil, "linter/__init__.py": MODULE},
    )


def _symlink_to_a_workspace_script(workspace: Path) -> None:
    evil = workspace / "evil.sh"
    evil.write_text("#!/bin/sh\nrm -rf ~\n")
    evil.chmod(0o755)
    script = workspace / ".venv" / "bin" / "flake8"
    script.unlink()
    script.symlink_to(evil)


def _edit_the_package(workspace: Path) -> None:
    module = workspace / ".venv" / "lib" / "python3.11" / "site-packages" / "linter"
    (module / "__init__.py").write_text("import os\ndef main():\n    os.system('rm -rf ~')\n")


@pytest.mark.parametrize(
    "attack",
    [
        _rewrite_script,
        _rewrite_script_and_record,
        _symlink_to_a_workspace_script,
        _edit_the_package,
    ],
)
def test_a_rewritten_venv_program_loses_its_rule(
    workspace: Path, attack: Callable[[Path], None]
) -> None:
    toolchains = _toolchains(workspace, named=True)  # pinned before the attack
    attack(workspace)
    verdict = _classify(toolchains, workspace)
    assert verdict.replay_policy is ReplayPolicy.NEVER, verdict.reason
    assert "toolchain inside a workspace" in verdict.reason


def test_a_record_rewritten_before_start_cannot_vouch_for_a_new_program(workspace: Path) -> None:
    # RECORD is read at start, but what it lists must still match: a planted name it does
    # not list stays untrusted, and so does one whose bytes differ from the listed hash.
    planted = workspace / ".venv" / "bin" / "pylint"
    planted.write_text("#!/bin/sh\nrm -rf ~\n")
    planted.chmod(0o755)
    toolchains = _toolchains(workspace, named=True)
    verdict = _classify(toolchains, workspace, "pylint src")
    assert verdict.replay_policy is ReplayPolicy.NEVER
    assert "RECORD" in verdict.reason


def test_the_venv_python_link_is_trusted_while_it_points_where_it_did(workspace: Path) -> None:
    toolchains = _toolchains(workspace, named=True)
    system = Classifier(load_rules()).classify("python -m pytest", cwd=str(workspace))
    linked = _classify(toolchains, workspace, "python -m pytest")
    assert linked.replay_policy is system.replay_policy is ReplayPolicy.ASK, linked.reason
    python = workspace / ".venv" / "bin" / "python"
    python.unlink()
    python.symlink_to("/bin/rm")
    moved = _classify(toolchains, workspace, "python -m pytest")
    assert moved.replay_policy is ReplayPolicy.NEVER and "/bin/rm" not in moved.reason


def test_node_modules_bin_is_never_trusted_even_when_named(workspace: Path) -> None:
    bin_dir = workspace / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    tool = bin_dir / "eslint"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    toolchains = build_toolchains(
        [bin_dir], [workspace], auto=True, home=workspace, reaches=lambda p: True
    )
    verdict = _classify(toolchains, workspace, "eslint src")
    assert verdict.replay_policy is ReplayPolicy.NEVER
    assert "RECORD" in verdict.reason


def test_a_symlinked_workspace_venv_is_not_put_on_path(workspace: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "bin"
    elsewhere.mkdir(parents=True)
    (workspace / "venv").symlink_to(elsewhere.parent)
    (workspace / "node_modules").mkdir()
    (workspace / "node_modules" / ".bin").symlink_to(elsewhere)
    found = _toolchains(workspace, named=False).for_workspace(str(workspace))
    assert [t.path for t in found] == [str(workspace / ".venv" / "bin")]


def test_user_toolchains_follow_the_workspace_and_unreachable_ones_are_said(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    nodes = [f".nvm/versions/node/v{v}/bin" for v in ("20.1.0", "20.11.2", "22.3.0")]
    for relative in (".cargo/bin", ".local/bin", ".pyenv/shims", *nodes):
        (home / relative).mkdir(parents=True)
    (home / ".nvm" / "alias").mkdir()
    (home / ".nvm" / "alias" / "default").write_text("20\n")
    workspace = tmp_path / "ws"
    (workspace / ".venv" / "bin").mkdir(parents=True)
    toolchains = build_toolchains(
        [], [workspace], auto=True, home=home, reaches=lambda p: ".local" not in str(p)
    )
    paths = [t.path for t in toolchains.for_workspace(str(workspace))]
    assert paths == [
        str(workspace / ".venv" / "bin"),
        str(home / ".pyenv" / "shims"),
        str(home / ".nvm" / "versions" / "node" / "v20.11.2" / "bin"),
        str(home / ".cargo" / "bin"),
        *([] if not os.path.isdir("/usr/local/go/bin") else ["/usr/local/go/bin"]),
    ]
    assert toolchains.skipped == (
        f"{home / '.local' / 'bin'} is left off PATH: the sandbox user cannot reach it",
    )
    (home / ".nvm" / "alias" / "default").write_text("lts/*\n")
    (home / ".nvm" / "alias" / "lts").mkdir()
    (home / ".nvm" / "alias" / "lts" / "*").write_text("lts/iron\n")
    (home / ".nvm" / "alias" / "lts" / "iron").write_text("v20.1.0\n")
    lts = build_toolchains([], [workspace], auto=True, home=home, reaches=lambda p: True)
    assert str(home / ".nvm" / "versions" / "node" / "v20.1.0" / "bin") in [
        t.path for t in lts.user
    ]
    off = build_toolchains([], [workspace], auto=False, home=home, reaches=lambda p: True)
    assert off.for_workspace(str(workspace)) == ()


def test_status_notes_a_venv_python_the_sandbox_user_cannot_reach(workspace: Path) -> None:
    toolchains = _toolchains(workspace, named=False)
    unreachable = toolchains.notes(str(workspace), reaches=lambda p: False)
    assert len(unreachable) == 1 and "python` fails inside" in unreachable[0]
    assert str(Path("/usr/bin/python3").resolve()) in unreachable[0]
    assert toolchains.notes(str(workspace), reaches=lambda p: True) == ()
