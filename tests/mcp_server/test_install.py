"""``shellward mcp install``: each host's file written once, other entries kept, a file the
host could not read left alone, ``--dry-run`` writing nothing."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from shellward.cli import main

ENTRY = {"command": sys.executable, "args": ["-m", "shellward.cli", "mcp"]}


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    return project, home


def _install(*args: str) -> int:
    return main(["mcp", "install", *args])


@pytest.mark.parametrize(
    ("client", "scope", "where", "key"),
    [
        ("claude-code", "project", "project/.mcp.json", "mcpServers"),
        ("claude-code", "user", "home/.claude.json", "mcpServers"),
        ("cursor", "project", "project/.cursor/mcp.json", "mcpServers"),
        ("cursor", "user", "home/.cursor/mcp.json", "mcpServers"),
        ("gemini", "project", "project/.gemini/settings.json", "mcpServers"),
        ("gemini", "user", "home/.gemini/settings.json", "mcpServers"),
        ("vscode", "project", "project/.vscode/mcp.json", "servers"),
    ],
)
def test_json_hosts_get_the_entry_once_and_keep_the_others(
    places: tuple[Path, Path], client: str, scope: str, where: str, key: str
) -> None:
    path = places[0].parent / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"theme": "dark", key: {"other": {"command": "x"}}}))
    assert _install("--client", client, "--scope", scope) == 0
    written = path.read_text()
    document = json.loads(written)
    wanted = {"type": "stdio", **ENTRY} if client == "vscode" else ENTRY
    assert document[key] == {"other": {"command": "x"}, "shellward": wanted}
    assert document["theme"] == "dark"
    assert _install("--client", client, "--scope", scope) == 0
    assert path.read_text() == written  # idempotent: a second run changes nothing


def test_dry_run_prints_the_change_and_writes_nothing(
    places: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _install("--client", "cursor", "--dry-run") == 0
    assert '"shellward"' in capsys.readouterr().out
    assert not (places[0] / ".cursor").exists()


def test_a_broken_file_is_left_alone(
    places: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = places[0] / ".mcp.json"
    path.write_text('{"mcpServers": {"other": ')
    assert _install("--client", "claude-code") == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert path.read_text() == '{"mcpServers": {"other": '


def test_codex_toml_is_appended_once_keeping_comments(places: tuple[Path, Path]) -> None:
    path = places[1] / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('# my settings\nmodel = "o3"\n\n[mcp_servers.other]\ncommand = "x"\n')
    assert _install("--client", "codex") == 0
    written = path.read_text()
    assert written.startswith('# my settings\nmodel = "o3"\n')
    document = tomllib.loads(written)
    assert document["mcp_servers"]["shellward"] == ENTRY
    assert document["mcp_servers"]["other"] == {"command": "x"}
    assert _install("--client", "codex") == 0
    assert path.read_text() == written


def test_codex_entry_that_differs_is_not_rewritten(
    places: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = places[1] / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('[mcp_servers.shellward]\ncommand = "/old/shellward"\nargs = ["mcp"]\n')
    assert _install("--client", "codex") == 2
    assert "differs" in capsys.readouterr().err
    assert path.read_text().startswith('[mcp_servers.shellward]\ncommand = "/old/shellward"')


def test_a_scope_the_host_lacks_is_refused(
    places: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _install("--client", "vscode", "--scope", "user") == 2
    assert "--scope project" in capsys.readouterr().err
    assert _install("--client", "codex", "--scope", "project") == 2


def test_the_socket_given_goes_into_the_entry(places: tuple[Path, Path]) -> None:
    assert main(["--socket", "run/s.sock", "mcp", "install", "--client", "gemini"]) == 0
    document = json.loads((places[0] / ".gemini" / "settings.json").read_text())
    args = document["mcpServers"]["shellward"]["args"]
    assert args == ["-m", "shellward.cli", "--socket", str(places[0] / "run/s.sock"), "mcp"]
    assert oct((places[0] / ".gemini" / "settings.json").stat().st_mode & 0o777) == "0o600"
