"""From the before and after state of the paths a call touched to its file effects.

Effects compare states, not events: a file created and removed within one call leaves no
effect, ``sed -i`` (temp file written, then renamed over the target) leaves one MODIFIED
of the target, and ``touch`` leaves none because the content did not change.

A rename is reported as one RENAMED effect: a path that held nothing before and a path
that holds nothing after are paired when the new file has the inode and the content the
old one had (what rename(2) preserves; a copy then delete gets a new inode and stays a
DELETED plus a CREATED). For RENAMED, ``renamed_from`` held ``before_hash`` before the
call and is absent after; ``path`` was absent before and holds ``after_hash`` (equal to
``before_hash``) after. A rename over an existing file is a DELETED of the source and a
MODIFIED of the target. ``size`` is the size after the call, or before it for DELETED.

Directories are effects too (an empty one left by `mktemp -d -p .` changes what a second run
finds): a directory that appeared is CREATED, one that went away DELETED, one that moved
(same inode) RENAMED, with paths ending in ``/`` and DIR_HASH as the hash of a directory,
which is what the replay check compares with the workspace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from shellward.types import EffectKind, FileEffect

from .hashing import DIR_HASH, IndexEntry

States = Mapping[str, tuple[IndexEntry | None, IndexEntry | None]]


def diff(
    states: States, *, from_rescan: bool = False, by_content: bool = False
) -> list[FileEffect]:
    """The effects of ``states`` (path → (before, after)), sorted by path.

    ``by_content``: pair a rename by content alone (a staged call's renamed file is a new
    inode in its overlay's upper layer)."""
    created: list[tuple[str, IndexEntry]] = []
    deleted: dict[tuple[int, bool, bytes], list[tuple[str, IndexEntry]]] = {}
    effects: list[FileEffect] = []
    for path in sorted(states):
        before, after = states[path]
        if before is None and after is not None:
            created.append((path, after))
        elif before is not None and after is None:
            key = (0 if by_content else before.inode, before.is_link, before.digest)
            deleted.setdefault(key, []).append((path, before))
        elif before is not None and after is not None and not before.same_content(after):
            effects.append(
                FileEffect(
                    path,
                    EffectKind.MODIFIED,
                    before_hash=before.hash,
                    after_hash=after.hash,
                    size=after.size,
                    from_rescan=from_rescan,
                )
            )
    for path, after in created:
        key = (0 if by_content else after.inode, after.is_link, after.digest)
        sources = deleted.get(key) if after.digest else None
        if sources:
            old_path, before = sources.pop(0)
            effects.append(
                FileEffect(
                    path,
                    EffectKind.RENAMED,
                    before_hash=before.hash,
                    after_hash=after.hash,
                    size=after.size,
                    renamed_from=old_path,
                    from_rescan=from_rescan,
                )
            )
        else:
            effects.append(
                FileEffect(
                    path,
                    EffectKind.CREATED,
                    after_hash=after.hash,
                    size=after.size,
                    from_rescan=from_rescan,
                )
            )
    for sources in deleted.values():
        effects.extend(
            FileEffect(
                path,
                EffectKind.DELETED,
                before_hash=before.hash,
                size=before.size,
                from_rescan=from_rescan,
            )
            for path, before in sources
        )
    effects.sort(key=lambda e: e.path)
    return effects


def dir_effects(
    created: Mapping[str, int],
    removed: Mapping[str, int],
    files: Sequence[FileEffect],
    *,
    from_rescan: bool = False,
) -> list[FileEffect]:
    """The effects of directories that appeared (``created``) or went away (``removed``),
    each given with its inode: one of each with the same inode is one RENAMED.

    A directory another effect already implies is left out: one that holds a created,
    modified or moved-in path after the call (`mkdir -p a/b && touch a/b/f` is the one
    effect `a/b/f`), one inside a removed directory, or one whose files were removed.
    """
    gone = {inode: path for path, inode in removed.items()}
    effects = []
    for path, inode in created.items():
        old = gone.pop(inode, None)
        effects.append(
            FileEffect(
                f"{path}/",
                EffectKind.CREATED if old is None else EffectKind.RENAMED,
                before_hash="" if old is None else DIR_HASH,
                after_hash=DIR_HASH,
                renamed_from="" if old is None else f"{old}/",
                from_rescan=from_rescan,
            )
        )
    effects.extend(
        FileEffect(f"{path}/", EffectKind.DELETED, before_hash=DIR_HASH, from_rescan=from_rescan)
        for path in gone.values()
    )
    every = (*files, *effects)
    holds_after = _parents(e.path for e in every if e.kind is not EffectKind.DELETED)
    # A moved directory that holds other effects is implied by them where it is now, but
    # not where it was: that path is reported gone. (The pair may not even be a move:
    # `rm -r a && mkdir -p b/c` can give `b/` the inode `a/` had.)
    effects = [
        FileEffect(e.renamed_from, EffectKind.DELETED, DIR_HASH, from_rescan=from_rescan)
        if e.kind is EffectKind.RENAMED and e.path in holds_after
        else e
        for e in effects
    ]
    # A removed directory is left out under a removed directory, or when files removed
    # or moved from it already say so (`rm -rf tree` is the files' effects).
    gone_dirs = {e.path for e in effects if e.kind is EffectKind.DELETED}
    emptied = _parents(e.path for e in files if e.kind is EffectKind.DELETED)
    emptied |= _parents(e.renamed_from for e in (*files, *effects) if e.renamed_from)
    return [
        e
        for e in effects
        if (
            e.path not in emptied and not _parents([e.path]) & gone_dirs
            if e.kind is EffectKind.DELETED
            else e.path not in holds_after
        )
    ]


def _parents(paths: Iterable[str]) -> set[str]:
    """Every proper parent directory of ``paths``, as ``dir/``."""
    found: set[str] = set()
    for path in paths:
        end = len(path.rstrip("/"))
        while (end := path.rfind("/", 0, end)) > 0:
            parent = path[: end + 1]
            if parent in found:
                break
            found.add(parent)
    return found
