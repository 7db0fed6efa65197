"""`shellward rules check` and `shellward rules reload`, both answered by the daemon."""

from __future__ import annotations

import argparse

from shellward import _render

from ._base import EXIT_ERROR, EXIT_OK, Commands, UsageError, add_json, connect, error, subparser

RULES_EPILOG = """\
The daemon checks each file as it loads it: TOML syntax, known fields, and that every rule's
`match` / `not_match` examples classify as the rule says, layered as the daemon layers the
file: its user file over the built-in rules; a workspace's .shellward/rules.toml over both,
where the rules of a repository the daemon does not trust may only make verdicts stricter.
Any other file inside a workspace is checked as that workspace's .shellward/rules.toml
would be (check a draft before you put it there); the daemon reads no file outside its
workspaces but its user file. Without FILEs: every rule file the daemon loads. Nothing is
reloaded (`shellward rules reload` does that).

Each file gets a line `ok: FILE (LAYER)` or its problems as `file:line: what to fix`.

exit status: 0 all clean; 1 problems found, or no daemon answers.

examples:
  shellward rules check
  shellward rules check .shellward/rules.toml
  shellward rules check drafts/rules.toml --json | jq '.[].problems'
"""


def cmd_rules_check(args: argparse.Namespace) -> int:
    with connect(args) as client:
        checks = client.check_rules(args.files)
    if args.json:
        print(_render.to_json(checks))
    else:
        for check in checks:
            print("\n".join(check.problems) or f"ok: {check.path} ({check.layer.value})")
    problems = sum(len(check.problems) for check in checks)
    if problems:
        error(f"{problems} problem(s) in rule files; fix them and run the check again")
        return EXIT_ERROR
    return EXIT_OK


RELOAD_EPILOG = """\
The daemon reads its built-in, user and workspace (repo) rule files again and prints the
files now in force, one `reloaded: SOURCE` line each. If a file is broken (bad TOML, a
failing `match` example), nothing changes: the last good rules stay in force, the error
names the file, and the exit status is 1. Check a file first with `shellward rules check`.

examples:
  shellward rules reload
"""


def cmd_rules_reload(args: argparse.Namespace) -> int:
    with connect(args) as client:
        outcome = client.reload_rules()
    prefix = "reloaded" if outcome.ok else "in force"
    for source in outcome.sources:
        print(f"{prefix}: {source}")
    if not outcome.ok:
        error(
            f"the daemon could not reload its rules, so the last good rules stay in force: "
            f"{outcome.error}"
        )
        return EXIT_ERROR
    return EXIT_OK


def add(commands: Commands) -> None:
    rules = subparser(
        commands,
        "rules",
        _rules_without_action,
        "Work with rule files.",
        "examples:\n  shellward rules check\n  shellward rules check my-rules.toml\n"
        "  shellward rules reload\n",
    )
    actions = rules.add_subparsers(title="actions", metavar="ACTION")
    check = subparser(
        actions,
        "check",
        cmd_rules_check,
        "Check rule files as the daemon loads them.",
        RULES_EPILOG,
    )
    check.add_argument("files", nargs="*", metavar="FILE", help="rule files (TOML) to check")
    add_json(check, "a JSON array of {path, layer, problems}")
    subparser(
        actions,
        "reload",
        cmd_rules_reload,
        "Make the daemon read its rule files again (as SIGHUP does).",
        RELOAD_EPILOG,
    )


def _rules_without_action(args: argparse.Namespace) -> int:
    raise UsageError(
        "say what to do with the rules: `shellward rules check [FILE…]` or `shellward rules reload`"
    )
