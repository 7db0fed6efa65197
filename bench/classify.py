"""Classification time over the labelled corpus, against the bare bashlex parse.

Prints median and p99 per command (all commands, and those under 200 characters), the
ratio of classification to the bare ``bashlex.parse`` of the same strings, and the cost of
the second parser's cross-check alone (tree-sitter-bash parse and walk). Targets: median
<= 0.5 ms for commands under 200 characters (with the cross-check), classification <= 1.5x
the bare parse (set before the second parser existed).

    .venv/bin/python bench/classify.py [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import bashlex

from shellwardd.classifier import Classifier, load_rules
from shellwardd.classifier.crosscheck import disagreement

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "classifier" / "corpus.toml"
MEDIAN_TARGET_MS = 0.5
RATIO_TARGET = 1.5


def _time_each(commands: list[str], run: Callable[[str], object], rounds: int) -> list[float]:
    """Best-of-``rounds`` seconds per command (the minimum filters scheduler noise)."""
    best = [float("inf")] * len(commands)
    for _ in range(rounds):
        for n, command in enumerate(commands):
            start = time.perf_counter()
            run(command)
            best[n] = min(best[n], time.perf_counter() - start)
    return best


def _bare_parse(command: str) -> None:
    # Strings bashlex refuses are timed too (it raises many kinds of exceptions).
    with contextlib.suppress(Exception):
        bashlex.parse(command)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (best of N)")
    args = parser.parse_args()
    with CORPUS.open("rb") as fh:
        commands = [case["command"] for case in tomllib.load(fh)["case"]]
    classifier = Classifier(load_rules())
    workspace = "/tmp/shellward-bench-workspace"

    def classify(command: str) -> None:
        classifier.classify(command, cwd=workspace, workspace=workspace)

    classify("ls")  # warm caches and imports
    clf = _time_each(commands, classify, args.rounds)
    bare = _time_each(commands, _bare_parse, args.rounds)
    cross = _time_each(commands, lambda command: disagreement(command, ()), args.rounds)
    short = [t for t, c in zip(clf, commands, strict=True) if len(c) < 200]
    ms = 1000.0
    print(
        f"corpus: {len(commands)} commands ({len(short)} under 200 chars), best of "
        f"{args.rounds} rounds"
    )
    print(
        f"classify  all:     median {statistics.median(clf) * ms:.3f} ms   "
        f"p99 {_p(clf, 0.99) * ms:.3f} ms"
    )
    median_short = statistics.median(short) * ms
    print(
        f"classify  <200ch:  median {median_short:.3f} ms   p99 {_p(short, 0.99) * ms:.3f} ms"
        f"   (target median <= {MEDIAN_TARGET_MS} ms: "
        f"{'met' if median_short <= MEDIAN_TARGET_MS else 'NOT met'})"
    )
    print(
        f"bare parse all:    median {statistics.median(bare) * ms:.3f} ms   "
        f"p99 {_p(bare, 0.99) * ms:.3f} ms"
    )
    print(
        f"cross-check alone: median {statistics.median(cross) * ms:.3f} ms   "
        f"p99 {_p(cross, 0.99) * ms:.3f} ms   "
        f"({sum(cross) / sum(clf):.0%} of classification time)"
    )
    ratio = sum(clf) / sum(bare)
    ratios = [c / b for c, b in zip(clf, bare, strict=True) if b > 0]
    print(
        f"classify / bare parse: total {ratio:.2f}x   median per command "
        f"{statistics.median(ratios):.2f}x   (target <= {RATIO_TARGET}x: "
        f"{'met' if ratio <= RATIO_TARGET else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
