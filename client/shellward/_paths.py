"""Default locations shared by the daemon and the CLI, so both agree without flags."""

from __future__ import annotations

import os
from pathlib import Path


def default_socket_path() -> Path:
    """``$XDG_RUNTIME_DIR/shellward/shellward.sock``, or a private dir under /tmp."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return Path(runtime_dir) / "shellward" / "shellward.sock"
    return Path("/tmp") / f"shellward-{os.getuid()}" / "shellward.sock"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/shellward`` (``~/.local/state/shellward`` when unset)."""
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "shellward"


def default_user_rules() -> Path:
    """``$XDG_CONFIG_HOME/shellward/rules.toml`` (``~/.config/...`` when unset)."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "shellward" / "rules.toml"
