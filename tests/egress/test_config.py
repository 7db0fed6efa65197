"""The operator's network settings: flags, their variables, and the --network-config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellwardd.config import load_config
from shellwardd.errors import ConfigError


def test_flags_and_the_file_add_up(tmp_path: Path) -> None:
    file = tmp_path / "network.toml"
    file.write_text(
        'allow_domains = ["*.corp.example", "10.0.0.0/8"]\n'
        'deny_domains = ["Secret.corp.example."]\n'
        'resolve = { "git.corp.example" = "10.1.2.3" }\n'
    )
    config = load_config(
        ["--workspace", str(tmp_path), "--allow-domain", "pypi.org", "--network-config", str(file),
         "--resolve", "api.test=203.0.113.7"],
        env={"SHELLWARD_DENY_DOMAIN": "bad.test"},
    )  # fmt: skip
    assert config.allow_domains == ("pypi.org", "*.corp.example", "10.0.0.0/8")
    assert config.deny_domains == ("bad.test", "secret.corp.example")
    assert set(config.pinned_hosts) == {
        ("api.test", "203.0.113.7"),
        ("git.corp.example", "10.1.2.3"),
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('allow_domains = "pypi.org"\n', "network.toml:1: `allow_domains` must be a list"),
        ('allow = ["pypi.org"]\n', "network.toml:1: unknown top-level key `allow`"),
        ('allow_domains = ["http://x"]\n', "neither a domain"),
        ('resolve = { "a.test" = "not-an-address" }\n', "not NAME=ADDRESS"),
        ("allow_domains = [\n", "invalid TOML"),
    ],
)
def test_a_bad_file_is_refused_with_its_line(tmp_path: Path, text: str, words: str) -> None:
    file = tmp_path / "network.toml"
    file.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(["--workspace", str(tmp_path), "--network-config", str(file)], env={})
    assert words in info.value.message


def test_a_bad_flag_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(["--workspace", str(tmp_path), "--allow-domain", "exa mple.com"], env={})
    assert "--allow-domain" in info.value.message and "neither a domain" in info.value.message
