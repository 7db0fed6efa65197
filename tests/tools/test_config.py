"""The operator's MCP configuration: a full example, defaults, and errors with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellward.types import Idempotency, ReplayPolicy
from shellwardd.errors import ConfigError
from shellwardd.tools.config import (
    DEFAULT_TIMEOUT_SECONDS,
    ToolConfigError,
    Trust,
    load_tools_config,
    parse_tools_config,
)
from shellwardd.tools.keys import KeyScope

EXAMPLE = """\
# business tools
[[server]]
name = "business"
command = ["python3", "server.py", "--quiet"]
trust = "trusted"
timeout_seconds = 5
[server.env]
API_BASE = "http://127.0.0.1:9000"

[[server]]
name = "local-http"
url = "http://127.0.0.1:8931/mcp"

[[tool]]
server = "business"
name = "create_issue"
idempotency = "non_idempotent"
replay = "never"
approval = true
key_argument = "idempotency_key"
object_argument = "repo"
key_template = "agent:{user}:{run}:{tool}:{object}"
status_tool = "get_issue_by_idempotency_key"

[[tool]]
server = "business"
name = "create_order"
key_argument = "idempotency_key"
object_argument = "cart_id"
key_scope = "object"
"""

SERVER = '[[server]]\nname = "biz"\ncommand = ["srv"]\n'


def test_full_example(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(EXAMPLE)
    config = load_tools_config(path)
    business, local = config.servers
    assert business.command == ("python3", "server.py", "--quiet")
    assert business.trust is Trust.TRUSTED
    assert business.timeout_seconds == 5.0
    assert dict(business.env) == {"API_BASE": "http://127.0.0.1:9000"}
    assert business.origin == f"{path}:2"
    assert (local.url, local.command, local.trust) == (
        "http://127.0.0.1:8931/mcp",
        (),
        Trust.UNTRUSTED,
    )
    assert local.timeout_seconds == DEFAULT_TIMEOUT_SECONDS
    issue = config.pin("business", "create_issue")
    assert issue is not None
    assert (issue.idempotency, issue.replay_policy, issue.approval) == (
        Idempotency.NON_IDEMPOTENT,
        ReplayPolicy.NEVER,
        True,
    )
    assert issue.status_tool == "get_issue_by_idempotency_key"
    assert issue.key_scope is KeyScope.RUN
    order = config.pin("business", "create_order")
    assert order is not None
    # No template given: the object scope's default, which leaves out the run.
    assert order.key_template == "agent:{user}:{tool}:{object}"
    assert (order.idempotency, order.approval) == (None, None)
    assert config.pin("business", "send_email") is None


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:8000/mcp", True),
        ("http://127.8.9.10/mcp", True),
        ("http://localhost:8000/mcp", True),
        ("https://[::1]:8443/mcp", True),
        ("http://example.com/mcp", False),
        ("http://10.0.0.5:8000/mcp", False),
        ("http://0.0.0.0:8000/mcp", False),
    ],
)
def test_http_only_on_loopback(url: str, ok: bool) -> None:
    text = f'[[server]]\nname = "h"\nurl = "{url}"\n'
    if ok:
        assert parse_tools_config(text, "mcp.toml").servers[0].url == url
    else:
        with pytest.raises(ToolConfigError) as info:
            parse_tools_config(text, "mcp.toml")
        assert info.value.line == 3
        assert "is not on this machine" in info.value.problem


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ('[[server]]\nname = "x"\ncommand = [\n', 3, "invalid TOML"),
        ('[[server]]\nname = "x\ncommand = ["a"]\n', 2, "invalid TOML"),
        ('[servers]\nname = "x"\n', 1, "unknown top-level key `servers`"),
        ('[[server]]\nname = "x"\ncommand = ["a"]\nsocket = "y"\n', 4, "unknown field `socket`"),
        ('[[server]]\ncommand = ["a"]\n', 1, "missing `name`"),
        ('[[server]]\nname = "a.b"\ncommand = ["a"]\n', 2, "may only use letters"),
        ('[[server]]\nname = "x"\n', 1, "set exactly one of `command` (stdio) or `url`"),
        (
            '[[server]]\nname = "x"\ncommand = ["a"]\nurl = "http://127.0.0.1/"\n',
            1,
            "set exactly one of",
        ),
        ('[[server]]\nname = "x"\ncommand = []\n', 3, "non-empty list of strings"),
        ('[[server]]\nname = "x"\nurl = "ftp://127.0.0.1/"\n', 3, "http:// or https://"),
        (SERVER + 'trust = "yes"\n', 4, "invalid `trust` 'yes': use one of \"untrusted\""),
        (SERVER + "timeout_seconds = -1\n", 4, "`timeout_seconds` must be a positive number"),
        (SERVER + "timeout_seconds = true\n", 4, "`timeout_seconds` must be a positive number"),
        (SERVER + "env = { A = 1 }\n", 4, "`env` must be a table of strings"),
        (SERVER + "\n" + SERVER, 5, "duplicate server name `biz` (first at mcp.toml:1)"),
        (
            SERVER + '[[tool]]\nserver = "other"\nname = "t"\n',
            4,
            "names server `other`, which is not declared (servers: `biz`)",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nidempotence = "idempotent"\n',
            7,
            "unknown field `idempotence` in [[tool]]",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nidempotency = "safe"\n',
            7,
            "invalid `idempotency` 'safe'",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\napproval = "yes"\n',
            7,
            "`approval` must be true or false",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_template = "k:{run}"\n',
            7,
            "a key_template needs key_argument",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_argument = "k"\n'
            'key_template = "k:{run}:{order}"\n',
            8,
            "unknown placeholder {order}",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_argument = "k"\n'
            'key_template = "k:{run}:{object}"\n',
            8,
            "uses {object}: set object_argument",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_argument = "k"\n'
            'key_template = "k:{user}"\n',
            8,
            'key_scope = "run" needs {run}',
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_argument = "k"\n'
            'object_argument = "o"\nkey_scope = "object"\nkey_template = "k:{run}:{object}"\n',
            10,
            "remove {run} and {step}",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_argument = "k"\n'
            'key_scope = "object"\n',
            8,
            "uses {object}: set object_argument",
        ),
        (
            SERVER + '[[tool]]\nserver = "biz"\nname = "t"\nkey_argument = "k"\n'
            'key_scope = "object"\nkey_template = "k:{user}"\n',
            9,
            'key_scope = "object" needs {object}',
        ),
        (
            SERVER
            + '[[tool]]\nserver = "biz"\nname = "t"\n\n[[tool]]\nserver = "biz"\nname = "t"\n',
            8,
            "tool `biz.t` is pinned twice (first at mcp.toml:4)",
        ),
    ],
)
def test_errors_name_file_and_line(text: str, line: int, problem: str) -> None:
    with pytest.raises(ToolConfigError) as info:
        parse_tools_config(text, "mcp.toml")
    err = info.value
    assert str(err) == f"mcp.toml:{err.line}: {err.problem}"
    assert problem in err.problem
    assert err.line == line, str(err)


def test_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the tool configuration"):
        load_tools_config(tmp_path / "missing.toml")
