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
"""

from __future__ import annotations

from collections.abc import Mapping

from shellward.types import EffectKind, FileEffect

from .hashing import IndexEntry

States = Mapping[str, tuple[IndexEntry | None, IndexEntry | None]]


def diff(states: States, *, from_rescan: bool = False) -> list[FileEffect]:
    """The effects of ``states`` (path → (before, after)), sorted by path."""
    created: list[tuple[str, IndexEntry]] = []
    deleted: dict[tuple[int, bool, bytes], list[tuple[str, IndexEntry]]] = {}
    effects: list[FileEffect] = []
    for path in sorted(states):
        before, after = states[path]
        if before is None and after is not None:
            created.append((path, after))
        elif before is not None and after is None:
            deleted.setdefault((before.inode, before.is_link, before.digest), []).append(
                (path, before)
            )
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
        sources = deleted.get((after.inode, after.is_link, after.digest)) if after.digest else None
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
