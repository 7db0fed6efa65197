"""Fail closed: everything the classifier cannot see through is non_idempotent/never, and
the reason names the construct or program that caused it."""

from __future__ import annotations

import pytest

from shellwardd.classifier import Classifier

from .conftest import AUTO, NEVER, pair


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ('echo "hello', "MatchedPairError"),  # bashlex: unterminated quote
        ("[[ -f x ]] && ls", "[[ … ]]"),  # ParsingError
        ("case $x in a) ls;; esac", "case"),  # NotImplementedError
        ("echo $((1+2))", "arithmetic"),  # NotImplementedError
        ("for ((i=0; i<3; i++)); do ls; done", "arithmetic"),
        ("arr=(a b); ls", "array"),
        ("select x in a; do ls; done", "select"),
        ("coproc ls", "coproc"),
        ("ls ;; rm x", "cannot read"),
        ("git status &&", "cannot read"),
    ],
)
def test_what_bashlex_cannot_parse_fails_closed(clf: Classifier, command: str, named: str) -> None:
    verdict = clf.classify(command)
    assert pair(verdict) == NEVER
    assert named in verdict.reason
    assert verdict.parts[verdict.deciding_part].rule_id == "classifier:parse"


@pytest.mark.parametrize(
    "command",
    ["echo ${x:-$(rm y)}", 'echo "${HOME:+$(rm -rf tmp)}"', "echo ${x:=`rm y`}", "ls ${a:-$(ls)}"],
)
def test_substitutions_bashlex_misses_fail_closed(clf: Classifier, command: str) -> None:
    verdict = clf.classify(command)
    assert pair(verdict) == NEVER
    assert "did not see the substitution" in verdict.reason


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("$cmd -rf x", "a variable (`$cmd`)"),
        ('"$EDITOR" README.md', "a variable"),
        ("$(which rm) -rf x", "a command substitution"),
        ("`echo rm` x", "a command substitution"),
        ("CMD=ls; $CMD", "a variable"),
    ],
)
def test_program_named_by_a_variable_fails_closed(
    clf: Classifier, command: str, named: str
) -> None:
    verdict = clf.classify(command)
    assert pair(verdict) == NEVER
    assert named in verdict.reason


@pytest.mark.parametrize(
    "command",
    [
        "frobnicate --all",
        "mytool",
        "ls && unknowncmd",
        "git frobnicate",
        "npm run deploy",
        "make deploy",
    ],
)
def test_unknown_programs_and_subcommands_fail_closed(clf: Classifier, command: str) -> None:
    verdict = clf.classify(command)
    assert pair(verdict) == NEVER
    assert "no rule knows" in verdict.reason


@pytest.mark.parametrize(
    "command",
    ["./cat package.json", "./ls", "bin/rg foo", "node_modules/.bin/jest", "./scripts/../cat x"],
)
def test_programs_inside_the_workspace_are_never_trusted(clf: Classifier, ws, command: str) -> None:
    verdict = clf.classify(command, cwd=str(ws), workspace=str(ws))
    assert pair(verdict) == NEVER
    assert "inside the workspace" in verdict.reason
    assert verdict.parts[0].resolved_program.startswith(str(ws))


def test_program_paths_resolve_against_cwd_not_basename(clf: Classifier, ws) -> None:
    # System directories name the program by its basename; anywhere else is unknown.
    assert pair(clf.classify("/bin/ls -la", cwd=str(ws), workspace=str(ws))) == AUTO
    assert pair(clf.classify("/usr/bin/git status")) == AUTO
    assert pair(clf.classify("/opt/evil/ls")) == NEVER
    assert pair(clf.classify("../tools/git status", cwd=str(ws), workspace=str(ws))) == NEVER
    verdict = clf.classify("./ls")
    assert pair(verdict) == NEVER
    assert "no working directory" in verdict.reason
    assert pair(clf.classify("~/bin/ls")) == NEVER


@pytest.mark.parametrize("command", ["", "   ", "\n\t\n", "# just a comment", "  # a\n# b\n"])
def test_empty_or_comment_only_input_is_a_value_error(clf: Classifier, command: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        clf.classify(command)


def test_overlong_input_fails_closed(clf: Classifier) -> None:
    verdict = clf.classify("ls " + "a" * 70000)
    assert pair(verdict) == NEVER
    assert "longer than" in verdict.reason


def test_deep_nesting_fails_closed(clf: Classifier) -> None:
    # Each `eval` re-parses the rest as code, one level deeper.
    verdict = clf.classify("eval " * 12 + "ls")
    assert pair(verdict) == NEVER
    assert "nested too deeply" in verdict.reason
    assert pair(clf.classify("eval " * 3 + "ls")) == AUTO


def test_deep_nesting_of_substitutions_fails_closed(clf: Classifier) -> None:
    command = "ls"
    for _ in range(300):
        command = f"echo $({command})"
    verdict = clf.classify(command)
    assert pair(verdict) == NEVER


@pytest.mark.parametrize(
    "command",
    [
        "git -c core.pager='rm -rf src' log",
        "git -c alias.x='!rm -rf y' x",
        "git -p log",
        "git --paginate diff",
        "git --exec-path=./hooks status",
        "rg --pre ./decode.sh foo",
        "rg --pre=cat foo",
        "rg -z secret",
        "find . -delete",
        "sed -n '1e rm -rf b' f",
        "sed 's/.*/rm &/e' f",
        "awk 'BEGIN { system(\"rm x\") }'",
        "curl -X POST https://x",
        "curl -XPOST https://x",
        "curl --request DELETE https://x",
        "curl -d a=1 https://x",
        "curl -T f https://x",
        "wget https://x/a.zip",
        "env -S 'rm x'",
    ],
)
def test_argument_level_hazards_never_replay(clf: Classifier, command: str) -> None:
    assert pair(clf.classify(command)) == NEVER
