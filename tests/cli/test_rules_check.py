"""`shellward rules check`, answered by the daemon with the trust it gives each file.

The attacks: a cloned repository whose `.shellward/rules.toml` declares `rm` idempotent and
auto-replayable (with an example saying so) must not be reported ok, because the daemon
refuses it; the same file in a repository the operator trusts is ok. A draft is checked as
the workspace it lies in would load it, and files outside the workspaces are not read.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shellward import RuleLayer
from shellward.cli import main
from tests.cli.conftest import Outcome
from tests.helpers import Daemon, start_daemon

GOOD_RULES = """\
[[rule]]
id = "frobnicate-list"
program = "frobnicate"
subcommand = "list"
idempotency = "idempotent"
replay = "auto"
reason = "frobnicate list only prints the frobs"
match = ["frobnicate list --all"]
"""

FAILING_EXAMPLE = GOOD_RULES.replace(
    'match = ["frobnicate list --all"]', 'match = ["frobnicate list", "frobnicate delete x"]'
)

# What a hostile repository would ship: `rm` made replayable, with an example to prove it.
RM_AUTO = """\
[[rule]]
id = "rm"
program = "rm"
idempotency = "idempotent"
replay = "auto"
reason = "deletes files, but this repo says it is fine"
match = ["rm -rf build"]
"""


@dataclass(frozen=True)
class Setup:
    daemon: Daemon
    user_file: Path
    cloned: Path  # a workspace the daemon does not trust
    ours: Path  # a workspace passed as --trusted-repo
    elsewhere: Path  # outside every workspace


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("rules-check")
    cloned, ours, elsewhere = root / "cloned", root / "ours", root / "elsewhere"
    for directory in (cloned, ours, elsewhere):
        directory.mkdir()
    user_file = _write(root / "config" / "rules.toml", GOOD_RULES)
    daemon = start_daemon(
        root / "run" / "shellward.sock", root / "state", cloned,
        "--workspace", str(ours), "--trusted-repo", str(ours), "--user-rules", str(user_file),
    )  # fmt: skip
    yield Setup(daemon, user_file, cloned, ours, elsewhere)
    daemon.stop(signal.SIGKILL if daemon.process.poll() is None else signal.SIGTERM)


@pytest.fixture
def check(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Outcome]]:
    """`shellward rules check ARGS… --socket S` (connection after the command), from the
    untrusted workspace; every repository file it writes is removed afterwards."""
    monkeypatch.chdir(setup.cloned)
    written = [ws / ".shellward" / "rules.toml" for ws in (setup.cloned, setup.ours)]

    def run(*args: str) -> Outcome:
        capsys.readouterr()
        code = main(["rules", "check", *args, "--socket", str(setup.daemon.socket)])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    yield run
    for path in written:
        path.unlink(missing_ok=True)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_an_untrusted_repository_cannot_get_ok_for_loosening_rm(
    check: Callable[..., Outcome], setup: Setup
) -> None:
    repo_file = _write(setup.cloned / ".shellward" / "rules.toml", RM_AUTO)
    outcome = check(".shellward/rules.toml")
    assert outcome.code == 1, outcome.out
    assert outcome.out.startswith(f"{repo_file}:"), outcome.out
    assert "not trusted" in outcome.out and "ok:" not in outcome.out
    assert "1 problem(s)" in outcome.err


def test_the_same_file_in_a_trusted_repository_is_ok(
    check: Callable[..., Outcome], setup: Setup
) -> None:
    repo_file = _write(setup.ours / ".shellward" / "rules.toml", RM_AUTO)
    outcome = check(str(repo_file))
    assert outcome.code == 0, outcome.out
    assert outcome.out == f"ok: {repo_file} (trusted repository)\n"


def test_a_draft_is_checked_with_its_workspace_trust_and_named(
    check: Callable[..., Outcome], setup: Setup
) -> None:
    draft = _write(setup.cloned / "drafts" / "rules.toml", RM_AUTO)
    loosening = check("drafts/rules.toml")
    assert loosening.code == 1
    assert loosening.out.startswith(f"{draft}:1: rule `rm` says idempotent/auto")
    assert "not trusted" in loosening.out
    assert "shellward-rules-check" not in loosening.out  # the stand-in copy is never named
    stricter = _write(setup.cloned / "drafts" / "strict.toml", GOOD_RULES.replace(
        '"idempotent"', '"non_idempotent"').replace('"auto"', '"never"'))  # fmt: skip
    outcome = check(str(stricter))
    assert outcome.code == 0, outcome.out
    assert outcome.out == f"ok: {stricter} (repository)\n"


def test_failing_examples_bad_toml_and_missing_files_are_problems(
    check: Callable[..., Outcome], setup: Setup
) -> None:
    broken = _write(setup.ours / "broken.toml", FAILING_EXAMPLE)
    bad = _write(setup.ours / "bad.toml", "[[rule]\nprogram = \n")
    good = _write(setup.ours / "good.toml", GOOD_RULES)
    absent = setup.ours / "absent.toml"
    outcome = check(str(broken), str(bad), str(good), str(absent))
    assert outcome.code == 1
    lines = outcome.out.splitlines()
    assert lines[0].startswith(f"{broken}:8: ") and "frobnicate delete x" in lines[0]
    assert lines[1].startswith(f"{bad}:1: invalid TOML")
    assert lines[2] == f"ok: {good} (trusted repository)"
    assert lines[3] == f"{absent}: no such file"
    assert "3 problem(s)" in outcome.err


def test_files_outside_the_workspaces_are_not_read(
    check: Callable[..., Outcome], setup: Setup
) -> None:
    outside = _write(setup.elsewhere / "rules.toml", GOOD_RULES)
    outcome = check(str(outside))
    assert outcome.code == 1
    assert outcome.out.startswith(f"{outside}: the daemon does not read this file")
    # A link inside a workspace that points out of it is outside too.
    link = setup.cloned / "escape.toml"
    link.symlink_to(outside)
    try:
        escaped = check(str(link))
    finally:
        link.unlink()
    assert escaped.code == 1
    assert escaped.out.startswith(f"{link}: the daemon does not read this file")


def test_without_files_every_file_the_daemon_loads(
    check: Callable[..., Outcome], setup: Setup
) -> None:
    clean = check()
    assert clean.code == 0, clean.out
    assert clean.out.splitlines() == [
        "ok: built-in rules (builtin)",
        f"ok: {setup.user_file} (user)",
    ]
    repo_file = _write(setup.cloned / ".shellward" / "rules.toml", RM_AUTO)
    broken = check("--json")
    assert broken.code == 1
    answer = json.loads(broken.out)
    assert [(f["path"], f["layer"]) for f in answer] == [
        ("built-in rules", RuleLayer.BUILTIN.value),
        (str(setup.user_file), RuleLayer.USER.value),
        (str(repo_file), RuleLayer.REPOSITORY.value),
    ]
    assert answer[2]["problems"][0].startswith(f"{repo_file}:1: rule `rm`")
