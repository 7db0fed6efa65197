"""A staged call from its overlay to its final state: effects, conflicts, commit, journal.

Choices, and why
- **Commit whatever the exit status**, as a command writing the workspace directly would
  have left its files, failed or not; **discard on timeout, cancellation or a sandbox
  that failed**: what a killed command staged is half of what it meant to do, and
  discarding it leaves the workspace exactly as it was, which a human or a retry can
  reason about (the replay table treats such a call as not having touched files).
- **Conflicts keep the staged writes** in ``<state>/staging/<call_id>`` for a human: the
  call is ``failed`` with CONFLICT, nothing is applied, and the sentence names the files
  and the directory.
- **The journal is the ledger row.** Before the first path is applied the call's outcome
  is written with status ``committing`` and the staging directory in ``commit_journal``.
  Once applied, the staging directory is moved away, then one transaction records
  ``committed`` and the final status: one durable ledger commit after the apply, not two.
  It is written while the write detector's window is still open, so that the observer
  handles the commit's events meanwhile (the closing barrier waits for them). A crash in
  between leaves the row ``committing``: :func:`finish_commits` applies what remains of
  the upper layer at the next start-up (apply is idempotent per path; an upper already
  moved away has nothing left) and records the final status the journal names. Nothing
  is checked again at that point: the check was made before the journal was written, and
  the workspace's owner is who changed it since.
- **One commit at a time per workspace**: the commit runs in an exclusive window of the
  write detector, so its writes update the index like any call's and are never taken for
  another call's or for an external edit. It holds the window only while it checks and
  moves files (milliseconds), not while the command runs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from shellward.types import CallStatus, Code, EffectKind, FileEffect, LedgerEntry
from shellwardd.errors import LedgerError
from shellwardd.ledger import Committed, LedgerStore
from shellwardd.outcomes import reconcile
from shellwardd.watch import CallEffects, WorkspaceMonitor
from shellwardd.watch.detector import StagedView
from shellwardd.watch.hashing import IndexEntry

from . import preview
from .area import StagedDirs, StagingArea
from .blobs import BlobError, BlobStore
from .commit import apply, conflicts, keep_before_images
from .upper import Entry, UpperRefused, staged_effects

log = logging.getLogger("shellwardd.staging")

# Who staged files must belong to once committed in a workspace (None: leave them).
OwnerOf = Callable[[Path], tuple[int, int] | None]


def owners(as_root: bool) -> OwnerOf:
    """A root daemon gives what it commits to the workspace root's owner; any other daemon
    leaves files as its sandbox (its own uid) wrote them."""

    def owner_of(workspace: Path) -> tuple[int, int] | None:
        if not as_root:
            return None
        st = workspace.stat()
        return st.st_uid, st.st_gid

    return owner_of


@dataclass(frozen=True)
class Settled:
    """A staged call's final entry. ``recorded``: already written (a commit's end);
    ``committed``: its writes were applied but that write failed, so the row is still
    ``committing`` and the caller's final write must pass it to :meth:`LedgerStore.finish`."""

    entry: LedgerEntry
    committed: Committed | None = None
    recorded: bool = False


class Stager:
    def __init__(
        self,
        area: StagingArea,
        blobs: BlobStore,
        ledger: LedgerStore,
        sandbox_owner: tuple[int, int] | None,
    ) -> None:
        self.area = area
        self._blobs = blobs
        self._ledger = ledger
        # Who the upper root belongs to (the sandbox user of a root daemon), so that the
        # command may write the workspace root; and so who the commit hands files back from.
        self.sandbox_owner = sandbox_owner
        self._owner_of = owners(sandbox_owner is not None)

    def preview(self, final: LedgerEntry, dirs: StagedDirs, view: StagedView) -> str | None:
        """Keep a preview run's result for its approval (:mod:`.preview`); the diff to show,
        or None when there is nothing to keep (it was cut short or its upper is refused)."""
        if _cut_short(final):
            self.area.discard(dirs)
            return None
        try:
            effects = tuple(
                staged_effects(dirs.upper, Path(final.workspace), view, self.area.fuse_markers)
            )
        except (UpperRefused, OSError):
            self.area.discard(dirs)
            return None
        preview.save(dirs, final, effects)
        return preview.unified_diff(Path(final.workspace), dirs.upper, effects)

    def has_preview(self, call_id: str) -> bool:
        return (self.area.path(call_id) / preview.PREVIEW_FILE).is_file()

    def settle(
        self,
        final: LedgerEntry,
        dirs: StagedDirs,
        view: StagedView | None,
        monitor: WorkspaceMonitor,
        effects: tuple[FileEffect, ...] | None = None,
    ) -> Settled:
        """The call's final entry once its staged writes are applied (the row is then
        ``committing`` until the final write, see :class:`Settled`), kept (a conflict) or
        discarded. ``effects``: already known (a preview's), else read from the upper
        layer against ``view``."""
        workspace = Path(final.workspace)
        if _cut_short(final):
            self.area.discard(dirs)
            return Settled(_discarded(final))
        # The staged files' entries, for the write detector to take once they are moved in;
        # the upper as listed, for the apply (None: it lists the upper itself).
        hashed: dict[str, IndexEntry] = {}
        listing: list[Entry] | None = None
        try:
            if effects is None:
                assert view is not None
                listing = []
                effects = tuple(
                    staged_effects(
                        dirs.upper, workspace, view, self.area.fuse_markers, hashed, listing
                    )
                )
                # Read: from now on the index's updates (the commit's own first) need not
                # save what they replace for this call.
                view.close()
        except (UpperRefused, OSError) as exc:
            self.area.discard(dirs)
            return Settled(_refused(final, str(exc)))
        if not effects:
            self.area.discard(dirs)
            return Settled(reconcile(final, CallEffects(())))
        window = monitor.begin_call(exclusive=True)
        moved: dict[str, IndexEntry] = {}
        try:
            found = conflicts(workspace, effects)
            if not found:
                try:
                    effects, found = keep_before_images(workspace, effects, self._blobs)
                except BlobError as exc:
                    return Settled(_refused(final, str(exc), keep=dirs.root))
            if found:
                log.warning("staged writes conflict", extra={"call_id": final.call_id,
                                                             "paths": found})  # fmt: skip
                return Settled(_conflict(reconcile(final, CallEffects(effects)), found, dirs.root))
            committed = reconcile(final, CallEffects(effects))
            journal = json.dumps({"staged": str(dirs.root), "status": final.status.value})
            self._ledger.begin_commit(committed, journal, f"{len(effects)} effect(s) staged")
            _pause_for_tests()
            monitor.will_move_in(window, _files_applied(effects, hashed))
            applied = apply(
                dirs.upper, workspace, self._owner_of(workspace), self.area.fuse_markers, listing
            )
            moved = hashed
            done = Committed(time.time(), f"applied {applied} path(s)")
            # Before the final write: a crash after this finds no upper to apply again.
            self.area.discard(dirs)
            # A staged call ends when its writes are in the workspace.
            entry = replace(committed, finished_at=time.time())
            try:
                self._ledger.finish(entry, committed=done)
            except LedgerError as exc:
                log.error("final record failed", extra={"call_id": entry.call_id,
                                                        "problem": exc.message})  # fmt: skip
                return Settled(entry, done)  # the caller's final write tries once more
        finally:
            monitor.finish_call(window, written=moved)
        return Settled(entry, recorded=True)

    def forget_uncommitted(self, call_ids: list[str]) -> None:
        """At start-up: the calls a crash left ``started`` (now ``uncertain``) that were
        staged never changed the workspace. Their staged writes are discarded and their
        entries say so, with no file effects: a replay check then finds nothing to
        conflict with (the network, if it was granted, is another matter)."""
        for call_id in call_ids:
            staged = self.area.path(call_id)
            entry = self._ledger.get(call_id)
            if entry is None or not staged.is_dir():
                continue
            StagingArea.discard_path(staged)
            note = "the daemon stopped before the commit: the workspace is unchanged"
            self._ledger.finish(
                replace(
                    entry,
                    file_effects=(),
                    effects_recorded=True,
                    note="; ".join(filter(None, [entry.note, note])),
                    content=f"{entry.content} Its file writes were staged and never applied: "
                    "the workspace is as it was before the call.",
                ),
                note,
            )

    def finish_commits(self) -> list[str]:
        """At start-up, before the workspaces are watched: finish the commits a crash cut
        short (see the module docstring); returns their call ids."""
        finished = []
        for entry, journal in self._ledger.commits():
            record = json.loads(journal or "{}")
            staged = Path(record.get("staged") or self.area.path(entry.call_id))
            status = CallStatus(record.get("status", CallStatus.UNCERTAIN.value))
            workspace = Path(entry.workspace)
            committed = None
            if entry.status is CallStatus.COMMITTING and (staged / "upper").is_dir():
                applied = apply(
                    staged / "upper", workspace, self._owner_of(workspace), self.area.fuse_markers
                )
                detail = f"applied {applied} remaining path(s) at start-up"
                committed = Committed(time.time(), detail)
            done = replace(entry, status=status, finished_at=time.time())
            self._ledger.finish(done, "commit finished at start-up", committed)
            StagingArea.discard_path(staged)
            finished.append(entry.call_id)
        return finished


def _files_applied(effects: tuple[FileEffect, ...], hashed: dict[str, IndexEntry]) -> list[str]:
    """The files (not directories) a commit moves in or removes: those staged (hashed),
    and those deleted or renamed away."""
    gone = (
        e.renamed_from if e.kind is EffectKind.RENAMED else e.path
        for e in effects
        if e.kind in (EffectKind.DELETED, EffectKind.RENAMED)
    )
    return [*hashed, *(path for path in gone if path and not path.endswith("/"))]


def _cut_short(final: LedgerEntry) -> bool:
    """Timed out, cancelled, crashed or never started: what it staged is not committed."""
    return final.code in (
        Code.TIMEOUT, Code.SIDE_EFFECT_UNCERTAIN, Code.INTERRUPTED, Code.SANDBOX_ERROR,
    )  # fmt: skip


def _pause_for_tests() -> None:
    """SHELLWARD_TEST_COMMIT_PAUSE=<file>: wait here (journal written, nothing applied)
    until the file exists; how the crash-mid-commit test kills the daemon at this point."""
    barrier = os.environ.get("SHELLWARD_TEST_COMMIT_PAUSE")
    if not barrier:
        return
    Path(f"{barrier}.reached").touch()
    while not Path(barrier).exists():
        time.sleep(0.02)


def _discarded(final: LedgerEntry) -> LedgerEntry:
    note = "its staged writes were discarded: the workspace is as it was before the call"
    return replace(
        final,
        content=f"{final.content} Its file writes were discarded: the workspace is unchanged.",
        note="; ".join(filter(None, [final.note, note])),
        effects_recorded=True,
    )


def _refused(final: LedgerEntry, why: str, keep: Path | None = None) -> LedgerEntry:
    kept = f" Its staged writes are kept in {keep} for a human." if keep else ""
    return replace(
        final,
        status=CallStatus.FAILED,
        code=Code.PERMISSION_DENIED,
        content=f"The command ran, but its file writes were not committed: {why}. The "
        f"workspace is unchanged.{kept} Do not retry as is; tell the user.",
        effects_recorded=True,
    )


def _conflict(final: LedgerEntry, found: list[str], kept: Path) -> LedgerEntry:
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return replace(
        final,
        status=CallStatus.FAILED,
        code=Code.CONFLICT,
        content=f"The command ran, but its file writes were not applied: the workspace "
        f"changed meanwhile ({shown}). Nothing was applied; the workspace holds the other "
        f"change. The staged result is kept in {kept} for a human. Look at the files "
        "again and decide whether to run the command once more.",
        file_effects=(),
        note="; ".join(filter(None, [final.note, f"commit conflict: {shown}"])),
        effects_recorded=True,
    )
