"""What the parser must see (issue 3): every construct, each with the part it must find."""

from __future__ import annotations

import pytest

from shellward.types import ArgumentKind, Verdict
from shellwardd.classifier import Classifier

from .conftest import ASK, AUTO, NEVER, pair


def programs(verdict: Verdict) -> list[str]:
    return [p.program for p in verdict.parts]


def part(verdict: Verdict, program: str):
    return next(p for p in verdict.parts if p.program == program)


@pytest.mark.parametrize(
    "command",
    [
        "ls && rm x",
        "ls || rm x",
        "ls; rm x",
        "ls | rm x",
        "ls |& rm x",
        "rm x &",
        "ls\nrm x",
        "if true; then rm x; fi",
        "if true; then ls; else rm x; fi",
        "for f in a b; do rm $f; done",
        "while true; do rm x; done",
        "until false; do rm x; done",
        "f() { rm x; }",
        "function f { rm x; }",
        "(rm x)",
        "{ rm x; }",
        "! rm x",
    ],
)
def test_lists_pipelines_and_compounds_expose_every_command(clf: Classifier, command: str) -> None:
    verdict = clf.classify(command)
    assert "rm" in programs(verdict)
    assert pair(verdict) == NEVER
    assert verdict.parts[verdict.deciding_part].program == "rm"


@pytest.mark.parametrize(
    ("command", "context"),
    [
        ("echo $(rm x)", "$(…)"),
        ("echo `rm x`", "`…`"),
        ('echo "a $(rm x) b"', "$(…)"),
        ("cat <(rm x)", "<(…)"),
        ("ls > >(rm x)", ">(…)"),
        ("X=$(rm x)", "$(…)"),
        ("X=$(rm x) ls", "$(…)"),
        ('ls > "$(rm x)"', "$(…)"),
        ("for f in $(rm x); do ls; done", "$(…)"),
        ("echo $(echo $(rm x))", "$(…) / $(…)"),
    ],
)
def test_substitutions_are_classified_wherever_they_appear(
    clf: Classifier, command: str, context: str
) -> None:
    verdict = clf.classify(command)
    rm = part(verdict, "rm")
    assert rm.context == context
    assert pair(verdict) == NEVER
    assert command[rm.span[0] : rm.span[1]] == "rm x"


def test_single_quotes_hide_nothing_and_substitute_nothing(clf: Classifier) -> None:
    assert pair(clf.classify("echo '$(rm x)'")) == AUTO


@pytest.mark.parametrize(
    ("command", "target"),
    [
        ("ls > out", "out"),
        ("ls >> out", "out"),
        ("ls &> out", "out"),
        ("ls >| out", "out"),
        ("ls 2> err", "err"),
        ("echo x 3> fd3", "fd3"),
        ("{ ls; } > out", "out"),
        ("> out", "out"),
    ],
)
def test_redirect_to_a_file_is_a_write_and_asks(
    clf: Classifier, ws, command: str, target: str
) -> None:
    verdict = clf.classify(command, cwd=str(ws), workspace=str(ws))
    writes = [a for p in verdict.parts for a in p.arguments if a.kind is ArgumentKind.FILE_WRITE]
    assert [w.text for w in writes] == [target]
    assert pair(verdict) == ASK


@pytest.mark.parametrize("command", ["ls > /dev/null", "ls 2>&1", "ls >&2", "ls 2>/dev/null 1>&2"])
def test_dev_null_and_fd_duplications_are_not_writes(clf: Classifier, command: str) -> None:
    verdict = clf.classify(command)
    assert pair(verdict) == AUTO
    assert not [a for a in verdict.parts[0].arguments if a.kind is ArgumentKind.FILE_WRITE]


@pytest.mark.parametrize(
    ("command", "target"), [("wc -l < in.txt", "in.txt"), ('grep x <<< "$s"', "$s")]
)
def test_input_redirect_and_here_string_are_reads(
    clf: Classifier, command: str, target: str
) -> None:
    verdict = clf.classify(command)
    reads = [a.text for a in verdict.parts[0].arguments if a.kind is ArgumentKind.FILE_READ]
    assert target in reads
    assert pair(verdict) == AUTO


def test_writes_outside_the_workspace_never_replay(clf: Classifier, ws) -> None:
    for command in ("echo x > ~/.bashrc", "echo x >> /etc/hosts", "cp a /opt/elsewhere"):
        assert pair(clf.classify(command, cwd=str(ws), workspace=str(ws))) == NEVER, command
    assert pair(clf.classify("ls > /tmp/out", cwd=str(ws), workspace=str(ws))) == ASK


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("FOO=1 ls", AUTO),
        ("FOO=1", AUTO),
        ("FOO=1 rm x", NEVER),
        ("PATH=.:$PATH ls", NEVER),
        ("LD_PRELOAD=x.so ls", NEVER),
        ("export PATH=./bin:$PATH", NEVER),
    ],
)
def test_assignments(clf: Classifier, command: str, expected) -> None:
    assert pair(clf.classify(command)) == expected


@pytest.mark.parametrize(
    ("command", "context"),
    [
        ("bash -c 'rm x'", "bash -c"),
        ("sh -c 'rm x'", "sh -c"),
        ("zsh -c 'rm x'", "zsh -c"),
        ("bash -lc 'rm x'", "bash -c"),
        ("eval 'rm x'", "eval"),
        ("echo f | xargs rm", "xargs"),
        ("xargs -0 -n1 rm < list", "xargs"),
        ("env A=1 rm x", "env"),
        ("env -u HOME rm x", "env"),
        ("sudo rm x", "sudo"),
        ("sudo -u root rm x", "sudo"),
        ("timeout 5 rm x", "timeout"),
        ("timeout -s KILL 5 rm x", "timeout"),
        ("nice -n 5 rm x", "nice"),
        ("nohup rm x", "nohup"),
        ("command rm x", "command"),
        ("builtin eval 'rm x'", "builtin / eval"),
        ("exec rm x", "exec"),
        ("find . -exec rm {} \\;", "find -exec"),
        ("find . -execdir rm {} +", "find -execdir"),
        ("find . -ok rm {} \\;", "find -ok"),
        ("bash -c \"sh -c 'rm x'\"", "bash -c / sh -c"),
        ("env timeout 5 sudo rm x", "env / timeout / sudo"),
    ],
)
def test_code_run_as_code_is_classified_and_never_hidden(
    clf: Classifier, command: str, context: str
) -> None:
    verdict = clf.classify(command)
    rm = part(verdict, "rm")
    assert rm.context == context
    assert pair(verdict) == NEVER
    assert verdict.deciding_part == verdict.parts.index(rm)


def test_time_keyword_is_seen_through(clf: Classifier) -> None:
    assert pair(clf.classify("time ls")) == AUTO
    assert pair(clf.classify("time -p git push")) == NEVER
    assert pair(clf.classify("ls && time npm test")) == ASK


def test_inner_code_spans_point_into_the_original(clf: Classifier) -> None:
    command = "bash -c 'ls && rm -rf build'"
    rm = part(clf.classify(command), "rm")
    assert command[rm.span[0] : rm.span[1]] == "rm -rf build"


def test_wrappers_that_only_look_up_run_nothing(clf: Classifier) -> None:
    assert pair(clf.classify("command -v rm")) == AUTO
    assert pair(clf.classify("xargs")) == AUTO
    assert pair(clf.classify("env")) == AUTO


def test_xargs_cannot_smuggle_a_subcommand(clf: Classifier) -> None:
    assert pair(clf.classify("echo push | xargs git")) == NEVER
    assert pair(clf.classify("git ls-files | xargs wc -l")) == AUTO


def test_quoted_heredocs_classify_correctly(clf: Classifier) -> None:
    commit = "git commit -m \"$(cat <<'EOF'\nFix it\n\n$(rm -rf x) is just text\nEOF\n)\""
    verdict = clf.classify(commit)
    assert sorted(programs(verdict)) == ["cat", "git"]
    assert pair(verdict) == NEVER
    assert part(verdict, "git").rule_id == "git.toml:commit"
    assert pair(clf.classify("cat <<'EOF'\n$(rm -rf x)\nEOF")) == AUTO
    assert pair(clf.classify('cat <<"EOF"\n`rm x`\nEOF')) == AUTO
    assert pair(clf.classify("cat <<\\EOF\n$(rm x)\nEOF")) == AUTO
    assert pair(clf.classify("cat <<-'EOF'\n\thi\n\tEOF\nrm x")) == NEVER


def test_unquoted_heredoc_substitution_fails_closed(clf: Classifier) -> None:
    verdict = clf.classify("cat <<EOF\n$(rm x)\nEOF")
    assert pair(verdict) == NEVER
    assert "substitution" in verdict.reason


def test_heredoc_marker_in_a_string_or_comment_hides_nothing(clf: Classifier) -> None:
    assert pair(clf.classify("echo \"<<'X'\"\nrm -rf y\nX")) == NEVER
    assert pair(clf.classify("ls # <<'X'\nrm -rf y\nX")) == NEVER


def test_functions_defined_in_the_command_are_known(clf: Classifier) -> None:
    verdict = clf.classify("f() { ls; }; f")
    assert pair(verdict) == AUTO
    assert part(verdict, "ls").context == "function f"
    assert pair(clf.classify("cleanup() { rm -rf tmp; }\ncleanup")) == NEVER
