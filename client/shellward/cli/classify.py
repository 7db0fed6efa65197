"""`shellward classify`: what a command may do, and whether it may run again."""

from __future__ import annotations

import argparse

from shellward import _render

from ._base import (
    Commands,
    absolute_cwd,
    add_json,
    answer,
    command_line,
    connect,
    subparser,
)

CLASSIFY_EPILOG = """\
CMD is joined like `shellward run` does: one word as is, several with shlex.join.
Nothing runs: the daemon only parses the command and applies its rules.

examples:
  shellward classify 'npm test && git push'
  shellward classify --explain -- find . -name '*.pyc' -delete
  shellward classify --json 'curl -X POST https://example.com' | jq .replay_policy
"""


def cmd_classify(args: argparse.Namespace) -> int:
    command = command_line(args.command, "classify")
    with connect(args) as client:
        verdict = client.classify(command, cwd=absolute_cwd(args.cwd))
    text = _render.explain if args.explain else _render.verdict_text
    return answer(args.json, verdict, lambda style: text(verdict, style))


def add(commands: Commands) -> None:
    classify = subparser(
        commands,
        "classify",
        cmd_classify,
        "Say what a command may do and whether it may run again (nothing runs).",
        CLASSIFY_EPILOG,
    )
    how = classify.add_mutually_exclusive_group()
    add_json(how, "the verdict and its parts as JSON")
    how.add_argument(
        "--explain", action="store_true", help="every part, the rule that decided it and why"
    )
    classify.add_argument(
        "--cwd", metavar="DIR", help="classify as if run here (default: the current directory)"
    )
    classify.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="CMD…", help="the command line to classify"
    )
