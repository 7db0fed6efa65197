"""What one call did, with real files, real commands and a real watchdog observer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from shellward.types import EffectKind, FileEffect
from shellwardd.watch import WorkspaceMonitor
from shellwardd.watch.hashing import DIR_HASH

from .conftest import fill, run, sha, summary

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")


def test_empty_call_has_no_effects(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "a").write_bytes(b"x")
    effects = run(monitor, "true")
    assert effects.effects == () and not effects.from_rescan and effects.note == ""


def test_create(monitor: WorkspaceMonitor) -> None:
    effects = run(monitor, "printf new > created.txt")
    assert effects.effects == (
        FileEffect("created.txt", EffectKind.CREATED, after_hash=sha(b"new"), size=3),
    )


def test_modify_append_truncate(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "m").write_bytes(b"old")
    (ws / "a").write_bytes(b"line\n")
    (ws / "t").write_bytes(b"0123456789")
    monitor.flush()
    effects = run(monitor, "printf new > m && printf more >> a && truncate -s 4 t")
    assert effects.effects == (
        FileEffect("a", EffectKind.MODIFIED, sha(b"line\n"), sha(b"line\nmore"), 9),
        FileEffect("m", EffectKind.MODIFIED, sha(b"old"), sha(b"new"), 3),
        FileEffect("t", EffectKind.MODIFIED, sha(b"0123456789"), sha(b"0123"), 4),
    )


def test_delete(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "doomed").write_bytes(b"bye")
    monitor.flush()
    effects = run(monitor, "rm doomed")
    assert effects.effects == (
        FileEffect("doomed", EffectKind.DELETED, before_hash=sha(b"bye"), size=3),
    )


def test_rename_within_is_one_renamed_effect(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "old.txt").write_bytes(b"same")
    (ws / "dir").mkdir()
    (ws / "dir" / "x").write_bytes(b"in dir")
    monitor.flush()
    effects = run(monitor, "mv old.txt new.txt && mv dir moved")
    assert effects.effects == (
        FileEffect(
            "moved/x", EffectKind.RENAMED, sha(b"in dir"), sha(b"in dir"), 6, renamed_from="dir/x"
        ),
        FileEffect(
            "new.txt", EffectKind.RENAMED, sha(b"same"), sha(b"same"), 4, renamed_from="old.txt"
        ),
    )


def test_move_out_is_deleted(monitor: WorkspaceMonitor, ws: Path, tmp_path: Path) -> None:
    (ws / "leaving").write_bytes(b"away")
    (ws / "tree").mkdir()
    (ws / "tree" / "inner").write_bytes(b"deep")
    monitor.flush()
    outside = tmp_path / "outside"
    outside.mkdir()
    # Watchdog holds an unpaired move-out for 0.5 s: the closing barrier waits behind it.
    effects = run(monitor, f"mv leaving {outside}/ && mv tree {outside}/")
    assert effects.effects == (
        FileEffect("leaving", EffectKind.DELETED, before_hash=sha(b"away"), size=4),
        FileEffect("tree/inner", EffectKind.DELETED, before_hash=sha(b"deep"), size=4),
    )


def test_move_in_is_created(monitor: WorkspaceMonitor, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "tree").mkdir(parents=True)
    (outside / "arriving").write_bytes(b"hi")
    (outside / "tree" / "inner").write_bytes(b"deep")
    effects = run(monitor, f"mv {outside}/arriving {outside}/tree .")
    assert effects.effects == (
        FileEffect("arriving", EffectKind.CREATED, after_hash=sha(b"hi"), size=2),
        FileEffect("tree/inner", EffectKind.CREATED, after_hash=sha(b"deep"), size=4),
    )


def test_mkdir_p_and_fill(monitor: WorkspaceMonitor) -> None:
    effects = run(monitor, "mkdir -p a/b/c && for i in 1 2 3; do printf $i > a/b/c/f$i; done")
    assert effects.effects == tuple(
        FileEffect(f"a/b/c/f{i}", EffectKind.CREATED, after_hash=sha(str(i).encode()), size=1)
        for i in (1, 2, 3)
    )


def test_cp_r_of_2000_files(monitor: WorkspaceMonitor, tmp_path: Path) -> None:
    source = tmp_path / "source"
    files = fill(source, 2000)
    effects = run(monitor, f"cp -r {source} copy")
    assert not effects.from_rescan
    expected = sorted(f"copy/{p.relative_to(source)}" for p in files)
    assert [e.path for e in effects.effects] == expected
    assert all(e.kind is EffectKind.CREATED for e in effects.effects)
    first = effects.effects[0]
    assert first.after_hash == sha((source / first.path[len("copy/") :]).read_bytes())


def test_rm_rf_of_a_tree(monitor: WorkspaceMonitor, ws: Path) -> None:
    files = fill(ws / "tree", 300)
    monitor.flush()
    effects = run(monitor, "rm -rf tree")
    assert effects.effects == tuple(
        FileEffect(
            p.relative_to(ws).as_posix(),
            EffectKind.DELETED,
            before_hash=sha(f"content of file {i}\n".encode()),
            size=len(f"content of file {i}\n"),
        )
        for i, p in enumerate(files)
    )


def test_sed_i_is_one_modification(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "conf").write_bytes(b"key=old\n")
    monitor.flush()
    # sed writes a temporary file next to the target and renames it over the target.
    effects = run(monitor, "sed -i s/old/new/ conf")
    assert effects.effects == (
        FileEffect("conf", EffectKind.MODIFIED, sha(b"key=old\n"), sha(b"key=new\n"), 8),
    )


def test_touch_without_change_has_no_effect(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "same").write_bytes(b"unchanged")
    monitor.flush()
    assert run(monitor, "touch same && printf unchanged > same").effects == ()


def test_write_through_a_symlink_is_an_effect_on_the_target(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    (ws / "target").write_bytes(b"t")
    os.symlink("target", ws / "link")
    monitor.flush()
    effects = run(monitor, "printf u >> link")
    assert effects.effects == (FileEffect("target", EffectKind.MODIFIED, sha(b"t"), sha(b"tu"), 2),)


def test_symlinks_are_recorded_as_links(monitor: WorkspaceMonitor) -> None:
    effects = run(monitor, "ln -s /etc/hostname host && ln -s missing dangling")
    assert effects.effects == (
        FileEffect("dangling", EffectKind.CREATED, after_hash="symlink:missing", size=7),
        FileEffect("host", EffectKind.CREATED, after_hash="symlink:/etc/hostname", size=13),
    )


def test_read_only_command_over_2000_files_has_no_effects(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    fill(ws / "src", 2000)
    monitor.flush()
    effects = run(
        monitor, "cat $(find src -type f) | wc -c > /dev/null && grep -rq zzz src || true"
    )
    assert effects.effects == () and not effects.from_rescan


def test_writes_into_git_are_one_effect_on_the_directory(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    (ws / "a").write_bytes(b"a")
    monitor.flush()
    git = "git -c user.name=t -c user.email=t@example.com"
    assert summary(run(monitor, "git init -q .")) == [("created", ".git/")]
    assert summary(run(monitor, f"git add a && {git} commit -qm one")) == [("modified", ".git/")]
    assert monitor.snapshot().keys() == {"a"}  # git internals are not indexed
    assert summary(run(monitor, "rm -rf .git")) == [("deleted", ".git/")]


def test_ignored_and_private_paths_are_not_reported(ws: Path, state_dir: Path) -> None:
    monitor = WorkspaceMonitor(ws, state_dir, ignore_globs=["*.pyc", "node_modules"])
    monitor.start()
    try:
        assert monitor.wait_ready(30)
        effects = run(monitor, "mkdir -p node_modules/x && touch node_modules/x/i.js m.pyc k")
        assert summary(effects) == [("created", "k")]
        assert set(monitor.snapshot()) == {"k"}
        # The cookie directory keeps itself out of the user's `git status`.
        assert (ws / ".shellward" / "cookies" / ".gitignore").read_text() == "*\n"
    finally:
        monitor.stop()


def test_file_created_and_removed_within_a_call_leaves_nothing(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    effects = run(monitor, "printf x > tmp && mkdir d && mv tmp d/ && rm -r d")
    assert effects.effects == ()


def test_directory_replaced_by_a_file(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "p").mkdir()
    (ws / "p" / "child").write_bytes(b"c")
    monitor.flush()
    effects = run(monitor, "rm -r p && printf f > p")
    assert effects.effects == (
        FileEffect("p", EffectKind.CREATED, after_hash=sha(b"f"), size=1),
        FileEffect("p/child", EffectKind.DELETED, before_hash=sha(b"c"), size=1),
    )
    assert set(monitor.snapshot()) == {"p"}
    shutil.rmtree(ws / ".shellward")
    assert run(monitor, "true").effects == ()  # the cookie directory comes back


# Directories are effects: before, `mktemp -d -p .` (or an `rmdir`) left no effect at all,
# so a command that only made an empty directory passed for a pure read.
def test_an_empty_directory_created_is_an_effect(monitor: WorkspaceMonitor, ws: Path) -> None:
    effects = run(monitor, "mktemp -d -p . > /dev/null")
    (made,) = effects.effects
    assert made.kind is EffectKind.CREATED and made.after_hash == DIR_HASH
    assert made.path.endswith("/") and (ws / made.path).is_dir()


def test_only_the_deepest_new_directory_is_reported(monitor: WorkspaceMonitor) -> None:
    assert summary(run(monitor, "mkdir -p a/b/c && mkdir x")) == [
        ("created", "a/b/c/"),
        ("created", "x/"),
    ]
    # A directory that holds a new file is implied by the file's effect.
    assert summary(run(monitor, "mkdir -p d/e && printf 1 > d/e/f")) == [("created", "d/e/f")]


def test_removed_and_moved_directories(monitor: WorkspaceMonitor, ws: Path) -> None:
    (ws / "empty").mkdir()
    (ws / "tree" / "sub").mkdir(parents=True)
    (ws / "box").mkdir()
    monitor.flush()
    assert summary(run(monitor, "rmdir empty && rm -r tree")) == [
        ("deleted", "empty/"),
        ("deleted", "tree/"),
    ]
    effects = run(monitor, "mv box crate")
    assert effects.effects == (
        FileEffect("crate/", EffectKind.RENAMED, DIR_HASH, DIR_HASH, renamed_from="box/"),
    )


def test_nested_and_renamed_directories_among_many_stay_exact(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    # A call looks only at the subtrees its events covered: the directories beside them
    # (here with names that share a prefix with the dirty ones) must neither be reported
    # nor dropped from what a later call compares with.
    for name in ("a", "ab", "a-b", "b"):
        (ws / name / "in" / "deep").mkdir(parents=True)
    monitor.flush()
    assert summary(run(monitor, "mv a/in a/out && mkdir -p b/in/new/er")) == [
        ("renamed", "a/out/deep/"),
        ("created", "b/in/new/er/"),
    ]
    # Alone: a directory removed and one made in the same call may share an inode.
    assert summary(run(monitor, "rm -r ab/in/deep")) == [("deleted", "ab/in/deep/")]
    assert run(monitor, "true").effects == ()
    assert summary(run(monitor, "rm -r a && rmdir a-b/in/deep b/in/new/er")) == [
        ("deleted", "a-b/in/deep/"),
        ("deleted", "a/"),
        ("deleted", "b/in/new/er/"),
    ]
    assert summary(run(monitor, "mkdir a && rmdir ab/in a-b/in/")) == [
        ("deleted", "a-b/in/"),
        ("created", "a/"),
        ("deleted", "ab/in/"),
    ]


def test_directories_from_before_the_call_or_made_and_gone_leave_nothing(
    monitor: WorkspaceMonitor, ws: Path
) -> None:
    (ws / "external").mkdir()  # made while no call ran: not the call's
    assert run(monitor, "mkdir t && rmdir t").effects == ()
    assert run(monitor, "rmdir external").effects == (
        FileEffect("external/", EffectKind.DELETED, before_hash=DIR_HASH),
    )


def test_directories_survive_a_restart(ws: Path, state_dir: Path) -> None:
    (ws / "kept").mkdir()
    first = WorkspaceMonitor(ws, state_dir)
    first.start()
    assert first.wait_ready(30)
    first.stop()
    again = WorkspaceMonitor(ws, state_dir)
    again.start()
    try:
        assert again.wait_ready(30)
        assert summary(run(again, "rmdir kept")) == [("deleted", "kept/")]
    finally:
        again.stop()


def test_directory_effects_after_lost_events(monitor: WorkspaceMonitor, ws: Path) -> None:
    watch = monitor.begin_call(timeout=30)
    monitor.on_overflow()  # what the observer reports when inotify dropped events
    (ws / "made").mkdir()
    effects = monitor.finish_call(watch)
    assert effects.from_rescan
    assert [(e.kind, e.path) for e in effects.effects] == [(EffectKind.CREATED, "made/")]
