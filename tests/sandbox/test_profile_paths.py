"""Which hidden entries the profile leaves to the workspace: ``_is_inside`` compares parts,
never strings (a sibling sharing the workspace's name as a prefix is not inside it)."""

from __future__ import annotations

from itertools import product
from pathlib import Path

from shellwardd.sandbox.profile import _is_inside

PATHS = [
    Path(p)
    for p in (
        "/", "//", "//srv", "/srv", "/srv/ws", "/srv/ws/.env", "/srv/ws/a/b", "/srv/ws-evil",
        "/srv/ws-evil/.env", "/srv/w", "/srv/wsx/ws", "/root/.ssh", "/root/.ssh/id_ed25519",
    )
]  # fmt: skip


def test_a_sibling_with_the_same_prefix_is_not_inside() -> None:
    assert not _is_inside(Path("/srv/ws-evil/.env"), Path("/srv/ws"))
    assert not _is_inside(Path("/srv/ws"), Path("/srv/ws-evil"))
    assert _is_inside(Path("/srv/ws/.env"), Path("/srv/ws"))
    assert _is_inside(Path("/srv/ws"), Path("/srv/ws"))


def test_absolute_paths_answer_as_pathlib_parents_do() -> None:
    for path, root in product(PATHS, PATHS):
        assert _is_inside(path, root) == (path == root or root in path.parents), (path, root)


def test_a_relative_root_holds_nothing() -> None:
    assert not _is_inside(Path("/srv/ws"), Path("."))
