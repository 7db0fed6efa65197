"""Rule files: format errors with file:line, examples checked at load, layering and trust."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellwardd.classifier import Classifier, RuleFileError, check_rule_file, load_rules

from .conftest import ASK, AUTO, NEVER, pair

RM_AUTO = """\
[[rule]]
id = "rm"
program = "rm"
idempotency = "idempotent"
replay = "auto"
reason = "deletes files, but this repo says it is fine"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def error(path: Path) -> RuleFileError:
    with pytest.raises(RuleFileError) as info:
        load_rules(user_file=path)
    err = info.value
    assert str(err) == f"{err.path}:{err.line}: {err.message}"
    assert err.path == str(path)
    return err


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[[rule]]\nprogram = \n", 2, "invalid TOML"),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'idempotent'\nreplay = 'auto'\n"
            "reason = 'r'\ncolour = 'red'\n",
            6,
            "unknown field `colour`",
        ),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'maybe'\nreplay = 'auto'\nreason = 'r'\n",
            3,
            "invalid `idempotency` 'maybe'",
        ),
        ("[[rule]]\nprogram = 'x'\nreplay = 'auto'\nreason = 'r'\n", 1, "missing `idempotency`"),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'idempotent'\nreplay = 'auto'\n",
            1,
            "missing `reason`",
        ),
        (
            "[[rule]]\nprogram = 3\nidempotency = 'idempotent'\nreplay = 'auto'\nreason = 'r'\n",
            2,
            "expected str or list (got int)",
        ),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'idempotent'\nreplay = 'auto'\nreason = 'r'\n"
            "wrap_skip = true\n",
            6,
            "expected int (got bool)",
        ),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'never'\nreplay = 'auto'\nreason = 'r'\n",
            3,
            "use one of",
        ),
        ("version = 1\n", 1, "unknown top-level key `version`"),
        ("rule = [{program = 'x'}]\n", 1, "write each rule as its own `[[rule]]`"),
        (
            "\n\n[[rule]]\nprogram = 'rm'\nidempotency = 'non_idempotent'\nreplay = 'never'\n"
            "reason = 'r'\nwhen = [\n"
            "  { flags = ['-f'], idempotency = 'idempotent', reason = 'x' },\n]\n",
            8,
            "may only make the verdict stricter",
        ),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'idempotent'\nreplay = 'auto'\nreason = 'r'\n"
            "when = [{ reason = 'no criterion' }]\n",
            6,
            "needs `flags`",
        ),
        (
            "[[rule]]\nprogram = 'x'\nidempotency = 'idempotent'\nreplay = 'auto'\nreason = 'r'\n"
            "when = [{ arg_regex = '(', reason = 'x' }]\n",
            6,
            "invalid `arg_regex`",
        ),
    ],
)
def test_broken_files_are_refused_with_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    err = error(write(tmp_path / "rules.toml", text))
    assert err.line == line
    assert message in err.message


def test_conflicting_rules_are_refused(tmp_path: Path) -> None:
    rule = (
        "[[rule]]\nid = '{id}'\nprogram = ['mytool', 'x']\nidempotency = 'idempotent'\n"
        "replay = 'auto'\nreason = 'r'\n"
    )
    err = error(write(tmp_path / "r.toml", rule.format(id="a") + "\n" + rule.format(id="b")))
    assert err.line == 8
    assert "conflicts with rule `a`" in err.message and "`mytool`" in err.message


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    rule = (
        "[[rule]]\nprogram = 'mytool'\nidempotency = 'idempotent'\nreplay = 'auto'\nreason = 'r'\n"
    )
    second = rule.replace("'mytool'", "'other'\nid = 'mytool'")
    err = error(write(tmp_path / "r.toml", rule + second))
    assert err.line == 6
    assert "duplicate rule id `mytool`" in err.message


def test_a_failing_example_refuses_the_file_naming_line_and_example(tmp_path: Path) -> None:
    text = RM_AUTO.replace('id = "rm"', 'id = "mytool"').replace('"rm"', '"mytool"') + (
        'match = ["mytool a"]\nnot_match = [\n  "mytool b",\n]\n'
    )
    path = write(tmp_path / "r.toml", text)
    err = error(path)
    assert err.line == 9
    assert "example `mytool b` should not be idempotent/auto" in err.message
    assert check_rule_file(path) == [str(err)]


def test_check_rule_file_reports_every_failing_example(tmp_path: Path) -> None:
    text = (
        "[[rule]]\nid = 'tool'\nprogram = 'mytool'\nidempotency = 'idempotent'\nreplay = 'auto'\n"
        "reason = 'r'\nmatch = ['mytool a']\n"
        "when = [\n  { flags = ['--go'], idempotency = 'non_idempotent', replay = 'never',"
        " reason = 'goes', match = ['mytool --stay'] },\n]\nnot_match = ['mytool c']\n"
    )
    problems = check_rule_file(write(tmp_path / "r.toml", text))
    assert len(problems) == 2
    assert problems[0].startswith(f"{tmp_path / 'r.toml'}:11: example `mytool c`")
    assert problems[1].startswith(f"{tmp_path / 'r.toml'}:9: example `mytool --stay`")
    assert check_rule_file(tmp_path / "missing.toml")[0].endswith(
        "No such file or directory: '" + str(tmp_path / "missing.toml") + "'"
    )


def test_builtin_files_check_clean() -> None:
    import importlib.resources

    files = [
        f
        for f in importlib.resources.files("shellwardd.builtin_rules").iterdir()
        if f.name.endswith(".toml")
    ]
    assert len(files) >= 6
    for f in files:
        assert check_rule_file(Path(str(f))) == [], f.name


def test_user_rules_replace_builtins_with_the_same_key(tmp_path: Path) -> None:
    user = write(
        tmp_path / "user.toml",
        "[[rule]]\nid = 'make-test'\nprogram = 'make'\n"
        "subcommand = 'test'\nidempotency = 'idempotent'\nreplay = 'auto'\n"
        "reason = 'runs pure tests'\nmatch = ['make test']\n",
    )
    clf = Classifier(load_rules(user_file=user))
    verdict = clf.classify("make test")
    assert pair(verdict) == AUTO
    assert verdict.parts[0].rule_id == "user:make-test"
    assert pair(clf.classify("make build")) == ASK  # other built-in keys stay


def test_untrusted_repo_cannot_make_rm_auto(tmp_path: Path) -> None:
    repo = tmp_path / "cloned"
    write(repo / ".shellward" / "rules.toml", RM_AUTO)
    clf = Classifier(load_rules(repo_roots=[repo]))
    verdict = clf.classify("rm -rf build", cwd=str(repo / "src"))
    assert pair(verdict) == NEVER
    assert verdict.parts[0].rule_id == "coreutils.toml:rm"


def test_untrusted_repo_examples_that_loosen_are_refused(tmp_path: Path) -> None:
    repo = tmp_path / "cloned"
    write(repo / ".shellward" / "rules.toml", RM_AUTO + 'match = ["rm -rf build"]\n')
    with pytest.raises(RuleFileError, match="not trusted"):
        load_rules(repo_roots=[repo])


def test_untrusted_repo_cannot_make_unknown_programs_known(tmp_path: Path) -> None:
    repo = tmp_path / "cloned"
    write(repo / ".shellward" / "rules.toml", RM_AUTO.replace('"rm"', '"deploy-tool"'))
    clf = Classifier(load_rules(repo_roots=[repo]))
    assert pair(clf.classify("deploy-tool", cwd=str(repo))) == NEVER


def test_untrusted_repo_can_make_verdicts_stricter(tmp_path: Path) -> None:
    repo = tmp_path / "careful"
    write(
        repo / ".shellward" / "rules.toml",
        "[[rule]]\nid = 'ls'\nprogram = 'ls'\n"
        "idempotency = 'non_idempotent'\nreplay = 'never'\napproval = true\n"
        "reason = 'lists a directory with a slow network mount'\nmatch = ['ls']\n",
    )
    clf = Classifier(load_rules(repo_roots=[repo]))
    verdict = clf.classify("ls", cwd=str(repo))
    assert pair(verdict) == NEVER and verdict.needs_approval
    assert verdict.parts[0].rule_id == "repo:ls"
    # Outside the repo its rules do not apply.
    assert pair(clf.classify("ls", cwd=str(tmp_path))) == AUTO


def test_trusted_repo_may_loosen(tmp_path: Path) -> None:
    repo = tmp_path / "ours"
    write(repo / ".shellward" / "rules.toml", RM_AUTO + 'match = ["rm -rf build"]\n')
    clf = Classifier(load_rules(repo_roots=[repo], trusted_repos=[repo]))
    assert pair(clf.classify("rm -rf build", cwd=str(repo))) == AUTO
    assert pair(clf.classify("rm -rf build", cwd=str(tmp_path))) == NEVER


def test_repo_without_rule_file_is_fine(tmp_path: Path) -> None:
    rules = load_rules(repo_roots=[tmp_path])
    assert pair(Classifier(rules).classify("ls", cwd=str(tmp_path))) == AUTO
