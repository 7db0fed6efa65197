"""The one reader of the operator's TOML files (rule files and the tools configuration):
``file:line`` errors, and ``replay`` as the one spelling of the replay key in both."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from shellward.types import ReplayPolicy
from shellwardd.classifier import RuleFileError, load_rules
from shellwardd.classifier.rules import parse_rule_file
from shellwardd.tomlfile import TomlFile
from shellwardd.tools.config import ToolConfigError, parse_tools_config

DAEMON = Path(__file__).resolve().parents[2] / "daemon"

RULE = """\
[[rule]]
id = "frob"
program = "frob"
idempotency = "non_idempotent"
{replay}
reason = "frobs things"
match = ["frob x"]
"""

TOOL = """\
[[server]]
name = "biz"
command = ["server"]

[[tool]]
server = "biz"
name = "create"
{replay}
"""


def _error(text: str) -> RuleFileError:
    with pytest.raises(RuleFileError) as info:
        parse_rule_file(text, "r.toml", "user")
    return info.value


def test_only_the_reader_module_parses_toml() -> None:
    """One copy: nothing else in the daemon imports tomllib."""
    importers = sorted(
        str(path.relative_to(DAEMON))
        for path in DAEMON.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Import) and any(a.name == "tomllib" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "tomllib")
    )
    assert importers == ["shellwardd/tomlfile.py"]


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("[[rule]]\nid = 'a'\nprogram = \n", 3, "invalid TOML"),
        ("[[rule]]\nid = 'a'\nprogram = [\n", 3, "invalid TOML"),  # at end of document
        ("[[rule]]\nid = 'a'\n\n[rules]\nx = 1\n", 4, "unknown top-level key `rules`"),
        ("rule = [{ id = 'a' }]\n", 1, "its own `[[rule]]` table"),
    ],
)
def test_syntax_and_layout_errors_name_their_line(text: str, line: int, problem: str) -> None:
    err = _error(text)
    assert (err.path, err.line) == ("r.toml", line)
    assert problem in err.message and str(err).startswith(f"r.toml:{line}: ")


def test_a_key_is_found_by_its_whole_name_and_sub_tables_stay_in_their_rule() -> None:
    # `first_args_unless` starts with `first_args`: the bad `first_args` is on line 8.
    text = RULE.format(replay='replay = "never"').replace(
        "match = ", 'first_args_unless = ["-e"]\nfirst_args = 3\nmatch = '
    )
    err = _error(text)
    assert err.line == 8 and "invalid `first_args`" in err.message
    file = TomlFile("r.toml", text + "[[rule.when]]\nflags = ['-f']\n", RuleFileError)
    ((block, _),) = file.tables("rule")
    assert block.end == len(file.lines) + 1  # [[rule.when]] does not end the rule
    assert file.key_line(block, "first_args") == 8
    assert file.key_line(block, "when") == 10  # the sub-table's header
    assert file.key_line(block, "missing") == block.start


def test_rule_files_spell_the_key_replay_and_still_read_replay_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (rule,) = parse_rule_file(RULE.format(replay='replay = "never"'), "r.toml", "user")
    assert rule.replay is ReplayPolicy.NEVER
    with caplog.at_level(logging.WARNING, logger="shellwardd.config"):
        (old,) = parse_rule_file(RULE.format(replay='replay_policy = "never"'), "r.toml", "user")
    assert old.replay is ReplayPolicy.NEVER
    assert "write `replay` instead of `replay_policy`" in caplog.text
    both = _error(RULE.format(replay='replay = "never"\nreplay_policy = "auto"'))
    assert both.line == 6 and "give `replay` only" in both.message


def test_the_tools_configuration_spells_it_replay_too(caplog: pytest.LogCaptureFixture) -> None:
    (pin,) = parse_tools_config(TOOL.format(replay='replay = "ask"'), "t.toml").pins
    assert pin.replay_policy is ReplayPolicy.ASK
    with caplog.at_level(logging.WARNING, logger="shellwardd.config"):
        (old,) = parse_tools_config(TOOL.format(replay='replay_policy = "ask"'), "t.toml").pins
    assert old.replay_policy is ReplayPolicy.ASK and "instead of `replay_policy`" in caplog.text
    with pytest.raises(ToolConfigError) as info:
        parse_tools_config(TOOL.format(replay='replay = "ask"\nreplay_policy = "never"'), "t.toml")
    assert info.value.line == 9 and "give `replay` only" in info.value.problem


def test_the_old_spelling_cannot_loosen_an_untrusted_repository(tmp_path: Path) -> None:
    """The alias is read before any check: a cloned repo gains nothing by using it."""
    repo = tmp_path / "cloned"
    (repo / ".shellward").mkdir(parents=True)
    (repo / ".shellward" / "rules.toml").write_text(
        '[[rule]]\nid = "rm"\nprogram = "rm"\nidempotency = "idempotent"\n'
        'replay_policy = "auto"\nreason = "fine"\nmatch = ["rm -rf build"]\n'
    )
    (loaded,) = load_rules(repo_roots=[repo]).repos
    assert loaded.problem is not None and "not trusted" in str(loaded.problem)
