"""The Verdict the daemon sees: fields, parts, facts, reasons, and the public API."""

from __future__ import annotations

import shellwardd.classifier as classifier_pkg
from shellward.types import ArgumentKind
from shellwardd.classifier import Classifier

from .conftest import ASK, AUTO, NEVER, pair


def test_public_api() -> None:
    assert sorted(classifier_pkg.__all__) == [
        "Classifier",
        "LiveRules",
        "RuleFileError",
        "RuleSet",
        "load_repo_rules",
        "load_rules",
    ]


def test_design_examples(clf: Classifier) -> None:
    assert pair(clf.classify("ls")) == AUTO
    assert pair(clf.classify("npm test")) == ASK
    assert pair(clf.classify("npm publish")) == NEVER
    for command in (
        "git push",
        "git commit -m x",
        "rm x",
        "npm install",
        "npx prisma migrate deploy",
        "curl -X POST https://x",
        "docker run alpine",
    ):
        assert pair(clf.classify(command)) == NEVER, command


def test_reason_names_the_deciding_part(clf: Classifier) -> None:
    verdict = clf.classify("ls -la && rm -rf build")
    assert verdict.deciding_part == 1
    assert verdict.reason.startswith("`rm -rf build` deletes files: non_idempotent, never")
    assert "worst of 2 parts" in verdict.reason
    assert verdict.parts[1].rule_id == "coreutils.toml:rm"
    assert verdict.parts[1].span == (10, 22)


def test_reason_says_where_an_inner_part_was_found(clf: Classifier) -> None:
    verdict = clf.classify("echo $(rm x)")
    assert "(in $(…))" in verdict.reason


def test_network_and_approval_are_any_of_the_parts(clf: Classifier) -> None:
    verdict = clf.classify("ls && npm publish")
    assert verdict.needs_network and verdict.needs_approval
    assert not clf.classify("ls").needs_network
    assert clf.classify("sudo ls").needs_approval


def test_argument_facts(clf: Classifier) -> None:
    kinds = {a.text: a.kind for a in clf.classify("sed -i 's/a/b/' f.txt").parts[0].arguments}
    assert kinds == {
        "sed": ArgumentKind.PROGRAM,
        "-i": ArgumentKind.FLAG,
        "s/a/b/": ArgumentKind.OPAQUE,
        "f.txt": ArgumentKind.FILE_WRITE,
    }
    kinds = {a.text: a.kind for a in clf.classify("sed -n 1p f.txt").parts[0].arguments}
    assert kinds["f.txt"] is ArgumentKind.FILE_READ
    facts = clf.classify("git diff --output=d.patch HEAD").parts[0].arguments
    assert [(a.text, a.kind) for a in facts] == [
        ("git", ArgumentKind.PROGRAM),
        ("diff", ArgumentKind.SUBCOMMAND),
        ("--output=d.patch", ArgumentKind.FILE_WRITE),
        ("HEAD", ArgumentKind.OPAQUE),
    ]
    facts = clf.classify("curl -o out.json https://x").parts[0].arguments
    assert [a.kind for a in facts] == [
        ArgumentKind.PROGRAM,
        ArgumentKind.FLAG,
        ArgumentKind.FILE_WRITE,
        ArgumentKind.NETWORK,
    ]
    facts = clf.classify("rg --pre ./x foo").parts[0].arguments
    assert ArgumentKind.EXEC_HOOK in [a.kind for a in facts]
    facts = clf.classify("find . -exec rm {} +").parts[0].arguments
    assert [a.kind for a in facts if a.text == "-exec"] == [ArgumentKind.EXEC_HOOK]


def test_file_targets_of_changing_commands(clf: Classifier, ws) -> None:
    def writes(command: str) -> list[str]:
        verdict = clf.classify(command, cwd=str(ws), workspace=str(ws))
        return [
            a.text for p in verdict.parts for a in p.arguments if a.kind is ArgumentKind.FILE_WRITE
        ]

    assert writes("cp a b") == ["b"]
    assert writes("mv a b") == ["a", "b"]
    assert writes("rm -rf a b") == ["a", "b"]
    assert writes("mkdir -p a/b") == ["a/b"]
    assert writes("touch a") == ["a"]
    assert writes("chmod 755 a") == ["a"]
    assert writes("ln -s a b") == ["b"]
    assert writes("tee a b") == ["a", "b"]
    assert writes("sort -o s.txt in.txt") == ["s.txt"]
    assert writes("base64 -o out in") == ["out"]
    assert writes("find . -fprint list.txt") == ["list.txt"]


def test_hazard_flags_versus_their_harmless_twins(clf: Classifier) -> None:
    assert pair(clf.classify("sed -n 1p f")) == AUTO
    assert pair(clf.classify("sed -i s/a/b/ f")) == ASK
    assert pair(clf.classify("sort f")) == AUTO
    assert pair(clf.classify("sort -o f f")) == ASK
    assert pair(clf.classify("find . -name x")) == AUTO
    assert pair(clf.classify("git log -p")) == AUTO
    assert pair(clf.classify("git -c color.ui=never status")) == AUTO
    assert pair(clf.classify("curl -X GET https://x")) == ASK
    assert pair(clf.classify("echo hi")) == AUTO
    assert pair(clf.classify("echo hi | tee f")) == ASK
