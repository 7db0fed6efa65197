"""Operator limits and sandbox options: a request may only lower a limit, merged in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from shellwardd.config import DEFAULT_HIDDEN, GIB, Limits, load_config, merge_limits
from shellwardd.errors import ConfigError

OPERATOR = Limits(
    cpu_seconds=100,
    address_space_bytes=1 * GIB,
    max_processes=50,
    file_size_bytes=10_000,
    memory_bytes=2 * GIB,
    tmp_bytes=64 << 20,
)


def asked(**fields: int) -> Limits:
    """Requested limits as the server builds them: 0 = not asked for."""
    return Limits(**{name: fields.get(name, 0) for name in Limits.__dataclass_fields__})


def test_no_request_limits_means_the_operators() -> None:
    assert merge_limits(OPERATOR, None) == OPERATOR


def test_one_requested_limit_keeps_the_others_at_the_operators() -> None:
    # Before: the server filled the unset fields with the built-in defaults (16 GiB).
    merged = merge_limits(OPERATOR, asked(cpu_seconds=10))
    assert merged == Limits(
        cpu_seconds=10,
        address_space_bytes=1 * GIB,
        max_processes=50,
        file_size_bytes=10_000,
        memory_bytes=2 * GIB,
        tmp_bytes=64 << 20,
    )


def test_a_request_cannot_raise_a_limit() -> None:
    huge = Limits(*(2**62,) * 6)
    assert merge_limits(OPERATOR, huge) == OPERATOR


def test_a_request_may_set_a_limit_the_operator_left_open() -> None:
    operator = Limits(cpu_seconds=0)
    assert merge_limits(operator, asked(cpu_seconds=5)).cpu_seconds == 5


def test_limit_flags_and_env(tmp_path: Path) -> None:
    config = load_config(
        ["--workspace", str(tmp_path), "--limit-tmp", "1000", "--limit-cgroup-memory", "0"],
        env={"SHELLWARD_LIMIT_PROCESSES": "7"},
    )
    assert config.limits.tmp_bytes == 1000 and config.limits.memory_bytes == 0
    assert config.limits.max_processes == 7
    assert Limits().tmp_bytes <= 1 * GIB
    with pytest.raises(ConfigError, match="--limit-tmp must be positive"):
        load_config(["--workspace", str(tmp_path), "--limit-tmp", "0"], env={})


def test_hidden_set_is_configurable(tmp_path: Path) -> None:
    base = ["--workspace", str(tmp_path)]
    assert load_config(base, env={}).hidden == DEFAULT_HIDDEN
    config = load_config([*base, "--hide", ".config/acme", "--unhide", ".docker"], env={})
    assert ".config/acme" in config.hidden and ".docker" not in config.hidden
    from_env = load_config(base, env={"SHELLWARD_HIDE": "/srv/keys:.acme"})
    assert {"/srv/keys", ".acme"} <= set(from_env.hidden)
    with pytest.raises(ConfigError, match="not in the default hidden set"):
        load_config([*base, "--unhide", ".nothing"], env={})


@pytest.mark.parametrize(
    "entry", [".config/gh", ".config/gcloud", ".claude", ".codex", ".config/*token*", ".docker",
              ".kube", ".npmrc", ".pypirc", ".cargo/credentials.toml", ".terraform.d", ".azure",
              ".aws", ".ssh"],
)  # fmt: skip
def test_default_hidden_set_covers_credential_stores(entry: str) -> None:
    assert entry in DEFAULT_HIDDEN


def test_git_switch_and_sandbox_uid(tmp_path: Path) -> None:
    base = ["--workspace", str(tmp_path)]
    assert not load_config(base, env={}).git_writable
    assert load_config([*base, "--git-writable"], env={}).git_writable
    assert load_config(base, env={"SHELLWARD_GIT_WRITABLE": "1"}).git_writable
    assert load_config([*base, "--sandbox-uid", "4242"], env={}).sandbox_uid == 4242
    with pytest.raises(ConfigError, match="not root"):
        load_config([*base, "--sandbox-uid", "0"], env={})


def test_overlay_choice(tmp_path: Path) -> None:
    base = ["--workspace", str(tmp_path)]
    assert load_config(base, env={}).overlay == "auto"
    assert load_config([*base, "--overlay", "fuse"], env={}).overlay == "fuse"
    assert load_config(base, env={"SHELLWARD_OVERLAY": "kernel"}).overlay == "kernel"
    with pytest.raises(ConfigError, match="auto, kernel or fuse"):
        load_config([*base, "--overlay", "aufs"], env={})
