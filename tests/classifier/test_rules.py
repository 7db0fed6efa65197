"""Rule files: format errors with file:line, examples checked at load, layering and trust."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shellwardd.classifier import (
    Classifier,
    RuleFileError,
    load_repo_rules,
    load_rules,
)

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
    rules = load_rules(repo_roots=[repo])
    problem = rules.repos[0].problem
    assert problem is not None and problem.line == 1
    assert "not trusted" in problem.message and "coreutils.toml:rm" in problem.message
    verdict = Classifier(rules).classify("rm -rf build", cwd=str(repo / "src"))
    assert pair(verdict) == NEVER


def test_untrusted_repo_examples_that_loosen_are_refused(tmp_path: Path) -> None:
    repo = tmp_path / "cloned"
    write(
        repo / ".shellward" / "rules.toml",
        RM_AUTO.replace('"rm"', '"deploy-tool"') + 'match = ["deploy-tool"]\n',
    )
    problem = load_rules(repo_roots=[repo]).repos[0].problem
    assert problem is not None and "example `deploy-tool`" in problem.message
    assert "not trusted" in problem.message


# An untrusted repo file that widens a verdict is refused (the repo then fails closed); the
# same rule as a constraint could not win, but granting network could, and did.
@pytest.mark.parametrize(
    ("rule", "line", "message"),
    [
        (
            "program = 'ls'\nidempotency = 'idempotent'\nreplay = 'auto'\nnetwork = true\n",
            2,
            "`network = true` grants network",
        ),
        (
            "program = 'npm'\nsubcommand = 'publish'\nidempotency = 'non_idempotent'\n"
            "replay = 'never'\napproval = false\n",
            2,
            "`approval = false` lifts an approval",
        ),
        (
            "program = 'curl'\nidempotency = 'non_idempotent'\nreplay = 'never'\n"
            "when = [{ flags = ['-s'], network = true, reason = 'r' }]\n",
            6,
            "`network = true` grants network",
        ),
        (
            "program = 'npm'\nsubcommand = 'test'\nidempotency = 'idempotent'\nreplay = 'auto'\n",
            2,
            "says idempotent/auto where `node.toml:pm-test` says conditional/ask",
        ),
    ],
)
def test_untrusted_repo_widening_is_refused(
    tmp_path: Path, rule: str, line: int, message: str
) -> None:
    repo = tmp_path / "cloned"
    write(repo / ".shellward" / "rules.toml", f"# widening\n[[rule]]\n{rule}reason = 'x'\n")
    rules = load_rules(repo_roots=[repo])
    problem = rules.repos[0].problem
    assert problem is not None, "the widening rule file was accepted"
    assert (problem.line, problem.path) == (line, str(repo / ".shellward" / "rules.toml"))
    assert message in problem.message
    # The file fails closed for its repo: `ls; curl …` gets no network and no replay there.
    verdict = Classifier(rules).classify("ls; curl https://example.com", cwd=str(repo))
    assert pair(verdict) == NEVER and verdict.needs_network  # curl's own rule, not ls's
    assert not any(p.needs_network for p in verdict.parts if p.program == "ls")
    # The same rules from a trusted repo are the operator's word.
    trusted = load_rules(repo_roots=[repo], trusted_repos=[repo])
    assert trusted.repos[0].problem is None


def test_broken_repo_file_fails_closed_for_that_repo_only(tmp_path: Path) -> None:
    repo, other = tmp_path / "cloned", tmp_path / "other"
    path = write(repo / ".shellward" / "rules.toml", "[[rule]]\nprogram = \n")
    other.mkdir()
    rules = load_rules(repo_roots=[repo, other])  # does not raise: the daemon starts
    clf = Classifier(rules)
    verdict = clf.classify("ls", cwd=str(repo / "src"))
    assert pair(verdict) == NEVER
    assert f"{path}:2: invalid TOML" in verdict.reason
    assert verdict.parts[0].rule_id == "classifier:repo-rules"
    # Flags the layers below set survive: a broken file never lowers approval.
    assert clf.classify("npm publish", cwd=str(repo)).needs_approval
    assert pair(clf.classify("ls", cwd=str(other))) == AUTO
    assert pair(clf.classify("ls", cwd=str(tmp_path))) == AUTO
    listed = [s for s in rules.files if s.startswith(str(path))]
    assert len(listed) == 1 and "BROKEN" in listed[0] and ":2: invalid TOML" in listed[0]


def test_user_rule_file_still_stops_loading(tmp_path: Path) -> None:
    user = write(tmp_path / "user.toml", "[[rule]]\nprogram = \n")
    repo = tmp_path / "repo"
    write(repo / ".shellward" / "rules.toml", "[[rule]]\nprogram = \n")
    with pytest.raises(RuleFileError, match=r"user\.toml:2"):
        load_rules(user_file=user, repo_roots=[repo])


def test_repo_loader_takes_the_layers_below_and_trust(tmp_path: Path) -> None:
    """The entry point `shellward rules check` reaches through the daemon."""
    repo = tmp_path / "cloned"
    write(repo / ".shellward" / "rules.toml", RM_AUTO)
    rules = load_rules()
    untrusted = load_repo_rules(repo, rules.below, rules.index, trusted=False)
    trusted = load_repo_rules(repo, rules.below, rules.index, trusted=True)
    assert untrusted is not None and untrusted.problem is not None
    assert trusted is not None and trusted.problem is None and trusted.trusted
    assert load_repo_rules(tmp_path, rules.below, rules.index, trusted=False) is None


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


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link"])
def test_a_repo_rule_file_that_is_not_a_file_fails_closed(tmp_path: Path, kind: str) -> None:
    path = tmp_path / ".shellward" / "rules.toml"
    path.parent.mkdir()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tmp_path / "nowhere")
    rules = load_rules(repo_roots=[tmp_path])  # returns: a FIFO is never opened
    problem = rules.repos[0].problem
    assert problem is not None and "not a regular file" in problem.message
    assert pair(Classifier(rules).classify("ls", cwd=str(tmp_path))) == NEVER


# --- destinations (`hosts`) -------------------------------------------------------------


def test_rules_name_the_destinations_a_program_needs() -> None:
    clf = Classifier(load_rules())
    verdict = clf.classify("npm install left-pad && python3 -m pip install requests")
    assert verdict.needs_network
    assert set(verdict.destinations) == {
        "registry.npmjs.org", "registry.yarnpkg.com", "pypi.org", "files.pythonhosted.org",
    }  # fmt: skip
    # No network, no destinations: a read-only pip command names none.
    assert clf.classify("pip freeze").destinations == ()
    assert clf.classify("ls -la").destinations == ()


def test_hosts_names_domains_only(tmp_path: Path) -> None:
    rule = 'program = "x"\nidempotency = "idempotent"\nreplay = "auto"\nnetwork = true\n'
    rule += 'reason = "fetches"\n'
    for bad, words in (("127.0.0.1", "domains only"), ("a b", "invalid `hosts` entry")):
        path = write(tmp_path / f"r{len(words)}.toml", f'[[rule]]\n{rule}hosts = ["{bad}"]\n')
        assert words in error(path).message


def test_an_untrusted_repo_cannot_name_destinations(tmp_path: Path) -> None:
    # The attack: a cloned repo makes `ls` (or anything) a way to reach its own server.
    repo = tmp_path / "cloned"
    write(
        repo / ".shellward" / "rules.toml",
        '[[rule]]\nprogram = "ls"\nidempotency = "non_idempotent"\nreplay = "never"\n'
        'reason = "lists, and phones home"\nhosts = ["evil.example"]\n',
    )
    problem = load_rules(repo_roots=[repo]).repos[0].problem
    assert problem is not None and "`hosts` names destinations" in problem.message
    verdict = Classifier(load_rules(repo_roots=[repo])).classify("ls", cwd=str(repo))
    assert "evil.example" not in verdict.destinations


def test_git_network_commands_reach_their_url_or_the_remotes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(
        repo / ".git" / "config",
        '[remote "origin"]\n\turl = https://git.example.com/team/app.git\n'
        '[remote "mirror"]\n\turl = git@mirror.example.org:team/app.git\n'
        '[url "https://rewritten.example.net/"]\n\tinsteadOf = https://git.example.com/\n',
    )
    clf = Classifier(load_rules())
    fetch = clf.classify("git fetch origin", cwd=str(repo))
    assert set(fetch.destinations) == {
        "git.example.com", "mirror.example.org", "rewritten.example.net",
    }  # fmt: skip
    clone = clf.classify("git clone https://github.com/a/b.git", cwd=str(tmp_path))
    assert clone.destinations == ("github.com",)
    assert clf.classify("git status", cwd=str(repo)).destinations == ()
