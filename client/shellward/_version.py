"""The installed package's version, from its metadata (one source: pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The version pip installed, or ``0+unknown`` when run from a tree that is not installed."""
    try:
        return version("shellward")
    except PackageNotFoundError:
        return "0+unknown"
