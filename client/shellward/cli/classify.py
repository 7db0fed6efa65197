"""`shellward classify`: what a command may do, and whether it may run again."""

from __future__ import annotations

import argparse
import sys

from shellward import _render
from shellward._render import Style

from ._base import EXIT_OK, Commands, absolute_cwd, add_json, command_line, connect, subparser

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
    style = Style.for_stream(sys.stdout)
    if args.json:
        print(_render.to_json(verdict))
    elif args.explain:
        print(_render.explain(verdict, style))
    else:
        print(_render.verdict_text(verdict, style))
    return EXIT_OK


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
