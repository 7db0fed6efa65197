"""Programs that run a file from the workspace named like something harmless (class 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellwardd.classifier import Classifier

from .conftest import ASK, AUTO, NEVER, pair


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A hostile workspace: modules named like the standard library's and tools."""
    (tmp_path / "json.tool").write_text("import os; os.system('curl -X POST …')\n")
    (tmp_path / "json.py").write_text("import os\n")
    (tmp_path / "pytest").mkdir()
    (tmp_path / "pytest" / "__init__.py").write_text("import os\n")
    (tmp_path / "pip").mkdir()
    (tmp_path / "pip" / "__main__.py").write_text("import os\n")
    (tmp_path / "src" / "platform.cpython-311-x86_64-linux-gnu.so").parent.mkdir()
    (tmp_path / "src" / "platform.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    return tmp_path


# Each of these was idempotent/auto (or ask) and ran the workspace's file.
@pytest.mark.parametrize(
    "command",
    [
        "python3 json.tool",  # the file ./json.tool, not the module
        "python3 -W ignore json.tool data.json",
        "python3 -m json.tool data.json",  # ./json.py shadows the stdlib package
        "python3 -mjson.tool data.json",
        "python3.12 -m json.tool data.json",
        "python3 -m pytest -x",  # ./pytest/ shadows the installed pytest
        "python3 -m pip list",  # no __init__, but ./pip/__main__.py runs where pip is missing
        "cd src && python3 -m platform",  # the directory `cd` went to is searched too
        "python3 -mhttp.server 8000",  # -m attached: the module is still found
        "python3 -mmymodule",
        "cd $DIR && python3 -m json.tool data.json",
    ],
)
def test_workspace_code_is_never_replayed(clf: Classifier, repo: Path, command: str) -> None:
    verdict = clf.classify(command, cwd=str(repo), workspace=str(repo))
    assert pair(verdict) == NEVER, verdict.reason


def test_the_module_itself_keeps_its_verdict(clf: Classifier, tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text("{}")
    # Not importable, so not shadowing: data named like a module, a directory without
    # __init__ (a namespace portion, which the standard library's package wins over).
    (tmp_path / "json.txt").write_text("{}")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "a.json").write_text("{}")
    (tmp_path / "pytest").mkdir()
    ws = str(tmp_path)
    assert pair(clf.classify("python3 -m json.tool data.json", cwd=ws, workspace=ws)) == AUTO
    assert pair(clf.classify("python3 -m pytest -x", cwd=ws, workspace=ws)) == ASK
    assert pair(clf.classify("cd src && python3 -m pytest", cwd=ws, workspace=ws)) == ASK
    # Where nothing shadows, `-m json.tool IN OUT` still writes OUT.
    assert pair(clf.classify("python3 -m json.tool a.json b.json", cwd=ws, workspace=ws)) == ASK


@pytest.mark.parametrize(
    "command",
    [
        ".venv/bin/python -m pytest",
        ".venv/bin/pytest",
        "./bin/tool --version",
        "bin/rg foo",
        "node_modules/.bin/eslint .",
        "source .venv/bin/activate && pytest",
    ],
)
def test_executables_inside_the_workspace_are_never_trusted(
    clf: Classifier, repo: Path, command: str
) -> None:
    assert pair(clf.classify(command, cwd=str(repo), workspace=str(repo))) == NEVER
